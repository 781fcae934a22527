package memstore

import (
	"math/rand/v2"
	"testing"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// The open-addressing table agrees with a map through random inserts,
// deletes and growth, with hashes chosen to collide on home slots and wrap
// around the end of the table.
func TestTableMatchesMap(t *testing.T) {
	dec, err := algorithm.New(portero.GCRA, portero.PerSecond(1))
	if err != nil {
		t.Fatal(err)
	}
	for _, capKeys := range []int{1, 3, 13, 100, 5000} {
		r := rand.New(rand.NewPCG(uint64(capKeys), 1))
		sh := &shard{max: capKeys, rnd: 1}
		want := map[uint64]int64{}
		// Few distinct low words: many keys share a home slot.
		key := func() uint64 { return r.Uint64()>>32<<32 | uint64(r.IntN(8))<<29 | 1 }
		for op := range 20_000 {
			switch r.IntN(3) {
			case 0, 1:
				h := key()
				if _, ok := want[h]; ok || len(want) >= capKeys {
					continue
				}
				sh.insert(h, algorithm.State{A: int64(op) + 1e12}, 0, dec) // never expired
				want[h] = int64(op) + 1e12
			case 2:
				for h := range want {
					i := sh.find(h)
					if i < 0 {
						t.Fatalf("cap %d op %d: %x not found before delete", capKeys, op, h)
					}
					sh.deleteAt(i)
					delete(want, h)
					break
				}
			}
			if sh.n != len(want) {
				t.Fatalf("cap %d op %d: n = %d, want %d", capKeys, op, sh.n, len(want))
			}
			if op%97 == 0 {
				for h, a := range want {
					if i := sh.find(h); i < 0 || sh.slots[i].s.A != a {
						t.Fatalf("cap %d op %d: find(%x) = %d", capKeys, op, h, i)
					}
				}
				if len(sh.slots) > sh.maxSlots() || sh.n*16 > len(sh.slots)*maxLoad {
					t.Fatalf("cap %d: %d keys in %d slots (at most %d)", capKeys, sh.n, len(sh.slots), sh.maxSlots())
				}
			}
		}
	}
}

// At the cap, an insert evicts expired entries first, then the one with
// the most room.
func TestEvictPrefersExpiredThenMostRoom(t *testing.T) {
	dec, err := algorithm.New(portero.FixedWindow, portero.Limit{Count: 10, Window: 10})
	if err != nil {
		t.Fatal(err)
	}
	sh := &shard{max: 4, rnd: 1}
	now := int64(100)                                           // window 10: [100, 110)
	sh.insert(1<<40|1, algorithm.State{A: 10, B: 10}, now, dec) // used up
	sh.insert(2<<40|1, algorithm.State{A: 10, B: 2}, now, dec)  // 8 left
	sh.insert(3<<40|1, algorithm.State{A: 10, B: 9}, now, dec)  // 1 left
	sh.insert(4<<40|1, algorithm.State{A: 5, B: 9}, now, dec)   // expired window
	sh.insert(5<<40|1, algorithm.State{A: 10, B: 5}, now, dec)
	if sh.find(4<<40|1) >= 0 || sh.n != 4 {
		t.Fatalf("the expired entry survived (n=%d)", sh.n)
	}
	sh.insert(6<<40|1, algorithm.State{A: 10, B: 5}, now, dec)
	if sh.find(2<<40|1) >= 0 {
		t.Errorf("the entry with the most room survived")
	}
	for _, h := range []uint64{1<<40 | 1, 3<<40 | 1, 5<<40 | 1, 6<<40 | 1} {
		if sh.find(h) < 0 {
			t.Errorf("%x evicted", h)
		}
	}
}
