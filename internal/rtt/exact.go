package rtt

import (
	"net/netip"

	"github.com/owl-latency/owl/internal/capture"
)

// Sample is one request/response pair: its delay, kind and responder,
// and its weight (how many pairs it stands for: 1 for Exact; a fridge's
// correction for the pairs its evictions lost).
type Sample struct {
	DelayNS   int64
	Kind      Kind
	Responder netip.Addr
	Weight    float64
}

// Exact matches every request with its response in unbounded memory: the
// ground truth the probe's fridges are measured against. A request seen
// again before its response (a retransmission) takes the pending one out
// and is not kept: the pair yields no sample (Karn's rule), as in the
// probe's matcher. Not safe for concurrent use.
type Exact struct {
	seed    uint64
	pending map[uint64]int64 // key → the request's time
	// Ambiguous counts requests seen again before their response.
	Ambiguous int
}

// NewExact returns an empty matcher whose keys hash under seed.
func NewExact(seed uint64) *Exact {
	return &Exact{seed: seed, pending: map[uint64]int64{}}
}

// Add offers a packet and returns the sample it completes, if any.
func (x *Exact) Add(p *capture.Packet) (Sample, bool) {
	ev := Classify(p, x.seed)
	var out Sample
	ok := false
	if ev.Response {
		if at, found := x.pending[ev.ResponseKey]; found && p.TimeNS >= at {
			delete(x.pending, ev.ResponseKey)
			out, ok = Sample{DelayNS: p.TimeNS - at, Kind: ev.ResponseKind, Responder: ev.Responder, Weight: 1}, true
		}
	}
	if ev.Request {
		if _, found := x.pending[ev.RequestKey]; found {
			delete(x.pending, ev.RequestKey)
			x.Ambiguous++
		} else {
			x.pending[ev.RequestKey] = p.TimeNS
		}
	}
	return out, ok
}

// Pending is the number of requests not answered yet.
func (x *Exact) Pending() int { return len(x.pending) }
