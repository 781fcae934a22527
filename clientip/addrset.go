package clientip

import (
	"fmt"
	"net/netip"
	"slices"
)

// AddrSet is a set of addresses given as prefixes: the address lists of
// both compilers' rules (policy.Match, descriptor.Node). Prefixes and
// addresses are read as Canonical reads them; the set is immutable and
// looks an address up in O(log n), overlapping prefixes merged into ranges.
type AddrSet struct {
	ranges []addrRange // sorted, disjoint; IPv4 before IPv6
	n      int         // prefixes given
}

type addrRange struct{ lo, hi netip.Addr }

// NewAddrSet builds the set of the given prefixes. An invalid prefix is an
// error that names it.
func NewAddrSet(prefixes []netip.Prefix) (*AddrSet, error) {
	s := &AddrSet{n: len(prefixes)}
	for _, p := range prefixes {
		if !p.IsValid() {
			return nil, fmt.Errorf("address %v: not a valid address or prefix", p)
		}
		p = Canonical(p)
		s.ranges = append(s.ranges, addrRange{p.Addr(), lastAddr(p)})
	}
	slices.SortFunc(s.ranges, func(a, b addrRange) int { return a.lo.Compare(b.lo) })
	out := s.ranges[:0]
	for _, r := range s.ranges {
		if k := len(out) - 1; k >= 0 && out[k].lo.Is4() == r.lo.Is4() && (r.lo.Compare(out[k].hi) <= 0 || out[k].hi.Next() == r.lo) {
			if r.hi.Compare(out[k].hi) > 0 {
				out[k].hi = r.hi
			}
			continue
		}
		out = append(out, r)
	}
	s.ranges = out
	return s, nil
}

// lastAddr is the highest address of masked prefix p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Contains reports whether a (IPv4-mapped addresses as IPv4) is in s. The
// zero Addr is in no set.
func (s *AddrSet) Contains(a netip.Addr) bool {
	if s == nil || !a.IsValid() {
		return false
	}
	a = a.Unmap().WithZone("")
	i, _ := slices.BinarySearchFunc(s.ranges, a, func(r addrRange, a netip.Addr) int {
		switch {
		case r.hi.Compare(a) < 0:
			return -1
		case r.lo.Compare(a) > 0:
			return 1
		}
		return 0
	})
	return i < len(s.ranges) && s.ranges[i].lo.Compare(a) <= 0 && a.Compare(s.ranges[i].hi) <= 0
}

// Len returns the number of prefixes the set was built from.
func (s *AddrSet) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}
