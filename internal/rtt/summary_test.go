package rtt

import (
	"net/netip"
	"testing"

	"github.com/owl-latency/owl/internal/synopsis/delays"
)

// TestSummaryBoundsPrefixes: a scan of many responders keeps the
// heaviest prefixes, folds the rest into other and loses no pair; the
// prefixes tracked during the epoch stay bounded; merged workers' sums
// add up.
func TestSummaryBoundsPrefixes(t *testing.T) {
	cfg := PrefixConfig{V4Bits: 24, V6Bits: 48, Max: 4}
	a, b := NewSummary(cfg), NewSummary(cfg)
	var total float64
	heavy := netip.MustParseAddr("198.51.100.9")
	for i := range 10_000 {
		s := a
		if i%2 == 1 {
			s = b
		}
		resp := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}) // one /24 each
		if i%10 == 0 {
			resp = heavy
		}
		s.Add(Sample{DelayNS: int64(1000 + i), Kind: TCPData, Responder: resp, Weight: 1.5})
		total += 1.5
	}
	if n := len(a.prefixes); n > trackFactor*cfg.Max {
		t.Errorf("%d prefixes tracked, bound %d", n, trackFactor*cfg.Max)
	}
	a.Merge(b)
	r := a.Report(7)
	if len(r.GetPrefixes()) != cfg.Max || r.GetPrefixes()[0].GetPrefix() != "198.51.100.0/24" {
		t.Fatalf("prefixes %v", r.GetPrefixes())
	}
	sum := r.GetOther().GetPairs()
	for _, p := range r.GetPrefixes() {
		sum += p.GetPairs()
	}
	if sum != total || r.GetKinds()[0].GetPairs() != total || r.GetKinds()[0].GetKind() != "tcp-data" {
		t.Errorf("pairs %v in prefixes and other, %v of kind %s; want %v", sum, r.GetKinds()[0].GetPairs(), r.GetKinds()[0].GetKind(), total)
	}
	sk, err := delays.Decode(r.GetKinds()[0].GetSketch())
	if err != nil {
		t.Fatal(err)
	}
	if sk.GetCount() != total {
		t.Errorf("kind sketch: count %v, want %v", sk.GetCount(), total)
	}
	if r.GetCounters().GetPrefixesFolded() == 0 {
		t.Error("no prefix counted as folded")
	}
}
