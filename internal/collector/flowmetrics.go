package collector

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// flowSeries are the per-flow series, owl_flow_packets and
// owl_flow_delay_mean_seconds by path and flow: each path's heaviest
// flows of its latest epoch. They are kept as plain values and become
// series only when scraped (a prometheus.Collector). As GaugeVec children
// a path's ten flows were about 140 objects on the heap (each series'
// label pairs) that every garbage collection marked, and each flow that
// entered or left the top made or deleted series (docs/benchmarks.md).
type flowSeries struct {
	packets, mean *prometheus.Desc

	mu    sync.Mutex
	paths map[string][]flowPoint // by path, heaviest first
}

// flowPoint is one top flow's values: its key (labelled only when
// scraped: a path's labels kept from epoch to epoch were hundreds of
// strings on the heap) and mean NaN while the flow has no estimate (no
// mean series then).
type flowPoint struct {
	key           *owlv1.FlowKey
	packets, mean float64
}

func newFlowSeries() *flowSeries {
	return &flowSeries{
		packets: prometheus.NewDesc("owl_flow_packets", "Packets of the heaviest flows of the path's latest epoch (top N only).", []string{"path", "flow"}, nil),
		mean:    prometheus.NewDesc("owl_flow_delay_mean_seconds", "Mean one-way delay of the heaviest flows of the path's latest epoch (top N only).", []string{"path", "flow"}, nil),
		paths:   map[string][]flowPoint{},
	}
}

// set makes the first n of top (heaviest first) a path's top flows.
func (fs *flowSeries) set(path string, top []*owlv1.FlowStats, n int) {
	if len(top) == 0 {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	points := fs.paths[path][:0]
	for _, f := range top[:min(n, len(top))] {
		p := flowPoint{key: f.GetFlow(), packets: f.GetPackets(), mean: math.NaN()}
		if f.GetEstimated() {
			p.mean = f.GetMeanNs() / 1e9
		}
		points = append(points, p)
	}
	fs.paths[path] = points
}

// flowLabel is the series label of a flow key.
func flowLabel(k *owlv1.FlowKey) string {
	return fmt.Sprintf("%d %s:%d>%s:%d", k.GetProtocol(), k.GetSrc(), k.GetSrcPort(), k.GetDst(), k.GetDstPort())
}

// Describe is prometheus.Collector's.
func (fs *flowSeries) Describe(ch chan<- *prometheus.Desc) {
	ch <- fs.packets
	ch <- fs.mean
}

// Collect is prometheus.Collector's. The values are copied out first,
// so that a scrape does not hold up the workers. Two flows of one label
// (keys that differ only in their VLAN or VNI tag, which the label leaves
// out) are one series: the heavier's. Series come sorted by flow and
// path (label names in order), as the registry sorts them
// (pathSeries.Collect).
func (fs *flowSeries) Collect(ch chan<- prometheus.Metric) {
	type point struct {
		path  string
		label string
		flowPoint
		rank int // in the path's top, heaviest first
	}
	fs.mu.Lock()
	var points []point
	for path, top := range fs.paths {
		for i, p := range top {
			points = append(points, point{path: path, flowPoint: p, rank: i})
		}
	}
	fs.mu.Unlock()
	for i := range points {
		points[i].label = flowLabel(points[i].key)
	}
	slices.SortFunc(points, func(a, b point) int {
		return cmp.Or(strings.Compare(a.label, b.label), strings.Compare(a.path, b.path), cmp.Compare(a.rank, b.rank))
	})
	for i, p := range points {
		if i > 0 && p.path == points[i-1].path && p.label == points[i-1].label {
			continue
		}
		ch <- prometheus.MustNewConstMetric(fs.packets, prometheus.GaugeValue, p.packets, p.path, p.label)
		if !math.IsNaN(p.mean) {
			ch <- prometheus.MustNewConstMetric(fs.mean, prometheus.GaugeValue, p.mean, p.path, p.label)
		}
	}
}
