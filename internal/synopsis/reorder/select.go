package reorder

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
)

// A report lists at most PrefixConfig.Max prefixes; a point that measures
// more sums the rest in Other, and a collector that sums a prefix's
// reports over a range sees only the epochs that listed it. Which
// prefixes a report lists decides what the collector can answer, and how
// they are chosen decides whether its sums are biased:
//
//   - by the packets measured in the epoch, the choice does not depend on
//     reordering, but at a point with many more prefixes than a report
//     lists, a prefix that reorders and is not among the largest is never
//     listed;
//   - by the epoch's own reordering, the prefixes that reorder are listed,
//     but a prefix listed in the epochs where it happened to reorder looks
//     worse than it is: its sum leaves out its quiet epochs;
//   - by evidence from earlier epochs (Selector), a prefix that showed
//     reordering is listed in the later epochs it has packets in, whatever
//     it does in them: an epoch's choice is made before its outcome is
//     looked at, so the collector's sum over the epochs listed is a fair
//     sample of the prefix's traffic. It leaves out the epochs before the
//     prefix first showed reordering, that one included.

// Selection constants (docs/reordering.md#reports has the measurements).
const (
	// WatchPerSlot is the size of a Selector's watch list per prefix a
	// report lists.
	WatchPerSlot = 4
	// watchHalfLife is the epochs after which a watched prefix's counts
	// weigh half.
	watchHalfLife = 64
	// minEvidence is the decayed reordered packets below which a prefix
	// leaves the watch list: one reordered packet keeps it there for
	// watchHalfLife epochs.
	minEvidence = 0.5
	// scoreZ is how many standard errors below the rate a watched
	// prefix's score is taken.
	scoreZ = 2
)

// Selector chooses, epoch after epoch, the prefixes a point's reports
// list when the point measured more than a report may list. It keeps a
// watch list: the prefixes that showed reordering in earlier epochs, with
// their packets and reordered packets since, decayed by half every 64
// epochs. A report lists first the watched prefixes that have packets in
// the epoch, by their score (the lower bound of their rate, lowerBound),
// then the others with the most packets. The watch list holds
// WatchPerSlot prefixes per prefix a report lists, those with the highest
// scores; a prefix leaves it when its decayed reordered packets fall below
// one half. Memory: the watch list, about 80 bytes a prefix with its
// index (some 20 KiB for reports of 64), and scratch of a few bytes per
// prefix of the largest report.
//
// Not safe for concurrent use.
type Selector struct {
	max   int // prefixes a report lists
	watch []watched
	index map[netip.Prefix]int32 // entry of watch by prefix
	// scratch, reused from epoch to epoch
	listed []bool
	ranked []scored
}

// watched is a prefix of the watch list and its counts over the epochs
// cut so far, decayed.
type watched struct {
	prefix             netip.Prefix
	packets, reordered float64
}

// scored is a prefix of a report (its index) and its score.
type scored struct {
	i     int
	score float64
}

// NewSelector returns a selector for reports of at most maxPrefixes
// prefixes, with an empty watch list.
func NewSelector(maxPrefixes int) *Selector {
	return &Selector{max: maxPrefixes, index: map[netip.Prefix]int32{}}
}

// Watched is the number of prefixes on the watch list.
func (s *Selector) Watched() int { return len(s.watch) }

// Cut lists at most the selector's max of r's prefixes, summing the others
// in Other, and then learns from every prefix of r: the watched prefixes'
// counts are added to the watch list, and the others that showed
// reordering join it. r is one epoch's report, one entry per prefix, the
// epochs cut in order; its prefixes end sorted by packets, most first.
func (s *Selector) Cut(r *Report) {
	sortByPackets(r.Prefixes)
	s.listed = slices.Grow(s.listed[:0], len(r.Prefixes))[:len(r.Prefixes)]
	if len(r.Prefixes) > s.max {
		s.choose(r.Prefixes)
	} else {
		for i := range s.listed {
			s.listed[i] = true
		}
	}
	s.learn(r.Prefixes)
	kept := r.Prefixes[:0]
	for i, p := range r.Prefixes {
		if s.listed[i] {
			kept = append(kept, p)
			continue
		}
		r.Other.Add(p.Stats)
		r.PrefixesFolded++
	}
	clear(r.Prefixes[len(kept):])
	r.Prefixes = kept
}

