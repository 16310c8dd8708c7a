package rtt

import (
	"math"
	"net/netip"
	"testing"
)

// TestDistinctCounts: the folded-prefix counter is exact to a prefix or
// two while few prefixes are counted, within 10% (three standard errors)
// for many, counts a prefix added again once, and merges as a union.
func TestDistinctCounts(t *testing.T) {
	prefix := func(i int) netip.Prefix {
		if i%2 == 0 {
			return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(i >> 16), byte(i >> 8), byte(i), 0}), 24)
		}
		var b [16]byte
		b[0], b[3], b[4], b[5] = 0x20, byte(i>>16), byte(i>>8), byte(i)
		return netip.PrefixFrom(netip.AddrFrom16(b), 48)
	}
	for _, n := range []int{0, 1, 10, 100, 1000, 10_000, 1_000_000} {
		var d distinct
		for i := range n {
			d.add(prefix(i))
			d.add(prefix(i))
		}
		got, tol := float64(d.count()), max(2, 0.1*float64(n))
		if n <= 100 {
			tol = max(1, 0.02*float64(n))
		}
		if math.Abs(got-float64(n)) > tol {
			t.Errorf("%d prefixes counted as %v", n, got)
		}
	}
	var a, b distinct
	for i := range 3000 {
		a.add(prefix(i))
		b.add(prefix(i + 2000))
	}
	a.merge(&b)
	if got := float64(a.count()); math.Abs(got-5000) > 500 {
		t.Errorf("union of 3000 and 3000 sharing 1000 counted as %v", got)
	}
}
