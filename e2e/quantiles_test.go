package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/epoch"
)

// quantileCheck compares owl's delay quantiles of a path's epochs with the
// truth's: exact where owl says so (error 0), and otherwise the true p50
// and p99 inside the reported 95% intervals as often as 95% intervals
// should hold.
type quantileCheck struct {
	path                   string
	exact, covered, tested int
	rows                   strings.Builder
	// Relative errors of the standard deviation where it was estimated:
	// the sample's and RDA's, on the same epochs.
	sampleStd, rdaStd []float64
	exactStd          int
}

// trueQuantile is the q-quantile of delays as owl defines it: the value of
// rank ⌈q·n⌉.
func trueQuantile(sorted []int64, q float64) int64 {
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(len(sorted)-1, k))]
}

// epoch checks one epoch's result against its delivered packets' delays.
func (qc *quantileCheck) epoch(t testing.TB, e int64, r *owlv1.PathStats, delays []int64) {
	t.Helper()
	if len(delays) == 0 || r.GetSampleDelays() == 0 {
		return
	}
	sorted := slices.Clone(delays)
	slices.Sort(sorted)
	trueStd := stddevOf(sorted)
	if r.GetStddevExact() {
		qc.exactStd++
		if math.Abs(r.GetStddevNs()-trueStd) > 1e-6*trueStd {
			t.Errorf("%s epoch %d: exact stddev %.3f ns, truth %.3f ns", qc.path, e, r.GetStddevNs(), trueStd)
		}
	} else if len(sorted) >= 1000 {
		qc.sampleStd = append(qc.sampleStd, math.Abs(r.GetSampleStddevNs()-trueStd)/trueStd)
		qc.rdaStd = append(qc.rdaStd, math.Abs(r.GetStddevNs()-trueStd)/trueStd)
	}
	for _, q := range r.GetQuantiles() {
		if q.GetQ() != 0.5 && q.GetQ() != 0.99 {
			continue
		}
		truth := float64(trueQuantile(sorted, q.GetQ()))
		fmt.Fprintf(&qc.rows, "%10d %6.4f %7d %7d %5.2f %12.3f %12.3f [%.3f, %.3f] %t %s\n", e, r.GetSampleRate(), len(sorted), r.GetSampleDelays(), q.GetQ(),
			truth/1e3, q.GetValueNs()/1e3, q.GetLoNs()/1e3, q.GetHiNs()/1e3, q.GetExact(), r.GetSampleNote())
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
func (qc *quantileCheck) done(t testing.TB) {
	t.Helper()
	t.Logf("%s: delay quantiles vs ground truth\n%10s %6s %7s %7s %5s %12s %12s %s %s %s\n%s%d exact, %d of %d intervals hold the truth",
		qc.path, "epoch", "rate", "n", "owl n", "q", "true µs", "owl µs", "95% interval µs", "exact", "note", qc.rows.String(), qc.exact, qc.covered, qc.tested)
	if len(qc.sampleStd) > 0 {
		t.Logf("%s: standard deviation of %d epochs of ≥ 1,000 packets, median and largest relative error: sample %.2f%% / %.2f%%, RDA %.2f%% / %.2f%%; %d epochs exact",
			qc.path, len(qc.sampleStd), 100*median(qc.sampleStd), 100*slices.Max(qc.sampleStd), 100*median(qc.rdaStd), 100*slices.Max(qc.rdaStd), qc.exactStd)
	}
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

// checkDistribution asks GetPathDelayDistribution for a path's epochs
// first to last−1 and compares its p50 and p99 with those of every
// delivered packet's delay: the true value must lie within the sketch's
// accuracy of the answer's values at q ± 4 standard deviations of a
// weighted sample quantile's rank (each epoch's sampled delays weigh
// 1/rate, so the effective sample is (Σw)²/Σw²).
func checkDistribution(t testing.TB, q owlv1.QueryServiceClient, path string, res map[int64]*owlv1.PathStats, truth map[int64]*linkTruth, grid epoch.Config, first, last int64) {
	t.Helper()
	var all []int64
	var sw, sw2 float64
	for e := first; e < last; e++ {
		if tr := truth[e]; tr != nil {
			all = append(all, tr.delays...)
		}
		if r := res[e]; r != nil && r.GetSampleRate() > 0 {
			w := 1 / r.GetSampleRate()
			sw += float64(r.GetSampleDelays()) * w
			sw2 += float64(r.GetSampleDelays()) * w * w
		}
	}
	if len(all) == 0 || sw == 0 {
		t.Errorf("%s: no delays to compare the distribution with", path)
		return
	}
	slices.Sort(all)
	nEff := sw * sw / sw2
	var qs []float64
	for _, p := range []float64{0.5, 0.99} {
		d := 4 * math.Sqrt(p*(1-p)/nEff)
		qs = append(qs, max(p-d, 1e-6), p, min(p+d, 1-1e-6))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := q.GetPathDelayDistribution(ctx, &owlv1.GetPathDelayDistributionRequest{Path: path,
		From: timestamppb.New(time.Unix(0, grid.StartNS(first))), To: timestamppb.New(time.Unix(0, grid.StartNS(last-1))), Quantiles: qs})
	if err != nil {
		t.Fatalf("GetPathDelayDistribution %s: %v", path, err)
	}
	got := r.GetQuantiles()
	if len(got) != len(qs) {
		t.Fatalf("%s: %d quantiles for %d asked", path, len(got), len(qs))
	}
	for i := 0; i < len(qs); i += 3 {
		p := qs[i+1]
		want := float64(all[int(p*float64(len(all)-1))])
		lo, hi := got[i].GetLoNs(), got[i+2].GetHiNs()
		t.Logf("%s over %d epochs (%d sketched), %.0f packets (truth %d): p%g %.1f µs, truth %.1f µs, accepted [%.1f, %.1f] µs",
			path, r.GetEpochs(), r.GetSketchedEpochs(), r.GetPackets(), len(all), 100*p, got[i+1].GetValueNs()/1e3, want/1e3, lo/1e3, hi/1e3)
		if want < lo || want > hi {
			t.Errorf("%s: p%g over the run %.1f µs, truth %.1f µs outside [%.1f, %.1f]", path, 100*p, got[i+1].GetValueNs()/1e3, want/1e3, lo/1e3, hi/1e3)
		}
	}
}

// stddevOf is the population standard deviation of delays.
func stddevOf(delays []int64) float64 {
	var sum, sq float64
	for _, d := range delays {
		sum += float64(d)
	}
	m := sum / float64(len(delays))
	for _, d := range delays {
		sq += (float64(d) - m) * (float64(d) - m)
	}
	return math.Sqrt(sq / float64(len(delays)))
}

func median(x []float64) float64 {
	y := slices.Clone(x)
	slices.Sort(y)
	return y[len(y)/2]
}
