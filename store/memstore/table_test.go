package memstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// The open-addressing table agrees with a map through random inserts,
// deletes (tombstones) and rebuilds, for both slot sizes, with hashes
// chosen to collide on home slots and wrap around the end of the array.
func TestTableMatchesMap(t *testing.T) {
	for _, alg := range []portero.Algorithm{portero.GCRA, portero.TokenBucket} {
		dec, err := algorithm.New(alg, portero.PerSecond(1))
		if err != nil {
			t.Fatal(err)
		}
		stride := 3
		if _, ok := dec.(algorithm.WordDecider); ok {
			stride = 2
		}
		for _, capKeys := range []int{1, 3, 13, 100, 5000} {
			r := rand.New(rand.NewPCG(uint64(capKeys), 1))
			sh := &shard{max: capKeys, rnd: 1, stride: stride}
			want := map[uint64]algorithm.State{}
			// Few distinct low words: many keys share a home slot.
			key := func() uint64 { return r.Uint64()>>32<<32 | uint64(r.IntN(8))<<29 | 1 }
			for op := range 20_000 {
				switch r.IntN(3) {
				case 0, 1:
					h := key()
					if _, ok := want[h]; ok || len(want) >= capKeys {
						continue
					}
					st := algorithm.State{A: int64(op) + 1e12} // never expired
					if stride == 3 {
						st.B = 1e12 // a full bucket
					}
					sh.insert(h, st, 0, dec)
					want[h] = st
				case 2:
					for h := range want {
						a, i := sh.find(h)
						if i < 0 {
							t.Fatalf("%s cap %d op %d: %x not found before delete", alg, capKeys, op, h)
						}
						sh.deleteAt(a, i)
						delete(want, h)
						break
					}
				}
				if sh.n != len(want) {
					t.Fatalf("%s cap %d op %d: n = %d, want %d", alg, capKeys, op, sh.n, len(want))
				}
				if op%97 == 0 {
					for h, st := range want {
						if a, i := sh.find(h); i < 0 || a.state(i) != st {
							t.Fatalf("%s cap %d op %d: find(%x) = %d", alg, capKeys, op, h, i)
						}
					}
					a := sh.tab.Load()
					if a == nil {
						continue
					}
					if a.size() > sh.maxSlots()+3 || sh.used*16 > a.size()*maxLoad || sh.used < sh.n {
						t.Fatalf("%s cap %d: %d keys, %d used in %d slots (at most %d)", alg, capKeys, sh.n, sh.used, a.size(), sh.maxSlots())
					}
				}
			}
		}
	}
}

// A shard is one cache line, so that neighbouring shards' locks and array
// pointers never share one.
func TestShardSize(t *testing.T) {
	if got := unsafe.Sizeof(shard{}); got != 64 {
		t.Errorf("unsafe.Sizeof(shard{}) = %d, want 64", got)
	}
}

// At the cap, an insert evicts expired entries first, then the one with
// the most room.
func TestEvictPrefersExpiredThenMostRoom(t *testing.T) {
	dec, err := algorithm.New(portero.FixedWindow, portero.Limit{Count: 10, Window: 10})
	if err != nil {
		t.Fatal(err)
	}
	sh := &shard{max: 4, rnd: 1, stride: 3}
	now := int64(100)                                           // window 10: [100, 110)
	sh.insert(1<<40|1, algorithm.State{A: 10, B: 10}, now, dec) // used up
	sh.insert(2<<40|1, algorithm.State{A: 10, B: 2}, now, dec)  // 8 left
	sh.insert(3<<40|1, algorithm.State{A: 10, B: 9}, now, dec)  // 1 left
	sh.insert(4<<40|1, algorithm.State{A: 5, B: 9}, now, dec)   // expired window
	sh.insert(5<<40|1, algorithm.State{A: 10, B: 5}, now, dec)
	if _, i := sh.find(4<<40 | 1); i >= 0 || sh.n != 4 {
		t.Fatalf("the expired entry survived (n=%d)", sh.n)
	}
	sh.insert(6<<40|1, algorithm.State{A: 10, B: 5}, now, dec)
	if _, i := sh.find(2<<40 | 1); i >= 0 {
		t.Errorf("the entry with the most room survived")
	}
	for _, h := range []uint64{1<<40 | 1, 3<<40 | 1, 5<<40 | 1, 6<<40 | 1} {
		if _, i := sh.find(h); i < 0 {
			t.Errorf("%x evicted", h)
		}
	}
}

// strHash tells apart keys that differ in one byte or in length, at every
// length around its cases (1–3, 4–7, 8–16 bytes, 16-byte blocks past 16,
// 48-byte blocks past 48, with the last 16 bytes overlapping), and spreads
// structured keys (IPv4 addresses) evenly over the bits that pick a shard
// (the high ones) and a home slot (the low 32).
func TestStrHash(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var k [4]uint64
	for i := range k {
		k[i] = r.Uint64()
	}
	seen := map[uint64]string{}
	add := func(s string) {
		h := strHash(s, &k)
		if o, ok := seen[h]; ok && o != s {
			t.Fatalf("strHash(%q) = strHash(%q) = %#x", s, o, h)
		}
		seen[h] = s
	}
	const text = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	for n := range 121 {
		base := []byte(text[:n])
		add(string(base))
		for i := range n {
			for _, c := range []byte{0, '!', 0xff} {
				b := append([]byte(nil), base...)
				b[i] = c
				add(string(b))
			}
		}
		add(string(append(base, 0))) // a trailing zero byte is not the shorter key
	}
	const keys, buckets = 1 << 16, 64
	var hi, lo [buckets]int
	for i := range keys {
		h := strHash(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), &k)
		hi[h>>58]++
		lo[uint32(h)>>26]++
	}
	for _, c := range [...]struct {
		name string
		n    *[buckets]int
	}{{"high 6 bits", &hi}, {"bits 26-31", &lo}} {
		for b, n := range c.n {
			// Expected 1024 each; a uniform hash strays by more than
			// 200 (6 standard deviations) about once in 10⁷ runs.
			if n < keys/buckets-200 || n > keys/buckets+200 {
				t.Errorf("%s: bucket %d has %d of %d keys, want about %d", c.name, b, n, keys, keys/buckets)
			}
		}
	}
}
