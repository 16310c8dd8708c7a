package e2e

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/probe"
	"github.com/owl-latency/owl/internal/rtt"
)

// TestRTTEndToEnd: a real probe replays the bundled trace's upstream
// capture and measures round-trip times on its own; the collector stores
// them and answers GetRTTDistribution and TopRTTPrefixes, and exports
// owl_probe_rtt_seconds. owl's TCP data and handshake round-trip times
// against the unbounded matcher on the same capture (the truth of owl's
// rules), and beside Wireshark's tcp.analysis.ack_rtt, which also times
// an ACK that covers several segments (from the last of them), so it
// counts more pairs.
func TestRTTEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	env := newEnv(t)
	out, _ := makeTrace(t, env, lossOnly)
	coll, addrs, err := env.StartCollector("collector", collectorYAML(filepath.Join(env.Dir, "data"), "127.0.0.1:0", pathAB))
	if err != nil {
		t.Fatal(err)
	}
	runProbes(t, env, addrs.GRPC, out)
	truth := exactRTT(t, out.Up)
	q := query(t, addrs.GRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := probeRTT(ctx, q, "op-a", truth)
	if err != nil {
		t.Fatalf("GetRTTDistribution: %v\n%s", err, coll.Log())
	}
	shark := wiresharkRTT(t, out.Up)
	checkRTT(t, "op-a", got, truth, shark)
	if len(shark) < len(truth["tcp-data"]) {
		t.Errorf("Wireshark timed %d ACKs, fewer than the %d exact pairs owl's rules find", len(shark), len(truth["tcp-data"]))
	}
	top, err := q.TopRTTPrefixes(ctx, &owlv1.TopRTTPrefixesRequest{Probe: "op-a", Limit: 3})
	if err != nil || len(top.GetPrefixes()) == 0 {
		t.Errorf("TopRTTPrefixes: %v, %v", top, err)
	}
	for _, p := range top.GetPrefixes() {
		t.Logf("prefix %-20s %6d samples, p50 %.1f µs, p99 %.1f µs", p.GetPrefix(), p.GetSamples(), p.GetP50Ns()/1e3, p.GetP99Ns()/1e3)
	}
	if m := httpGet(t, "http://"+addrs.HTTP+"/metrics"); !strings.Contains(m, `owl_probe_rtt_seconds_count{kind="tcp-data",probe="op-a"}`) {
		t.Error("/metrics lacks owl_probe_rtt_seconds of op-a")
	}
}

