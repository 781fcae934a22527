package memstore_test

import (
	"testing"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/storetest"
)

// TestTakeConformance runs the take tables and random traces of takes,
// requests and refunds against the memory store.
func TestTakeConformance(t *testing.T) {
	storetest.RunTake(t, func(t *testing.T) portero.Store { return newStore(t, memstore.Config{}) })
}
