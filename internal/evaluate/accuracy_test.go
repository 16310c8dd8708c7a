package evaluate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lda"
)

// bundled loads testdata/trace.pcap and an epoch grid that starts with it and
// cuts it into two epochs of more than 10⁴ packets each.
func bundled(t *testing.T) (layers.LinkType, []sim.Frame, epoch.Config) {
	t.Helper()
	link, frames, err := sim.ReadCapture("../../testdata/trace.pcap")
	if err != nil {
		t.Fatal(err)
	}
	ep := epoch.Config{Start: time.Unix(0, frames[0].TimeNS), Length: 2500 * time.Millisecond, Grace: 100 * time.Millisecond}
	return link, frames, ep
}

// runLDA impairs the bundled trace and returns the LDA rows of the epochs
// with at least 10⁴ packets.
func runLDA(t *testing.T, m sim.Impairment, cfg lda.Config, opts lda.Options) []LDARow {
	t.Helper()
	link, frames, ep := bundled(t)
	id := capture.DefaultIdentityConfig()
	tr, err := sim.Impair(link, frames, id, m)
	if err != nil {
		t.Fatal(err)
	}
	up, err := Build(link, tr.Up, id, ep, cfg)
	if err != nil {
		t.Fatal(err)
	}
	down, err := Build(link, tr.Down, id, ep, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var rows []LDARow
	for _, r := range CompareLDA(up, down, sim.EpochTruths(tr.Truth, ep, 0), opts) {
		if r.Truth.Sent >= 10_000 {
			rows = append(rows, r)
		}
	}
	if len(rows) < 2 {
		t.Fatalf("only %d epochs of 10⁴ packets", len(rows))
	}
	return rows
}

func weibull() sim.DelayModel {
	return sim.Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond}
}

// TestLDAAccuracy checks LDA (2 banks × 1024 rows) against the ground truth
// of tracegen on the bundled capture, over several draws of the impairment.
func TestLDAAccuracy(t *testing.T) {
	for _, tc := range []struct {
		loss                float64
		maxAvgMean, maxMean float64 // relative errors of the mean
		maxStd              float64 // relative error of each stddev
		minShare            float64 // effective samples / delivered packets
	}{
		{0, 0.002, 0.005, 0.10, 0.99},
		{0.001, 0.005, 0.01, 0.10, 0.97},
		{0.01, 0.01, 0.025, 0.10, 0.85},
	} {
		t.Run(fmt.Sprintf("loss=%g", tc.loss), func(t *testing.T) {
			var all []LDARow
			for seed := uint64(1); seed <= 5; seed++ {
				all = append(all, runLDA(t, sim.Impairment{Delay: weibull(), Loss: tc.loss, Seed: seed}, lda.DefaultConfig(), lda.DefaultOptions())...)
			}
			var b strings.Builder
			_ = WriteLDATable(&b, all)
			t.Logf("\n%s", b.String())
			s := Summarize(all)
			t.Logf("mean rel. error avg %.3f%% max %.3f%%; stddev avg %.2f%% max %.2f%%; effective samples %.1f%% of delivered",
				100*s.MeanRelErr, 100*s.MaxMeanRelErr, 100*s.StdRelErr, 100*s.MaxStdRelErr, 100*s.SampleShare)
			if s.Failed > 0 {
				t.Fatalf("%d epochs without an estimate", s.Failed)
			}
			if s.MeanRelErr > tc.maxAvgMean || s.MaxMeanRelErr > tc.maxMean {
				t.Errorf("mean relative error avg %.3f%% max %.3f%%, want ≤ %.2f%% and ≤ %.2f%%",
					100*s.MeanRelErr, 100*s.MaxMeanRelErr, 100*tc.maxAvgMean, 100*tc.maxMean)
			}
			if s.MaxStdRelErr > tc.maxStd {
				t.Errorf("stddev relative error up to %.2f%%, want ≤ %.0f%%", 100*s.MaxStdRelErr, 100*tc.maxStd)
			}
			if s.SampleShare < tc.minShare {
				t.Errorf("effective sample size %.1f%% of delivered packets, want ≥ %.0f%%", 100*s.SampleShare, 100*tc.minShare)
			}
			for _, r := range all {
				if r.Est.Samples == 0 || r.Est.Samples > uint64(r.Truth.SameEpoch) {
					t.Errorf("epoch %d: effective sample size %d of %d delivered", r.Truth.Epoch, r.Est.Samples, r.Truth.SameEpoch)
				}
				// Every packet is sampled: the count difference is exact.
				if want := r.Truth.Lost + r.Truth.Crossed - r.Truth.CrossedIn; r.Est.LostPackets != float64(want) {
					t.Errorf("epoch %d: count difference %.0f, want %d lost + %d crossed out − %d crossed in",
						r.Truth.Epoch, r.Est.LostPackets, r.Truth.Lost, r.Truth.Crossed, r.Truth.CrossedIn)
				}
			}
		})
	}
}

// TestLDAStddevEstimators compares the paper's collapsed-pair estimator with
// the centered one on the same LDAs, with a propagation delay ten times the
// queueing delay (a common case: a long link with light load).
func TestLDAStddevEstimators(t *testing.T) {
	delay := sim.Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 1 * time.Millisecond}
	var centered, collapsed []LDARow
	for seed := uint64(1); seed <= 3; seed++ {
		m := sim.Impairment{Delay: delay, Loss: 0.01, Seed: seed}
		centered = append(centered, runLDA(t, m, lda.DefaultConfig(), lda.DefaultOptions())...)
		collapsed = append(collapsed, runLDA(t, m, lda.DefaultConfig(), lda.Options{Bounds: lda.DefaultDelayBounds(), Stddev: lda.StddevCollapsed})...)
	}
	c, p := Summarize(centered), Summarize(collapsed)
	t.Logf("stddev rel. error: centered avg %.2f%% max %.2f%%, collapsed (paper) avg %.2f%% max %.2f%%",
		100*c.StdRelErr, 100*c.MaxStdRelErr, 100*p.StdRelErr, 100*p.MaxStdRelErr)
	if c.MaxStdRelErr > 0.10 {
		t.Errorf("centered stddev error up to %.2f%%", 100*c.MaxStdRelErr)
	}
	if c.StdRelErr >= p.StdRelErr {
		t.Errorf("centered estimator (%.2f%%) not better than the paper's (%.2f%%)", 100*c.StdRelErr, 100*p.StdRelErr)
	}
}