// probeRTT asks a probe's round-trip times of every kind of truth over
// all its epochs, until owl has 95% of the exact tcp-data pairs or ctx
// ends.
func probeRTT(ctx context.Context, q owlv1.QueryServiceClient, probe string, truth map[string][]int64) (map[string]*owlv1.GetRTTDistributionResponse, error) {
	for {
		got := map[string]*owlv1.GetRTTDistributionResponse{}
		for kind := range truth {
			r, err := q.GetRTTDistribution(ctx, &owlv1.GetRTTDistributionRequest{Probe: probe, Kind: kind, Quantiles: []float64{0.5, 0.95, 0.99}})
			if err != nil {
				return nil, err
			}
			got[kind] = r
		}
		if n := got["tcp-data"].GetSamples(); n > 0 && float64(n) >= 0.95*float64(len(truth["tcp-data"])) || ctx.Err() != nil {
			return got, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkRTT logs a probe's round-trip times by owl, by the exact matcher
// and by Wireshark side by side, and fails where owl's pairs are more
// than 5% off the exact count, or its p50, p95 or p99 more than 5% off
// the exact value and more than half a percentile off in rank (kinds of
// ≥ 500 pairs): in a tail whose delays are sparse a small shift of
// weight moves the value far and the rank little.
func checkRTT(t testing.TB, probe string, got map[string]*owlv1.GetRTTDistributionResponse, truth map[string][]int64, shark []int64) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%-14s %8s %8s %10s %10s %10s\n", probe, "pairs", "samples", "p50 µs", "p95 µs", "p99 µs")
	for _, kind := range []string{"tcp-data", "tcp-handshake"} {
		ds := truth[kind]
		if len(ds) == 0 {
			t.Errorf("%s: no %s pairs in the capture", probe, kind)
			continue
		}
		r := got[kind]
		fmt.Fprintf(&b, "%-14s %8d %8s %10.1f %10.1f %10.1f\n", kind+" exact", len(ds), "", pct(ds, 0.5)/1e3, pct(ds, 0.95)/1e3, pct(ds, 0.99)/1e3)
		qv := r.GetQuantiles()
		if len(qv) != 3 {
			t.Errorf("%s %s: %d quantiles: %v (%s)", probe, kind, len(qv), r, r.GetNote())
			continue
		}
		fmt.Fprintf(&b, "%-14s %8.0f %8d %10.1f %10.1f %10.1f\n", kind+" owl", r.GetPairs(), r.GetSamples(), qv[0].GetValueNs()/1e3, qv[1].GetValueNs()/1e3, qv[2].GetValueNs()/1e3)
		if n := float64(len(ds)); len(ds) >= 500 {
			if math.Abs(r.GetPairs()-n) > 0.05*n {
				t.Errorf("%s %s: owl's pairs %.0f, truth %d", probe, kind, r.GetPairs(), len(ds))
			}
			for i, qu := range []float64{0.5, 0.95, 0.99} {
				// Within 5% of the exact value, or, where the exact
				// delays are sparse (a tail's gaps), within half a
				// percentile of the quantile in rank.
				v := qv[i].GetValueNs()
				rank := float64(sort.Search(len(ds), func(j int) bool { return float64(ds[j]) > v })) / n
				if want := pct(ds, qu); math.Abs(v-want) > 0.05*want && math.Abs(rank-qu) > 0.005 {
					t.Errorf("%s %s p%g: owl %.1f µs, truth %.1f µs; owl's value is the exact p%.2f", probe, kind, qu*100, v/1e3, want/1e3, 100*rank)
				}
			}
		}
	}
	if len(shark) > 0 {
		slices.Sort(shark)
		fmt.Fprintf(&b, "%-14s %8d %8s %10.1f %10.1f %10.1f\n", "wireshark", len(shark), "", pct(shark, 0.5)/1e3, pct(shark, 0.95)/1e3, pct(shark, 0.99)/1e3)
	}
	t.Logf("round-trip times:\n%s", b.String())
}

// exactRTT matches a capture's pairs by owl's rules in unbounded memory:
// their delays (ns, sorted) by kind.
func exactRTT(t testing.TB, pcap string) map[string][]int64 {
	t.Helper()
	x := rtt.NewExact(probe.DefaultRTTConfig().Fridges.Seed)
	out := map[string][]int64{}
	eachPacket(t, pcap, func(p *capture.Packet) {
		if s, ok := x.Add(p); ok {
			out[s.Kind.String()] = append(out[s.Kind.String()], s.DelayNS)
		}
	})
	for _, ds := range out {
		slices.Sort(ds)
	}
	return out
}

// eachPacket decodes a capture's packets as a probe would and hands each
// that decodes to fn.
func eachPacket(t testing.TB, pcap string, fn func(*capture.Packet)) {
	t.Helper()
	src, err := capture.OpenFile(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	d, err := capture.NewDecoder(src.LinkType(), params.Default().Identity)
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := src.Next()
		if err != nil {
			return
		}
		var p capture.Packet
		if d.Decode(f.Data, f.TimeNS, &p) == nil {
			fn(&p)
		}
	}
}

// wiresharkRTT is tshark's tcp.analysis.ack_rtt of every ACK it times, ns.
func wiresharkRTT(t testing.TB, pcap string) []int64 {
	t.Helper()
	start := time.Now()
	// Reassembly of the bulk transfers' streams (HTTP bodies) makes
	// tshark take minutes on a 30 s run of the real link, and the
	// sequence analysis does not need it.
	b, err := exec.Command("tshark", "-n", "-r", pcap, "-o", "tcp.desegment_tcp_streams:FALSE",
		"-Y", "tcp.analysis.ack_rtt", "-T", "fields", "-e", "tcp.analysis.ack_rtt").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	t.Logf("tshark's ack_rtt of %s: %v", filepath.Base(pcap), time.Since(start))
	var out []int64
	for _, l := range strings.Fields(string(b)) {
		s, err := strconv.ParseFloat(l, 64)
		if err != nil {
			t.Fatalf("tshark's ack_rtt %q: %v", l, err)
		}
		out = append(out, int64(math.Round(s*1e9)))
	}
	return out
}

// pct is the q-quantile of sorted delays (the value of rank ⌈q·n⌉), ns.
func pct(sorted []int64, q float64) float64 {
	return float64(sorted[max(0, int(math.Ceil(q*float64(len(sorted))))-1)])
}
