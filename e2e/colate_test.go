package e2e

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/sim"
)

// TestColateHistoric runs two probes with COLATE on (one vector of every
// packet per epoch, no path configured between them) and a collector, and
// asks GetFlowLatencyHistoric, after the run, for every flow of the trace
// between the two points: each answer is compared with the flow's true
// mean and standard deviation over the whole run.
func TestColateHistoric(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	env := newEnv(t)
	dir := env.Dir
	// Flows take different routes (a per-flow delay of 50 or 400 µs) plus
	// Weibull queueing; nothing is lost, as COLATE assumes.
	m := sim.Impairment{Delay: sim.Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond},
		FlowDelay: sim.Bimodal{P: 0.5, Low: 50 * time.Microsecond, High: 400 * time.Microsecond}, Seed: 9}
	out, truth := makeTrace(t, env, m)
	flows, err := sim.FlowDelays(truth, "../testdata/trace.pcap", capture.DefaultIdentityConfig())
	if err != nil {
		t.Fatal(err)
	}

	const counters = "16384"
	cyaml := collectorYAML(filepath.Join(dir, "data"), "127.0.0.1:0", pathAB) + `params:
  colate:
    enabled: true
    counters: ` + counters + "\n"
	coll, addrs, err := env.StartCollector("collector", cyaml)
	if err != nil {
		t.Fatal(err)
	}
	runProbes(t, env, addrs.GRPC, out, "-colate", "-colate-counters", counters)
	q := query(t, addrs.GRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Every vector is acknowledged before a replaying probe exits, so all
	// are stored by now.
	list, err := q.ListColateVectors(ctx, &owlv1.ListColateVectorsRequest{ProbeId: "op-a", Limit: 1000})
	if err != nil || len(list.GetVectors()) == 0 {
		t.Fatalf("ListColateVectors: %v %v\n%s", list, err, coll.Log())
	}
	var stored, packets float64
	for _, v := range list.GetVectors() {
		stored += float64(v.GetBytes())
		packets += float64(v.GetPackets())
	}

	type row struct {
		key                 capture.FlowKey
		n                   float64
		mean, sd, got, gotS float64
		alpha, hw           float64
		paper               float64
		left                uint32
	}
	var rows []row
	for k, x := range flows {
		if x.Packets < 100 {
			continue
		}
		res, err := q.GetFlowLatencyHistoric(ctx, &owlv1.GetFlowLatencyHistoricRequest{Flow: netpath.FlowToProto(k), Upstream: "op-a", Downstream: "op-b", Gamma: 1000})
		if err != nil {
			t.Fatalf("flow %v: %v", k, err)
		}
		paper, err := q.GetFlowLatencyHistoric(ctx, &owlv1.GetFlowLatencyHistoricRequest{Flow: netpath.FlowToProto(k), Upstream: "op-a", Downstream: "op-b", Gamma: 1000, Estimator: "paper"})
		if err != nil {
			t.Fatalf("flow %v: %v", k, err)
		}
		mean, sd := x.MeanNS(), x.StddevNS()
		if res.GetPackets() != uint64(x.Packets) || res.GetDownstreamPackets() != uint64(x.Packets) {
			t.Errorf("flow %v: p_f %d upstream, %d downstream, truth %d", k, res.GetPackets(), res.GetDownstreamPackets(), x.Packets)
		}
		rows = append(rows, row{k, float64(x.Packets), mean, sd, res.GetMeanNs(), res.GetStddevNs(), res.GetAlpha(), res.GetHalfWidthNs(), paper.GetMeanNs(), res.GetLeftOutCounters()})
	}
	if len(rows) < 10 {
		t.Fatalf("only %d flows of 100 packets or more", len(rows))
	}
	slices.SortFunc(rows, func(a, b row) int { return int(b.n - a.n) })
	var b strings.Builder
	fmt.Fprintf(&b, "%-44s %7s %10s %10s %8s %10s %10s %8s %7s %10s %5s\n", "flow", "packets", "true µs", "owl µs", "rel err", "true σ µs", "owl σ µs", "± µs", "α@5%", "paper µs", "left")
	within5, within1, inInterval, paper5 := 0, 0, 0, 0
	for _, r := range rows {
		rel := math.Abs(r.got-r.mean) / r.mean
		fmt.Fprintf(&b, "%-44s %7.0f %10.3f %10.3f %8.4f %10.3f %10.3f %8.3f %7.3f %10.3f %5d\n", r.key, r.n, r.mean/1e3, r.got/1e3, rel, r.sd/1e3, r.gotS/1e3, r.hw/1e3, r.alpha, r.paper/1e3, r.left)
		if rel <= 0.05 {
			within5++
		}
		if rel <= 0.01 {
			within1++
		}
		if math.Abs(r.got-r.mean) <= r.hw {
			inInterval++
		}
		if math.Abs(r.paper-r.mean) <= 0.05*r.mean {
			paper5++
		}
	}
	frac5, frac1 := float64(within5)/float64(len(rows)), float64(within1)/float64(len(rows))
	t.Logf("COLATE n = %s, %d vectors of op-a, %.0f bits per packet stored; %d flows of ≥ 100 packets: %.1f%% within 5%% of the true mean (the paper's estimator: %d flows), %.1f%% within 1%%, %d within the reported 95%% interval:\n%s",
		counters, len(list.GetVectors()), 8*stored/packets, len(rows), 100*frac5, paper5, 100*frac1, inInterval, b.String())
	// The (0.95, 0.05) bar on the trace's flows (every packet crosses
	// both points; packets cross epoch boundaries), and the robust
	// estimator ahead of the paper's.
	if frac5 < 0.95 {
		t.Errorf("%.1f%% of flows within 5%% of their true mean, want ≥ 95%%", 100*frac5)
	}
	if paper5 >= within5 {
		t.Errorf("the paper's estimator has %d flows within 5%%, the robust one %d", paper5, within5)
	}
	metrics := httpGet(t, "http://"+addrs.HTTP+"/metrics")
	for _, want := range []string{`owl_collector_colate_vectors_total{probe="op-a"}`, "owl_collector_colate_stored_bytes"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