// choose marks in s.listed the prefixes of ps (sorted by packets) a
// report lists: the watched ones by score, then the others by packets.
func (s *Selector) choose(ps []PrefixStats) {
	clear(s.listed)
	s.ranked = s.ranked[:0]
	for i, p := range ps {
		if j, ok := s.index[p.Prefix]; ok {
			s.ranked = append(s.ranked, scored{i: i, score: s.watch[j].score()})
		}
	}
	// Equal scores keep the order by packets: the sort is stable.
	slices.SortStableFunc(s.ranked, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	n := min(len(s.ranked), s.max)
	for _, x := range s.ranked[:n] {
		s.listed[x.i] = true
	}
	for i := 0; i < len(ps) && n < s.max; i++ {
		if !s.listed[i] {
			s.listed[i] = true
			n++
		}
	}
}

// learn decays the watch list, adds the counts of ps's watched prefixes,
// lets those of ps's other prefixes that showed reordering join, drops
// the prefixes whose evidence faded and keeps the WatchPerSlot·max with
// the highest scores.
func (s *Selector) learn(ps []PrefixStats) {
	d := math.Exp2(-1.0 / watchHalfLife)
	for i := range s.watch {
		s.watch[i].packets *= d
		s.watch[i].reordered *= d
	}
	for _, p := range ps {
		if j, ok := s.index[p.Prefix]; ok {
			s.watch[j].packets += float64(p.Packets)
			s.watch[j].reordered += float64(p.Reordered)
		} else if p.Reordered > 0 {
			s.watch = append(s.watch, watched{prefix: p.Prefix, packets: float64(p.Packets), reordered: float64(p.Reordered)})
		}
	}
	s.watch = slices.DeleteFunc(s.watch, func(w watched) bool { return w.reordered < minEvidence })
	if limit := WatchPerSlot * max(s.max, 1); len(s.watch) > limit {
		slices.SortFunc(s.watch, func(a, b watched) int {
			return cmp.Or(cmp.Compare(b.score(), a.score()), a.prefix.Addr().Compare(b.prefix.Addr()), cmp.Compare(a.prefix.Bits(), b.prefix.Bits()))
		})
		clear(s.watch[limit:])
		s.watch = s.watch[:limit]
	}
	clear(s.index)
	for i, w := range s.watch {
		s.index[w.prefix] = int32(i)
	}
}

// score ranks a watched prefix: the lower bound of its rate.
func (w *watched) score() float64 { return lowerBound(w.reordered, w.packets) }

// lowerBound is the lower end of the Wilson score interval with
// continuity correction, scoreZ standard errors below the rate, of o
// reordered packets in n: how high the rate surely is. It ranks a prefix
// of 10 reordered packets in 1,000 (a rate of 1%, bound 0.50%) above one
// of 1 in 30 (3.3%, bound 0.17%), which the rate alone would put first.
// 0 without reordering.
func lowerBound(o, n float64) float64 {
	if o <= 0 || n <= 0 {
		return 0
	}
	p := min(o/n, 1)
	const z2 = scoreZ * scoreZ
	root := math.Sqrt(max(z2-2-1/n+4*p*(n*(1-p)+1), 0))
	return max((2*n*p+z2-1-scoreZ*root)/(2*(n+z2)), 0)
}

// sortByPackets sorts prefixes by packets, most first (ties by prefix).
func sortByPackets(ps []PrefixStats) {
	slices.SortFunc(ps, func(a, b PrefixStats) int {
		return cmp.Or(cmp.Compare(b.Packets, a.Packets), a.Prefix.Addr().Compare(b.Prefix.Addr()), cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()))
	})
}
