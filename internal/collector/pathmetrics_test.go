package collector

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/delays"
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

// BenchmarkScrape gathers and writes out as text the series of 2,000
// paths, each with an epoch's delays and its 10 heaviest flows, as a
// Prometheus scrape of /metrics does.
func BenchmarkScrape(b *testing.B) {
	m := newMetrics()
	res, ds := sampledResult()
	s := delays.Sketch(ds, 4)
	for i := range 2000 {
		r := proto.Clone(res).(*owlv1.PathStats)
		r.Path, r.UpstreamPackets, r.DownstreamPackets, r.Lost = fmt.Sprintf("load-%d", i), 5000, 4950, 50
		m.observe(r, s)
		var top []*owlv1.FlowStats
		for f := range 10 {
			top = append(top, &owlv1.FlowStats{Flow: &owlv1.FlowKey{Src: "10.0.0.1", Dst: "192.0.2.1", SrcPort: uint32(1024 + f), DstPort: 443, Protocol: 6},
				Packets: float64(500 - f), Estimated: true, MeanNs: 1e5})
		}
		m.flowSeries.set(r.Path, top, 10)
	}
	series := 0
	for b.Loop() {
		mfs, err := m.reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
		series = 0
		for _, mf := range mfs {
			series += len(mf.GetMetric())
			if err := enc.Encode(mf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(series), "metrics")
}

// TestSeriesCollectedInOrder: the per-path, per-flow, delay and
// round-trip series come out of Collect in the order the registry sorts each metric's
// series into (label values, names in order), which then costs it a
// check rather than a sort. Paths, flows and second labels are made in
// other orders (p10 before p9 and b, "upstream" before "downstream",
// decoded "false" and "true" for each path, round-trip kinds by probe).
func TestSeriesCollectedInOrder(t *testing.T) {
	m := newMetrics()
	res, ds := sampledResult()
	s := delays.Sketch(ds, 4)
	for _, p := range []string{"p9", "p10", "b", "p1"} {
		r := proto.Clone(res).(*owlv1.PathStats)
		r.Path, r.UpstreamPackets, r.DownstreamPackets = p, 100, 99
		m.observe(r, s)
		m.pathSeries.add(p, pmPeelsDecoded, 1)
		m.pathSeries.add(p, pmPeelsUndecoded, 1)
		m.pathSeries.add(p, pmResultsMismatch, 1)
		var top []*owlv1.FlowStats
		for _, port := range []uint32{9, 10, 1, 9} {
			top = append(top, &owlv1.FlowStats{Flow: &owlv1.FlowKey{Src: "10.0.0.1", Dst: "192.0.2.1", SrcPort: port, DstPort: 443, Protocol: 6}, Packets: 5, Estimated: true, MeanNs: 1e5})
		}
		m.flowSeries.set(p, top, 4)
		// Round-trip times by probe and kind: the registry sorts by kind
		// first, the name that comes first.
		m.observeRTT(p, map[string]*ddsketch.DDSketch{"tcp-data": s, "dns": s})
	}
	for _, c := range []prometheus.Collector{m.pathSeries, m.flowSeries, m.delay, m.rtt} {
		ch := make(chan prometheus.Metric, 1000)
		c.Collect(ch)
		close(ch)
		last := map[string][]string{} // by metric: the label values of its last series
		n := 0
		for mt := range ch {
			var d dto.Metric
			if err := mt.Write(&d); err != nil {
				t.Fatal(err)
			}
			var values []string
			for _, lp := range d.GetLabel() {
				values = append(values, lp.GetValue())
			}
			name := mt.Desc().String()
			if prev, ok := last[name]; ok && slices.Compare(prev, values) >= 0 {
				t.Errorf("%s: series %q after %q", name, values, prev)
			}
			last[name] = values
			n++
		}
		if n < 4 {
			t.Errorf("%T: %d series, want one a path at least", c, n)
		}
	}
}
