package evaluate

import (
	"strings"
	"testing"
)

// TestSweep runs a reduced version of the RDA paper's sweep: below the
// peeling threshold nearly every packet is decoded and the mean of every
// completely peeled epoch is exact; above it RDA degrades gracefully and
// stays ahead of an LDA of the same memory.
func TestSweep(t *testing.T) {
	cfg := DefaultSweepConfig()
	cfg.Packets = 30_000
	cfg.Diffs = []int{0, 500, 1000, 3000}
	cfg.Trials = 4
	rows := RunSweep(cfg)
	var b strings.Builder
	_ = WriteSweepTable(&b, cfg, rows)
	t.Logf("\n%s", b.String())
	for _, r := range rows[:3] {
		if r.Decoded < 0.999 || r.RDAMaxMeanPeeled > 1e-9 || r.RDAMaxMean > 1e-3 {
			t.Errorf("d=%d: decoded %.2f%%, max mean error %.2e (peeled epochs %.2e); want ≥ 99.9%%, ≤ 1e-9 when peeled, ≤ 1e-3",
				r.D, 100*r.Decoded, r.RDAMaxMean, r.RDAMaxMeanPeeled)
		}
	}
	if rows[0].Complete != 1 || rows[1].Complete < 0.75 {
		t.Errorf("peeled %.0f%% at d=0 and %.0f%% at d=500", 100*rows[0].Complete, 100*rows[1].Complete)
	}
	last := rows[3]
	if last.RDAMeanErr >= last.LDAMeanErr || last.RDAStdErr >= last.LDAStdErr {
		t.Errorf("d=%d: RDA errors (%.2e, %.2f%%) not below LDA's (%.2e, %.2f%%)", last.D, last.RDAMeanErr, 100*last.RDAStdErr, last.LDAMeanErr, 100*last.LDAStdErr)
	}
}
