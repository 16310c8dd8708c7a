package collector

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// flowValues gathers fs's series of one name through a pedantic registry
// (which also checks them against Describe and for duplicates): value by
// path and flow label.
func flowValues(t *testing.T, fs *flowSeries, name string) map[[2]string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(fs)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var k [2]string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "path":
					k[0] = l.GetValue()
				case "flow":
					k[1] = l.GetValue()
				}
			}
			out[k] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestFlowSeriesReplaced: a path's top-flow series are those of its
// latest epoch, with its values; another path's stay. A flow without an
// estimate has no mean series.
func TestFlowSeriesReplaced(t *testing.T) {
	fs := newFlowSeries()
	flow := func(port uint32) *owlv1.FlowStats {
		return &owlv1.FlowStats{Flow: &owlv1.FlowKey{Src: "10.0.0.1", Dst: "10.0.0.2", SrcPort: port, DstPort: 80, Protocol: 6}, Packets: 10, Estimated: true, MeanNs: 2e6}
	}
	fs.set("p", []*owlv1.FlowStats{flow(1), flow(2)}, 10)
	fs.set("q", []*owlv1.FlowStats{flow(3)}, 10)
	fs.set("p", []*owlv1.FlowStats{flow(4)}, 10)
	packets := flowValues(t, fs, "owl_flow_packets")
	if len(packets) != 2 || packets[[2]string{"p", "6 10.0.0.1:4>10.0.0.2:80"}] != 10 || packets[[2]string{"q", "6 10.0.0.1:3>10.0.0.2:80"}] != 10 {
		t.Errorf("packet series %v, want p's latest flow and q's, 10 each", packets)
	}
	stays := flow(4)
	stays.Packets, stays.Estimated = 20, false
	fs.set("p", []*owlv1.FlowStats{stays, flow(5)}, 10)
	packets, means := flowValues(t, fs, "owl_flow_packets"), flowValues(t, fs, "owl_flow_delay_mean_seconds")
	if len(packets) != 3 || len(means) != 2 {
		t.Errorf("%d packet series and %d mean series, want 3 and 2 (q's flow, p's two; no mean for the flow without an estimate)", len(packets), len(means))
	}
	if got := packets[[2]string{"p", "6 10.0.0.1:4>10.0.0.2:80"}]; got != 20 {
		t.Errorf("the flow that stayed: %v packets, want 20", got)
	}
	if got := means[[2]string{"p", "6 10.0.0.1:5>10.0.0.2:80"}]; math.Abs(got-0.002) > 1e-12 {
		t.Errorf("the new flow's mean: %v s, want 0.002", got)
	}
}

// TestFlowSeriesTopN: only the first n flows get series; two flows whose
// keys differ only in what the label leaves out (the VLAN or VNI tag)
// are one series, the heavier's, and the scrape does not fail on them.
func TestFlowSeriesTopN(t *testing.T) {
	fs := newFlowSeries()
	key := &owlv1.FlowKey{Src: "10.0.0.1", Dst: "10.0.0.2", SrcPort: 1, DstPort: 80, Protocol: 6}
	same := &owlv1.FlowKey{Src: "10.0.0.1", Dst: "10.0.0.2", SrcPort: 1, DstPort: 80, Protocol: 6}
	other := &owlv1.FlowKey{Src: "10.0.0.3", Dst: "10.0.0.2", SrcPort: 1, DstPort: 80, Protocol: 6}
	fs.set("p", []*owlv1.FlowStats{{Flow: key, Packets: 30}, {Flow: same, Packets: 20}, {Flow: other, Packets: 10}}, 2)
	packets := flowValues(t, fs, "owl_flow_packets")
	if len(packets) != 1 || packets[[2]string{"p", "6 10.0.0.1:1>10.0.0.2:80"}] != 30 {
		t.Errorf("packet series %v, want the heavier of the two of one label only (n = 2)", packets)
	}
	fs.set("p", []*owlv1.FlowStats{{Flow: other, Packets: 5}}, 0)
	if packets := flowValues(t, fs, "owl_flow_packets"); len(packets) != 0 {
		t.Errorf("metrics_top 0: series %v", packets)
	}
}
