package evaluate

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"text/tabwriter"

	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// SweepConfig reproduces the RDA paper's set-difference sweep (§VII-B2):
// a fixed RDA (k = 2, 5,000 buckets in all) against a growing set
// difference d, half lost packets and half reordered ones, with an LDA of
// the same memory beside it on the same epochs.
type SweepConfig struct {
	Packets int   // common packets per epoch
	Diffs   []int // set difference sizes
	Trials  int   // epochs per size
	RDA     rda.Config
	Seed    uint64
}

// DefaultSweepConfig is the paper's setting: 2 banks × 2,500 buckets,
// d = 0 … 10,000, on epochs of 10⁵ packets with Weibull delays.
func DefaultSweepConfig() SweepConfig {
	return SweepConfig{
		Packets: 100_000,
		Diffs:   []int{0, 500, 1000, 1500, 2000, 2500, 3000, 4000, 5000, 7500, 10000},
		Trials:  10,
		RDA:     rda.Config{Banks: 2, Buckets: 2500, Seed: 1, Check: true},
		Seed:    1,
	}
}

// SweepRow is the outcome for one set-difference size.
type SweepRow struct {
	D          int
	Complete   float64 // share of epochs peeled completely
	Decoded    float64 // share of the set difference decoded
	RDAMeanErr float64 // average relative error of the mean
	RDAMaxMean float64
	// RDAMaxMeanPeeled is the largest mean error among completely peeled epochs.
	RDAMaxMeanPeeled float64
	RDAStdErr        float64
	LDAMeanErr       float64
	LDAStdErr        float64
	LDAFailed        int // epochs without any usable LDA row
	RDABytes         int // wire size of one side's RDA
	LDABytes         int
	LDARowsTotal     int
}

// RunSweep runs the sweep.
func RunSweep(cfg SweepConfig) []SweepRow {
	r := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	lcfg := sweepLDAConfig(cfg.RDA)
	var rows []SweepRow
	for _, d := range cfg.Diffs {
		rows = append(rows, runSweepSize(cfg, lcfg, r, d))
	}
	return rows
}

// sweepLDAConfig gives the LDA the RDA's memory: a bucket holds three
// 8-byte fields and a 4-byte check, a row two 8-byte fields.
func sweepLDAConfig(rcfg rda.Config) lda.Config {
	ldaRows := rcfg.Banks * rcfg.Buckets * 28 / 16 / 2
	ldaRows -= ldaRows % 2
	return lda.Config{Rows: ldaRows, BankSampleLog2: []uint8{0, 4}, Seed: 2}
}

// runSweepSize runs cfg.Trials epochs with a set difference of d and
// averages their outcomes into one row.
func runSweepSize(cfg SweepConfig, lcfg lda.Config, r *rand.Rand, d int) SweepRow {
	row := SweepRow{D: d, LDARowsTotal: 2 * lcfg.Rows}
	var ldaOK int
	for trial := 0; trial < cfg.Trials; trial++ {
		ep := newSweepEpoch(cfg, lcfg, r, d)
		row.addRDA(cfg.RDA, ep, d)
		if row.addLDA(ep) {
			ldaOK++
		}
		if trial == 0 {
			b, _ := ep.up.MarshalBinary()
			row.RDABytes = len(b)
			lb, _ := ep.lup.MarshalBinary()
			row.LDABytes = len(lb)
		}
	}
	row.average(cfg.Trials, ldaOK)
	return row
}

// sweepEpoch is one epoch of the sweep: both sides' RDA and LDA, the
// timestamps each side saw, and the true delay mean and deviation.
type sweepEpoch struct {
	up, down     *rda.RDA
	lup, ldown   *lda.LDA
	upTS, downTS map[uint64]int64
	mean, std    float64
}

