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
// again before its response (a retransmission) makes the pair ambiguous,
// and it yields no sample (Karn's rule). Not safe for concurrent use.
type Exact struct {
	seed    uint64
	pending map[uint64]exactRequest
	// Ambiguous counts responses to retransmitted requests, left out.
	Ambiguous int
}

type exactRequest struct {
	atNS      int64
	kind      Kind
	ambiguous bool
}

// NewExact returns an empty matcher whose keys hash under seed.
func NewExact(seed uint64) *Exact {
	return &Exact{seed: seed, pending: map[uint64]exactRequest{}}
}

// Add offers a packet and returns the sample it completes, if any.
func (x *Exact) Add(p *capture.Packet) (Sample, bool) {
	ev := Classify(p, x.seed)
	var out Sample
	ok := false
	if ev.Response {
		if r, found := x.pending[ev.ResponseKey]; found {
			delete(x.pending, ev.ResponseKey)
			if r.ambiguous {
				x.Ambiguous++
			} else {
				out, ok = Sample{DelayNS: p.TimeNS - r.atNS, Kind: r.kind, Responder: ev.Responder, Weight: 1}, true
			}
		}
	}
	if ev.Request {
		if r, found := x.pending[ev.RequestKey]; found {
			r.ambiguous = true
			x.pending[ev.RequestKey] = r
		} else {
			x.pending[ev.RequestKey] = exactRequest{atNS: p.TimeNS, kind: ev.Kind}
		}
	}
	return out, ok
}

// Pending is the number of requests not answered yet.
func (x *Exact) Pending() int { return len(x.pending) }
