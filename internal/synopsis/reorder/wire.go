package reorder

import (
	"fmt"
	"math"
	"net/netip"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// A Report travels as an owlv1.ReorderReport: its counts as they are,
// prefixes as text (192.0.2.0/24). A report is small (some 60 bytes a
// prefix), so it has no packed form of its own.

// MaxCount bounds every count of a report read from outside: a trillion
// packets an epoch is far past any link, and sums of a day's reports
// stay far from overflowing.
const MaxCount = 1 << 40

// Proto is r as the report of an epoch.
func (r *Report) Proto(epoch int64) *owlv1.ReorderReport {
	out := &owlv1.ReorderReport{Epoch: epoch, Other: StatsProto("", r.Other), PrefixesFolded: uint64(r.PrefixesFolded),
		Counters: CountersProto(r.Counters)}
	out.Prefixes = make([]*owlv1.ReorderStats, len(r.Prefixes))
	for i, p := range r.Prefixes {
		out.Prefixes[i] = StatsProto(p.Prefix.String(), p.Stats)
	}
	return out
}

// StatsProto is s as the stats of prefix ("" for others).
func StatsProto(prefix string, s Stats) *owlv1.ReorderStats {
	return &owlv1.ReorderStats{Prefix: prefix, Packets: s.Packets, Reordered: s.Reordered, Retransmitted: s.Retransmitted, Flows: s.Flows,
		SumSqReordered: s.SumSqReordered, SumReorderedPackets: s.SumReorderedPackets, SumSqPackets: s.SumSqPackets}
}

// CountersProto is c on the wire.
func CountersProto(c Counters) *owlv1.ReorderCounters {
	return &owlv1.ReorderCounters{Packets: c.Packets, Segments: c.Segments, Windows: c.Windows, Refused: c.Refused,
		Quota: c.Quota, PrefixFull: c.PrefixFull, Promoted: c.Promoted, Demoted: c.Demoted}
}

// FromProto reads a report from outside. It refuses what no tracker
// makes: more than MaxPrefixes prefixes; a prefix unreadable, with bits
// past its mask, or repeated; counts over MaxCount or that do not add up
// (reordered and retransmitted packets past the packets, flows past the
// packets or none for some); sums of squares negative, not finite or
// past what the counts allow.
func FromProto(m *owlv1.ReorderReport) (*Report, error) {
	if len(m.GetPrefixes()) > MaxPrefixes {
		return nil, fmt.Errorf("%d prefixes, over %d", len(m.GetPrefixes()), MaxPrefixes)
	}
	r := &Report{Prefixes: make([]PrefixStats, 0, len(m.GetPrefixes()))}
	seen := make(map[netip.Prefix]bool, len(m.GetPrefixes()))
	for _, ps := range m.GetPrefixes() {
		p, err := netip.ParsePrefix(ps.GetPrefix())
		if err != nil || p != p.Masked() || seen[p] {
			return nil, fmt.Errorf("prefix %.50q unreadable, not masked or repeated", ps.GetPrefix())
		}
		seen[p] = true
		s, err := statsFromProto(ps)
		if err != nil {
			return nil, fmt.Errorf("prefix %s: %w", p, err)
		}
		r.Prefixes = append(r.Prefixes, PrefixStats{Prefix: p, Stats: s})
	}
	if m.GetOther().GetPrefix() != "" {
		return nil, fmt.Errorf("other prefixes named %.50q", m.GetOther().GetPrefix())
	}
	var err error
	if r.Other, err = statsFromProto(m.GetOther()); err != nil {
		return nil, fmt.Errorf("other prefixes: %w", err)
	}
	c := m.GetCounters()
	r.Counters = Counters{Packets: c.GetPackets(), Segments: c.GetSegments(), Windows: c.GetWindows(), Refused: c.GetRefused(),
		Quota: c.GetQuota(), PrefixFull: c.GetPrefixFull(), Promoted: c.GetPromoted(), Demoted: c.GetDemoted()}
	for _, n := range []uint64{r.Counters.Packets, r.Counters.Segments, r.Counters.Windows, r.Counters.Refused, r.Counters.Quota,
		r.Counters.PrefixFull, r.Counters.Promoted, r.Counters.Demoted, m.GetPrefixesFolded()} {
		if n > MaxCount {
			return nil, fmt.Errorf("counter %d over %d", n, uint64(MaxCount))
		}
	}
	r.PrefixesFolded = int(m.GetPrefixesFolded())
	return r, nil
}

// statsFromProto reads and checks one prefix's stats.
func statsFromProto(m *owlv1.ReorderStats) (Stats, error) {
	s := Stats{Packets: m.GetPackets(), Reordered: m.GetReordered(), Retransmitted: m.GetRetransmitted(), Flows: m.GetFlows(),
		SumSqReordered: m.GetSumSqReordered(), SumReorderedPackets: m.GetSumReorderedPackets(), SumSqPackets: m.GetSumSqPackets()}
	switch {
	case s.Packets > MaxCount:
		return s, fmt.Errorf("%d packets, over %d", s.Packets, uint64(MaxCount))
	case s.Reordered > s.Packets || s.Retransmitted > s.Packets-s.Reordered:
		return s, fmt.Errorf("%d reordered and %d retransmitted of %d packets", s.Reordered, s.Retransmitted, s.Packets)
	case s.Flows > s.Packets || (s.Flows == 0) != (s.Packets == 0):
		return s, fmt.Errorf("%d flows for %d packets", s.Flows, s.Packets)
	}
	// Per flow o ≤ n, so Σo² ≤ Σo·n ≤ Σn² ≤ (Σn)², and Σn² ≥ (Σn)²/m
	// (m flows). Float sums of integers round: a little slack.
	n, o := float64(s.Packets), float64(s.Reordered)
	const slack = 1 + 1e-9
	for _, x := range []float64{s.SumSqReordered, s.SumReorderedPackets, s.SumSqPackets} {
		if math.IsNaN(x) || x < 0 || x > n*n*slack {
			return s, fmt.Errorf("sums of squares %v, %v, %v: negative, not numbers or past %v packets'", s.SumSqReordered, s.SumReorderedPackets, s.SumSqPackets, s.Packets)
		}
	}
	if s.SumSqReordered > o*o*slack || s.SumSqReordered > s.SumReorderedPackets*slack || s.SumReorderedPackets > s.SumSqPackets*slack ||
		s.Flows > 0 && s.SumSqPackets*slack < n*n/float64(s.Flows) {
		return s, fmt.Errorf("sums of squares %v, %v, %v do not fit %d reordered of %d packets in %d flows",
			s.SumSqReordered, s.SumReorderedPackets, s.SumSqPackets, s.Reordered, s.Packets, s.Flows)
	}
	return s, nil
}
