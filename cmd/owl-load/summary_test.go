package main

import (
	"math"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/probe"
)

// TestTallyQuantiles: a quantile's interval is checked against the
// generated delay of rank ⌈q·n⌉; intervals that are the sketch's bounds
// (confidence 0) are not counted.
func TestTallyQuantiles(t *testing.T) {
	truth := probe.Truth{Delays: []int64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}}
	res := &owlv1.PathStats{Quantiles: []*owlv1.DelayQuantile{
		{Q: 0.5, LoNs: 40, HiNs: 60, Confidence: 0.95},  // the median is 50: held
		{Q: 0.9, LoNs: 95, HiNs: 100, Confidence: 0.85}, // p90 is 90: missed
		{Q: 0.99, LoNs: 99, HiNs: 100},                  // no confidence: left out
	}}
	var s summary
	s.tallyQuantiles(res, truth)
	if s.Quantiles != 2 || s.QuantilesHeld != 1 || math.Abs(s.QuantileConfidence-0.9) > 1e-12 {
		t.Errorf("%d quantiles, %d held, confidence %v; want 2, 1, 0.9", s.Quantiles, s.QuantilesHeld, s.QuantileConfidence)
	}
	s.tallyQuantiles(res, probe.Truth{})
	if s.Quantiles != 2 {
		t.Error("a truth without delays counted quantiles")
	}
}

// TestSecondHalf: the second half's cost is the CPU between the two
// snapshots over the results between them, and 0 where the halfway
// snapshot was not taken or a collector could not be read.
func TestSecondHalf(t *testing.T) {
	half := snapshot{results: 500, procs: []procStats{{cpu: 2 * time.Second, ok: true}, {ok: false}}}
	after := snapshot{results: 1000, procs: []procStats{{cpu: 3 * time.Second, ok: true}, {cpu: time.Second, ok: true}}}
	if got := secondHalf(half, after, 0); math.Abs(got-2) > 1e-9 {
		t.Errorf("second half %v ms per path-epoch, want 2 (1 s over 500)", got)
	}
	if got := secondHalf(half, after, 1); got != 0 {
		t.Errorf("collector not read at half way: %v, want 0", got)
	}
	if got := secondHalf(snapshot{}, after, 0); got != 0 {
		t.Errorf("no halfway snapshot: %v, want 0", got)
	}
}
