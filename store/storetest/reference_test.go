package storetest_test

import (
	"testing"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/storetest"
)

func TestReference(t *testing.T) {
	storetest.Run(t, func(t *testing.T) portero.Store { return storetest.NewReference() })
}
