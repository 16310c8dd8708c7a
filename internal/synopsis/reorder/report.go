package reorder

import (
	"math"
	"net/netip"
)

// Stats are the reordering counts of the flows measured in one prefix
// during an epoch, with what the uncertainty of their rate needs. They
// add up: the Stats of two workers, probes or epochs sum field by field.
type Stats struct {
	// Packets counts the segments judged: in order, reordered and
	// retransmitted.
	Packets uint64
	// Reordered counts segments with new bytes that came after a
	// segment of the same flow starting later in sequence space.
	Reordered uint64
	// Retransmitted counts segments whose bytes had all been seen.
	Retransmitted uint64
	// Flows counts the flows measured: a window (or a long flow's epoch)
	// counts once; a flow sampled twice counts twice.
	Flows uint64
	// SumSqReordered, SumReorderedPackets and SumSqPackets are Σo², Σo·n
	// and Σn² over the flows measured (o reordered of n packets each):
	// what RateSE needs.
	SumSqReordered      float64
	SumReorderedPackets float64
	SumSqPackets        float64
}

// addFlow counts a flow's (or a window's) packets.
func (s *Stats) addFlow(packets, reordered, retrans uint64) {
	if packets == 0 {
		return
	}
	n, o := float64(packets), float64(reordered)
	s.Packets += packets
	s.Reordered += reordered
	s.Retransmitted += retrans
	s.Flows++
	s.SumSqReordered += o * o
	s.SumReorderedPackets += o * n
	s.SumSqPackets += n * n
}

// Add adds o to s.
func (s *Stats) Add(o Stats) {
	s.Packets += o.Packets
	s.Reordered += o.Reordered
	s.Retransmitted += o.Retransmitted
	s.Flows += o.Flows
	s.SumSqReordered += o.SumSqReordered
	s.SumReorderedPackets += o.SumReorderedPackets
	s.SumSqPackets += o.SumSqPackets
}

// Rate is the share of the packets measured that were reordered: the
// ratio estimate Σo/Σn of the prefix's reordering rate. 0 without
// packets.
func (s Stats) Rate() float64 {
	if s.Packets == 0 {
		return 0
	}
	return float64(s.Reordered) / float64(s.Packets)
}

// RateSE is the standard error of Rate: the larger of two.
//
// The flow-level one treats flows as clusters (the linearized variance of
// a ratio estimate): m/(m−1) · Σ(o − R·n)² / (Σn)², m flows. Reordering
// comes in bursts within flows and differs from flow to flow, so packets
// are not independent trials; this takes the spread between flows into
// account.
//
// The binomial one, √(p(1−p)/(N+2)) with p = (O+1)/(N+2), is what the
// packets would give if they were independent. It is the floor: with one
// or two flows, or none reordered, the flow-level estimate is near 0 for
// lack of spread, not for lack of uncertainty. Without packets it is
// about 0.35.
func (s Stats) RateSE() float64 {
	n, o := float64(s.Packets), float64(s.Reordered)
	p := (o + 1) / (n + 2)
	se := math.Sqrt(p * (1 - p) / (n + 2))
	if s.Flows < 2 || s.Packets == 0 {
		return se
	}
	r := o / n
	ss := s.SumSqReordered - 2*r*s.SumReorderedPackets + r*r*s.SumSqPackets
	m := float64(s.Flows)
	return max(se, math.Sqrt(max(ss, 0)*m/(m-1))/n)
}

// PrefixStats are one prefix's Stats.
type PrefixStats struct {
	Prefix netip.Prefix
	Stats
}

// Counters say what a tracker did with the packets of an epoch.
type Counters struct {
	// Packets counts the packets offered; Segments those that take
	// sequence space (TCP data, SYN or FIN; not RST).
	Packets, Segments uint64
	// Windows counts the windows opened; Refused the segments of flows
	// not tracked that found no window to take, Quota those refused
	// because their prefix had been measured enough, PrefixFull those
	// refused because the prefix table was full.
	Windows, Refused, Quota, PrefixFull uint64
	// Promoted and Demoted count flows that became long flows and that
	// stopped being long flows.
	Promoted, Demoted uint64
}

// add adds o to c.
func (c *Counters) add(o Counters) {
	c.Packets += o.Packets
	c.Segments += o.Segments
	c.Windows += o.Windows
	c.Refused += o.Refused
	c.Quota += o.Quota
	c.PrefixFull += o.PrefixFull
	c.Promoted += o.Promoted
	c.Demoted += o.Demoted
}

// Report is one epoch's reordering by prefix: the prefixes listed (by a
// Selector, or by Merge), most packets first, and the rest summed in
// Other.
type Report struct {
	Prefixes []PrefixStats
	// Other sums the prefixes not listed and the flows whose prefix found
	// no room in the tracker's table.
	Other Stats
	// PrefixesFolded counts the prefixes summed in Other.
	PrefixesFolded int
	Counters       Counters
}

// Total is the sum over every prefix and Other.
func (r *Report) Total() Stats {
	t := r.Other
	for _, p := range r.Prefixes {
		t.Add(p.Stats)
	}
	return t
}

// Merge sums reports (of the capture workers of one point, or of one
// prefix's epochs) and keeps the maxPrefixes prefixes with the most packets. A
// prefix that one report folded into Other shows only its share from the
// reports that listed it.
func Merge(maxPrefixes int, reports ...*Report) *Report {
	byPrefix := map[netip.Prefix]*Stats{}
	out := &Report{}
	for _, r := range reports {
		for _, p := range r.Prefixes {
			s := byPrefix[p.Prefix]
			if s == nil {
				s = &Stats{}
				byPrefix[p.Prefix] = s
			}
			s.Add(p.Stats)
		}
		out.Other.Add(r.Other)
		out.PrefixesFolded += r.PrefixesFolded
		out.Counters.add(r.Counters)
	}
	ps := make([]PrefixStats, 0, len(byPrefix))
	for p, s := range byPrefix {
		ps = append(ps, PrefixStats{Prefix: p, Stats: *s})
	}
	out.Prefixes = ps
	out.fold(maxPrefixes)
	return out
}

// fold sorts the prefixes by packets, most first, and sums those past
// maxPrefixes into Other.
func (r *Report) fold(maxPrefixes int) {
	sortByPackets(r.Prefixes)
	if len(r.Prefixes) <= maxPrefixes {
		return
	}
	for _, p := range r.Prefixes[maxPrefixes:] {
		r.Other.Add(p.Stats)
	}
	r.PrefixesFolded += len(r.Prefixes) - maxPrefixes
	r.Prefixes = r.Prefixes[:maxPrefixes:maxPrefixes]
}
