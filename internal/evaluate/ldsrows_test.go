package evaluate

import (
	"fmt"
	"math/bits"
	"testing"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lds"
)

// TestLDSRowsForLoss: the collector's LDS (4 rows × 4,096 cells, k = 4,
// rows sampling 1/64, 1/8, 1/2, 1) against the rows lds.RowsFor keeps at
// the default flows.lds_min_rows (2) for the epoch's loss and largest
// flow, at no loss, 0.1% and 1%, on half a million packets of 30,000
// flows: fewer rows where the loss allows, and about the same estimates.
func TestLDSRowsForLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("half a million packets, three loss rates")
	}
	link, frames, ep := flowTrace(t)
	tr, err := sim.Impair(link, frames, capture.DefaultIdentityConfig(), flowDelays(0, 0, 3))
	if err != nil {
		t.Fatal(err)
	}
	largest := 0.0
	for _, flows := range sim.FlowTruths(tr.Truth, ep, 0) {
		for _, f := range flows {
			largest = max(largest, float64(f.Sent))
		}
	}
	full := lds.Config{Rows: 4, Cols: 4096, K: 4, RowSampleLog2: []uint8{6, 3, 1, 0}, Seed: 1}
	for _, tc := range []struct {
		loss float64
		rows int
	}{{0, 2}, {0.001, 3}, {0.01, 4}} {
		t.Run(fmt.Sprintf("loss=%g", tc.loss), func(t *testing.T) {
			mask := lds.RowsFor(full, tc.loss, largest, 2)
			if n := bits.OnesCount32(mask); n != tc.rows {
				t.Errorf("largest flow %.0f packets: kept %d rows (%04b), want %d", largest, n, mask, tc.rows)
			}
			cfg, err := full.Select(mask)
			if err != nil {
				t.Fatal(err)
			}
			m := flowDelays(tc.loss, 0, 3)
			all := runLDS(t, link, frames, ep, m, full, lds.DefaultOptions())
			logBins(t, fmt.Sprintf("all 4 rows, loss %g", tc.loss), all)
			kept := runLDS(t, link, frames, ep, m, cfg, lds.DefaultOptions())
			logBins(t, fmt.Sprintf("rows sampling 2^-%v, loss %g", cfg.RowSampleLog2, tc.loss), kept)
			for i := range all {
				if kept[i].NoEstimate > all[i].NoEstimate+1 || kept[i].Median > 1.25*all[i].Median+0.01 {
					t.Errorf("bin %v: %d of %d flows without estimate, median error %.2f%%; all rows: %d, %.2f%%",
						all[i].Bin, kept[i].NoEstimate, kept[i].Flows, 100*kept[i].Median, all[i].NoEstimate, 100*all[i].Median)
				}
			}
		})
	}
}
