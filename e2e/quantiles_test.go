package e2e

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// quantileCheck compares owl's delay quantiles of a path's epochs with the
// truth's: exact where owl says so (error 0), and otherwise the true p50
// and p99 inside the reported 95% intervals as often as 95% intervals
// should hold.
type quantileCheck struct {
	path                   string
	exact, covered, tested int
	rows                   strings.Builder
}

// trueQuantile is the q-quantile of delays as owl defines it: the value of
// rank ⌈q·n⌉.
func trueQuantile(sorted []int64, q float64) int64 {
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(len(sorted)-1, k))]
}

// epoch checks one epoch's result against its delivered packets' delays.
func (qc *quantileCheck) epoch(t *testing.T, e int64, r *owlv1.PathStats, delays []int64) {
	t.Helper()
	if len(delays) == 0 || r.GetSampleDelays() == 0 {
		return
	}
	sorted := slices.Clone(delays)
	slices.Sort(sorted)
	for _, q := range r.GetQuantiles() {
		if q.GetQ() != 0.5 && q.GetQ() != 0.99 {
			continue
		}
		truth := float64(trueQuantile(sorted, q.GetQ()))
		fmt.Fprintf(&qc.rows, "%10d %6.4f %7d %7d %5.2f %12.3f %12.3f [%.3f, %.3f] %t\n", e, r.GetSampleRate(), len(sorted), r.GetSampleDelays(), q.GetQ(),
			truth/1e3, q.GetValueNs()/1e3, q.GetLoNs()/1e3, q.GetHiNs()/1e3, q.GetExact())
		if q.GetExact() {
			qc.exact++
			if q.GetValueNs() != truth || r.GetSampleDelays() != uint64(len(sorted)) {
				t.Errorf("%s epoch %d: exact p%g %.0f ns of %d delays, truth %.0f ns of %d", qc.path, e, 100*q.GetQ(), q.GetValueNs(), r.GetSampleDelays(), truth, len(sorted))
			}
			continue
		}
		qc.tested++
		if q.GetLoNs() <= truth && truth <= q.GetHiNs() {
			qc.covered++
		}
	}
}

// done reports the table and fails when fewer intervals held the truth
// than 95% intervals would in all but one run of a thousand.
func (qc *quantileCheck) done(t *testing.T) {
	t.Helper()
	t.Logf("%s: delay quantiles vs ground truth\n%10s %6s %7s %7s %5s %12s %12s %s %s\n%s%d exact, %d of %d intervals hold the truth",
		qc.path, "epoch", "rate", "n", "owl n", "q", "true µs", "owl µs", "95% interval µs", "exact", qc.rows.String(), qc.exact, qc.covered, qc.tested)
	if qc.exact+qc.tested == 0 {
		t.Errorf("%s: no epoch with delay quantiles", qc.path)
	}
	if misses := qc.tested - qc.covered; qc.tested > 0 && misses > missBound(qc.tested) {
		t.Errorf("%s: %d of %d 95%% intervals missed the true quantile (at most %d expected)", qc.path, misses, qc.tested, missBound(qc.tested))
	}
}

// missBound is the number of misses of n 95% intervals exceeded with
// probability below 1/1000.
func missBound(n int) int {
	b := distuv.Binomial{N: float64(n), P: 0.05}
	k := 0
	for b.CDF(float64(k)) < 0.999 {
		k++
	}
	return k
}