// newSweepEpoch draws one epoch's traffic with d/2 lost packets and d−d/2
// extra ones and records it on both sides.
func newSweepEpoch(cfg SweepConfig, lcfg lda.Config, r *rand.Rand, d int) sweepEpoch {
	var ep sweepEpoch
	ep.up, _ = rda.New(cfg.RDA)
	ep.down, _ = rda.New(cfg.RDA)
	ep.lup, _ = lda.New(lcfg)
	ep.ldown, _ = lda.New(lcfg)
	ep.upTS, ep.downTS = map[uint64]int64{}, map[uint64]int64{}
	var sum, sq float64
	lost, extra := d/2, d-d/2
	for i := 0; i < cfg.Packets+lost; i++ {
		id, ts := r.Uint64(), r.Int64N(999_000_000)
		ep.up.Insert(id, ts)
		ep.lup.Insert(id, ts)
		ep.upTS[id] = ts
		if i >= cfg.Packets {
			continue
		}
		dl := 20_000 + int64(50_000*math.Pow(-math.Log(1-r.Float64()), 1/0.65))
		ep.down.Insert(id, ts+dl)
		ep.ldown.Insert(id, ts+dl)
		ep.downTS[id] = ts + dl
		sum += float64(dl)
		sq += float64(dl) * float64(dl)
	}
	for i := 0; i < extra; i++ {
		id, ts := r.Uint64(), r.Int64N(300_000)
		ep.down.Insert(id, ts)
		ep.ldown.Insert(id, ts)
		ep.downTS[id] = ts
	}
	ep.mean = sum / float64(cfg.Packets)
	ep.std = math.Sqrt(sq/float64(cfg.Packets) - ep.mean*ep.mean)
	return ep
}

// addRDA peels and repairs the epoch's RDA pair and adds its outcome to
// the row's sums.
func (row *SweepRow) addRDA(rcfg rda.Config, ep sweepEpoch, d int) {
	diff, _ := reconcile.Peel(ep.up, ep.down)
	if diff.Complete() {
		row.Complete++
	}
	if d > 0 {
		row.Decoded += float64(diff.Size()) / float64(d)
	} else {
		row.Decoded++
	}
	u := reconcile.NewUsable(rcfg, diff)
	reconcile.Repair(ep.up, diff.Lost, ep.upTS, u)
	reconcile.Repair(ep.down, diff.Extra, ep.downTS, u)
	if est, err := reconcile.Compute(ep.up, ep.down, u, reconcile.StddevCentered); err == nil {
		me := math.Abs(est.MeanNS-ep.mean) / ep.mean
		row.RDAMeanErr += me
		row.RDAMaxMean = max(row.RDAMaxMean, me)
		if diff.Complete() {
			row.RDAMaxMeanPeeled = max(row.RDAMaxMeanPeeled, me)
		}
		row.RDAStdErr += math.Abs(est.StddevNS-ep.std) / ep.std
	} else {
		row.RDAMeanErr++
		row.RDAMaxMean = 1
		row.RDAStdErr++
	}
}

// addLDA estimates from the epoch's LDA pair and adds the errors to the
// row's sums; it reports whether the LDA gave an estimate.
func (row *SweepRow) addLDA(ep sweepEpoch) bool {
	est, err := lda.EstimatePair(ep.lup, ep.ldown, lda.DefaultOptions())
	if err != nil {
		row.LDAFailed++
		return false
	}
	row.LDAMeanErr += math.Abs(est.MeanNS-ep.mean) / ep.mean
	row.LDAStdErr += math.Abs(est.StddevNS-ep.std) / ep.std
	return true
}

// average turns the row's sums over trials epochs into means, the LDA's
// over the ldaOK epochs it estimated.
func (row *SweepRow) average(trials, ldaOK int) {
	n := float64(trials)
	row.Complete /= n
	row.Decoded /= n
	row.RDAMeanErr /= n
	row.RDAStdErr /= n
	if ldaOK > 0 {
		row.LDAMeanErr /= float64(ldaOK)
		row.LDAStdErr /= float64(ldaOK)
	}
}

// WriteSweepTable prints the sweep.
func WriteSweepTable(w io.Writer, cfg SweepConfig, rows []SweepRow) error {
	fmt.Fprintf(w, "RDA %d banks × %d buckets (check %t) vs LDA of the same memory (%d rows); %d common packets, Weibull delays, %d epochs per d\n",
		cfg.RDA.Banks, cfg.RDA.Buckets, cfg.RDA.Check, rows[0].LDARowsTotal, cfg.Packets, cfg.Trials)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "d\tpeeled\tdecoded\tRDA mean err\tRDA max\tRDA std err\tLDA mean err\tLDA std err\tLDA failed\tRDA bytes\tLDA bytes\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%.0f%%\t%.1f%%\t%.2e\t%.2e\t%.2f%%\t%.2e\t%.2f%%\t%d\t%d\t%d\t\n",
			r.D, 100*r.Complete, 100*r.Decoded, r.RDAMeanErr, r.RDAMaxMean, 100*r.RDAStdErr, r.LDAMeanErr, 100*r.LDAStdErr, r.LDAFailed, r.RDABytes, r.LDABytes)
	}
	return tw.Flush()
}
