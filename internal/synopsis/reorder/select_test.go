package reorder

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// prefixN is the n-th /24 of 10.0.0.0/8.
func prefixN(n int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(n >> 8), byte(n), 0}), 24)
}

// epochReport is a report of one epoch: prefix i has packets[i] packets
// and reordered[i] reordered, in one flow each.
func epochReport(packets, reordered []uint64) *Report {
	r := &Report{}
	for i, n := range packets {
		if n == 0 {
			continue
		}
		var s Stats
		s.addFlow(n, reordered[i], 0)
		r.Prefixes = append(r.Prefixes, PrefixStats{Prefix: prefixN(i), Stats: s})
		r.Counters.Segments += n
	}
	return r
}

// listed says whether r lists p.
func listed(r *Report, p netip.Prefix) bool {
	return slices.ContainsFunc(r.Prefixes, func(x PrefixStats) bool { return x.Prefix == p })
}

// TestSelectorListsWatched: with more prefixes than a report lists, a
// small prefix that reorders is not listed in the epoch it first shows
// it (that epoch is chosen by packets), and is listed in every later
// epoch it has packets in, whether it reorders there or not; the
// prefixes not listed are summed in Other and nothing is lost.
func TestSelectorListsWatched(t *testing.T) {
	const prefixes, maxPrefixes = 20, 4
	s := NewSelector(maxPrefixes)
	small := prefixN(prefixes - 1)
	for e := range 5 {
		packets := make([]uint64, prefixes)
		reordered := make([]uint64, prefixes)
		for i := range packets {
			packets[i] = uint64(1000 - 10*i)
		}
		if e == 0 || e == 3 {
			reordered[prefixes-1] = 5
		}
		if e == 2 {
			packets[prefixes-1] = 0 // no traffic: not listed, still watched
		}
		r := epochReport(packets, reordered)
		before := r.Total()
		s.Cut(r)
		if len(r.Prefixes) != maxPrefixes || r.PrefixesFolded != len(packets)-maxPrefixes-btoi(e == 2) {
			t.Fatalf("epoch %d: %d prefixes listed, %d folded", e, len(r.Prefixes), r.PrefixesFolded)
		}
		if after := r.Total(); after != before {
			t.Errorf("epoch %d: total %+v after the cut, %+v before", e, after, before)
		}
		if want := e == 1 || e >= 3; listed(r, small) != want {
			t.Errorf("epoch %d: small reordering prefix listed %v, want %v", e, listed(r, small), want)
		}
		if !listed(r, prefixN(0)) || !listed(r, prefixN(maxPrefixes-2)) {
			t.Errorf("epoch %d: the largest prefixes are not listed: %v", e, r.Prefixes)
		}
		if !slices.IsSortedFunc(r.Prefixes, func(a, b PrefixStats) int { return cmp.Compare(b.Packets, a.Packets) }) {
			t.Errorf("epoch %d: not sorted by packets", e)
		}
	}
	if s.Watched() != 1 {
		t.Errorf("%d prefixes watched, want 1", s.Watched())
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSelectorIsFair plays many epochs of prefixes that reorder rarely
// (about 0.4 reordered packets an epoch each) past a report too small
// for all of them, and sums each prefix's listed epochs as the collector
// does: the Selector's sums give the true rate (within 3 standard
// errors), while listing the prefixes that reordered in the epoch itself
// makes them look twice as bad as they are.
func TestSelectorIsFair(t *testing.T) {
	const prefixes, maxPrefixes, epochs, rate, perEpoch = 200, 40, 400, 0.002, 200
	rng := rand.New(rand.NewPCG(1, 2))
	s := NewSelector(maxPrefixes)
	var watch, epoch Stats
	for range epochs {
		packets := make([]uint64, prefixes)
		reordered := make([]uint64, prefixes)
		for i := range packets {
			packets[i] = perEpoch
			for range perEpoch {
				if rng.Float64() < rate {
					reordered[i]++
				}
			}
		}
		r := epochReport(packets, reordered)
		s.Cut(r)
		for _, p := range r.Prefixes {
			watch.Add(p.Stats)
		}
		r = epochReport(packets, reordered)
		slices.SortFunc(r.Prefixes, func(a, b PrefixStats) int { return cmp.Compare(b.Reordered, a.Reordered) })
		for _, p := range r.Prefixes[:maxPrefixes] {
			epoch.Add(p.Stats)
		}
	}
	se := math.Sqrt(rate * (1 - rate) / float64(watch.Packets))
	t.Logf("watch list: %d packets listed, rate %.5f (true %.5f ± %.5f); by the epoch's reordering: %.5f", watch.Packets, watch.Rate(), rate, se, epoch.Rate())
	if watch.Packets < epochs*maxPrefixes*perEpoch/2 {
		t.Errorf("the watch list listed %d packets of %d", watch.Packets, epochs*maxPrefixes*perEpoch)
	}
	if math.Abs(watch.Rate()-rate) > 3*se {
		t.Errorf("the watch list's sums: rate %.5f, true %.5f ± %.5f", watch.Rate(), rate, se)
	}
	if epoch.Rate() < 1.5*rate {
		t.Errorf("listing by the epoch's reordering: rate %.5f, want the bias (≥ %.5f) that the watch list avoids", epoch.Rate(), 1.5*rate)
	}
}

// TestSelectorBounded: a flood of prefixes that each reorder once keeps
// the watch list at WatchPerSlot per prefix listed, and a watched prefix
// that stops reordering leaves the list once its evidence has faded.
func TestSelectorBounded(t *testing.T) {
	const maxPrefixes = 8
	s := NewSelector(maxPrefixes)
	for e := range 50 {
		packets := make([]uint64, 1000)
		reordered := make([]uint64, 1000)
		for i := range 100 {
			packets[e*17+i] = 100
			reordered[e*17+i] = 1
		}
		s.Cut(epochReport(packets, reordered))
		if s.Watched() > WatchPerSlot*maxPrefixes || len(s.index) != s.Watched() {
			t.Fatalf("epoch %d: %d prefixes watched (index %d), at most %d", e, s.Watched(), len(s.index), WatchPerSlot*maxPrefixes)
		}
	}
	quiet := make([]uint64, 1000)
	for i := range quiet {
		quiet[i] = 100
	}
	for e := range 2 * watchHalfLife {
		s.Cut(epochReport(quiet, make([]uint64, 1000)))
		if e == watchHalfLife/2 && s.Watched() == 0 {
			t.Fatalf("the watch list emptied after %d quiet epochs", e+1)
		}
	}
	if s.Watched() != 0 {
		t.Errorf("%d prefixes still watched after %d quiet epochs", s.Watched(), 2*watchHalfLife)
	}
}

func TestLowerBound(t *testing.T) {
	for _, tc := range []struct {
		o, n, lo, hi float64
	}{
		{0, 1000, 0, 0},
		{1, 0, 0, 0},
		{10, 1000, 0.0050, 0.0051},
		{1, 30, 0.0016, 0.0017},
		{1, 1, 0.05, 0.06},
		{4000, 4000, 0.99, 1},
	} {
		t.Run(fmt.Sprintf("%g of %g", tc.o, tc.n), func(t *testing.T) {
			if b := lowerBound(tc.o, tc.n); b < tc.lo || b > tc.hi || b > tc.o/max(tc.n, 1) {
				t.Errorf("lowerBound = %v, want in [%v, %v] and below the rate", b, tc.lo, tc.hi)
			}
		})
	}
}

// TestTrackerReportIsSelectorCut: a tracker whose reports list 5
// prefixes reports, epoch after epoch, what a Selector of 5 makes of the
// full reports of the same tracker listing all of them.
func TestTrackerReportIsSelectorCut(t *testing.T) {
	pkts := stream(400, 40, 30, 0.03, 0.01, 4)
	c := DefaultConfig()
	c.Prefixes.Max = 5
	cut, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Prefixes.Max = MaxPrefixes
	full, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	sel := NewSelector(5)
	for i := range pkts {
		cut.Add(&pkts[i])
		full.Add(&pkts[i])
		if i%(len(pkts)/8) != len(pkts)/8-1 {
			continue
		}
		got, want := cut.Report(), full.Report()
		if len(want.Prefixes) <= 5 {
			t.Fatalf("epoch of %d prefixes: nothing to cut", len(want.Prefixes))
		}
		sel.Cut(want)
		if !slices.Equal(got.Prefixes, want.Prefixes) || got.Other != want.Other || got.PrefixesFolded != want.PrefixesFolded {
			t.Fatalf("packet %d: tracker %+v, selector %+v", i, got, want)
		}
	}
	if sel.Watched() == 0 {
		t.Error("no prefix watched")
	}
}
