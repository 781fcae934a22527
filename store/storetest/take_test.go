package storetest_test

import (
	"testing"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/storetest"
)

// TestReferenceTake runs the take tables against Reference itself, whose
// Take is algorithm.Take: the tables' hand-worked figures are the
// algorithm's.
func TestReferenceTake(t *testing.T) {
	storetest.RunTake(t, func(*testing.T) portero.Store { return storetest.NewReference() })
}
