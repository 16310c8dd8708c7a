package reorder

import (
	"net/netip"
	"slices"

	"github.com/owl-latency/owl/internal/capture"
)

// Exact measures every flow with every byte range it has seen, in memory
// that grows with the flows and their gaps: the ground truth a Tracker is
// measured against. Its definitions are the package's; where a window
// leaves out segments that end before its first byte, Exact, which sees
// each flow from its first segment, judges them. Not safe for concurrent
// use.
type Exact struct {
	cfg      PrefixConfig
	flows    map[capture.FlowKey]*exactFlow
	restarts map[netip.Prefix]*Stats // flows that started over, this epoch
	counters Counters
}

// byteRange is [lo, hi) in a flow's unwrapped sequence space.
type byteRange struct{ lo, hi int64 }

// exactFlow is a flow's state: sequence numbers are unwrapped to 64 bits,
// relative to the flow's first.
type exactFlow struct {
	prefix  netip.Prefix
	started bool
	first   uint32
	top     int64       // one past the highest byte seen
	last    int64       // start of the predecessor
	seen    []byteRange // sorted, disjoint, not touching
	packets uint64
	reord   uint64
	retrans uint64
}

// NewExact returns an empty exact tracker grouping flows by cfg.
func NewExact(cfg PrefixConfig) *Exact {
	return &Exact{cfg: cfg, flows: map[capture.FlowKey]*exactFlow{}, restarts: map[netip.Prefix]*Stats{}}
}

// Add offers a packet.
func (x *Exact) Add(p *capture.Packet) {
	x.counters.Packets++
	g, ok := segmentOf(p)
	if !ok {
		return
	}
	x.counters.Segments++
	f := x.flows[p.Flow]
	if f == nil {
		f = &exactFlow{prefix: x.cfg.PrefixOf(&p.Flow)}
		x.flows[p.Flow] = f
	}
	if f.started && g.syn && g.seq != f.first {
		s := x.restarts[f.prefix]
		if s == nil {
			s = &Stats{}
			x.restarts[f.prefix] = s
		}
		s.addFlow(f.packets, f.reord, f.retrans)
		*f = exactFlow{prefix: f.prefix}
	}
	switch f.observe(g) {
	case reordered:
		f.reord++
	case retransmitted:
		f.retrans++
	}
	f.packets++
}

// observe classifies g by the definitions and records its bytes.
func (f *exactFlow) observe(g segment) verdict {
	if !f.started {
		f.started, f.first, f.top, f.last = true, g.seq, int64(g.span), 0
		f.seen = append(f.seen[:0], byteRange{0, int64(g.span)})
		return inOrder
	}
	lo := f.top + int64(int32(g.seq-f.first-uint32(f.top)))
	hi := lo + int64(g.span)
	i, _ := slices.BinarySearchFunc(f.seen, lo, func(r byteRange, lo int64) int {
		switch {
		case r.hi < lo:
			return -1
		case r.lo > lo:
			return 1
		}
		return 0
	})
	if i < len(f.seen) && f.seen[i].lo <= lo && f.seen[i].hi >= hi {
		return retransmitted
	}
	v := inOrder
	if lo < f.last {
		v = reordered
	}
	f.last, f.top = lo, max(f.top, hi)
	j := i
	for j < len(f.seen) && f.seen[j].lo <= hi {
		lo, hi = min(lo, f.seen[j].lo), max(hi, f.seen[j].hi)
		j++
	}
	f.seen = slices.Replace(f.seen, i, j, byteRange{lo, hi})
	return v
}

// Report ends the epoch like Tracker.Report: every flow with packets in
// the epoch counts once in its prefix.
func (x *Exact) Report() *Report {
	by := x.restarts
	for _, f := range x.flows {
		if f.packets == 0 {
			continue
		}
		s := by[f.prefix]
		if s == nil {
			s = &Stats{}
			by[f.prefix] = s
		}
		s.addFlow(f.packets, f.reord, f.retrans)
		f.packets, f.reord, f.retrans = 0, 0, 0
	}
	r := &Report{Counters: x.counters}
	for p, s := range by {
		if !p.IsValid() {
			r.Other.Add(*s)
			continue
		}
		r.Prefixes = append(r.Prefixes, PrefixStats{Prefix: p, Stats: *s})
	}
	r.fold(x.cfg.Max)
	x.restarts, x.counters = map[netip.Prefix]*Stats{}, Counters{}
	return r
}

// Flows is the number of flows held.
func (x *Exact) Flows() int { return len(x.flows) }
