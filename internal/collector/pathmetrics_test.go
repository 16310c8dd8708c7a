package collector

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// get is a series' value, for tests (0 when it does not exist).
func (ps *pathSeries) get(path string, k pathMetric) float64 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if pv := ps.paths[path]; pv != nil {
		return pv.v[k]
	}
	return 0
}

// TestPathSeries: a path's series appear once set or added to (a counter
// even by 0), counters add up, gauges take the latest result, and the
// scrape passes a pedantic registry's checks (every series described,
// none twice).
func TestPathSeries(t *testing.T) {
	ps := newPathSeries()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(ps)
	ps.add("p", pmResultsOK, 1)
	ps.add("p", pmResultsOK, 1)
	ps.add("p", pmResultsMismatch, 1)
	ps.add("q", pmReordered, 0)
	ps.add("p", pmPacketsUp, 5000)
	ps.add("p", pmPeelsDecoded, 1)
	ps.latest(&owlv1.PathStats{Path: "q", Epoch: 7, MeanNs: 2500, StddevNs: 100, Samples: 40, ClockUncertaintyNs: 300, ClockFlagged: true})
	ps.latest(&owlv1.PathStats{Path: "q", Epoch: 8, MeanNs: 3000, StddevNs: 100, Samples: 50, ClockUncertaintyNs: 300})
	want := `
# HELP owl_collector_results_total Epoch results computed, by path and status.
# TYPE owl_collector_results_total counter
owl_collector_results_total{path="p",status="mismatch"} 1
owl_collector_results_total{path="p",status="ok"} 2
# HELP owl_path_reordered_packets_total Packets only the downstream point saw (not duplicates, not sent in the previous epoch).
# TYPE owl_path_reordered_packets_total counter
owl_path_reordered_packets_total{path="q"} 0
# HELP owl_path_packets_total Packets the path's synopses counted, by side.
# TYPE owl_path_packets_total counter
owl_path_packets_total{path="p",side="upstream"} 5000
# HELP owl_collector_rda_reconciliations_total RDA reconciliations, by whether peeling decoded the whole set difference.
# TYPE owl_collector_rda_reconciliations_total counter
owl_collector_rda_reconciliations_total{decoded="true",path="p"} 1
# HELP owl_path_delay_mean_seconds Mean one-way delay of the path's latest epoch.
# TYPE owl_path_delay_mean_seconds gauge
owl_path_delay_mean_seconds{path="q"} 3e-06
# HELP owl_path_last_epoch Number of the path's latest epoch with a result.
# TYPE owl_path_last_epoch gauge
owl_path_last_epoch{path="q"} 8
# HELP owl_path_clock_flagged 1 when the path's latest epoch is flagged: clock uncertainty above the configured share of the mean, or a clock not synchronized.
# TYPE owl_path_clock_flagged gauge
owl_path_clock_flagged{path="q"} 0
`
	names := []string{"owl_collector_results_total", "owl_path_reordered_packets_total", "owl_path_packets_total", "owl_collector_rda_reconciliations_total",
		"owl_path_delay_mean_seconds", "owl_path_last_epoch", "owl_path_clock_flagged", "owl_path_lost_packets_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 11 {
		t.Errorf("%d series (%v), want 11: p's 4, q's reordered and 6 gauges", n, err)
	}
	if got := ps.get("p", pmResultsOK); got != 2 {
		t.Errorf("get: %v, want 2", got)
	}
}
