package e2e

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/probe"
	"github.com/owl-latency/owl/internal/synopsis/reorder"
)

// Per-prefix reordering on the real link. The client namespace also
// holds 10.78.0.1/24 and serves bulk downloads from it and from
// 10.77.0.1 to a client in the server namespace: TCP data that crosses
// the relay's impaired direction from two source prefixes. The relay
// holds back 5% of the frames from 10.78.0.0/24 and 0.5% of the others,
// and keeps each flow's other frames in order (-flow-order), so that the
// delay's jitter does not reorder the bulk transfers by itself.
const (
	reorderedPrefix = "10.78.0.0/24"
	reorderedAddr   = "10.78.0.1"
	// reorderMinRate and reorderMinPackets are the threshold of a
	// "reordered prefix": the relay's 5% for 10.78.0.0/24 is above it,
	// its 0.5% elsewhere below.
	reorderMinRate    = 0.01
	reorderMinPackets = 1000
)

// reorderRelayArgs are the relay's flags for per-prefix reordering.
func reorderRelayArgs() []string {
	return []string{"-reorder-prefix", reorderedPrefix + "=0.05", "-flow-order"}
}

// addReorderedPrefix gives the client namespace cl a second address, in
// reorderedPrefix, and the server namespace sv a route to it.
func addReorderedPrefix(t *testing.T, cl, sv string) {
	t.Helper()
	sh(t, "ip", "netns", "exec", cl, "ip", "addr", "add", reorderedAddr+"/24", "dev", "cl0")
	sh(t, "ip", "netns", "exec", sv, "ip", "route", "add", reorderedPrefix, "dev", "sv0")
}

// startReorderServer serves bulk downloads in the client namespace cl,
// from both its addresses.
func startReorderServer(t *testing.T, env *harness.Env, cl string) *harness.Proc {
	t.Helper()
	p, err := env.StartIn(cl, "trafficgen-server-cl", "trafficgen", "-mode", "server")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startReorderClients fetches bulk downloads from the client namespace
// in the server namespace sv for dur: two flows from reorderedAddr and
// one from 10.77.0.1, 300 kB/s each, and a few small exchanges with
// reorderedAddr.
func startReorderClients(t *testing.T, env *harness.Env, sv string, dur time.Duration) []*harness.Proc {
	t.Helper()
	var clients []*harness.Proc
	for _, c := range []struct{ name, addr, flows, rr string }{
		{"trafficgen-from-78", reorderedAddr, "2", "20"},
		{"trafficgen-from-77", "10.77.0.1", "1", "0"},
	} {
		p, err := env.StartIn(sv, c.name, "trafficgen", "-mode", "client", "-server", c.addr, "-duration", dur.String(),
			"-bulk-flows", c.flows, "-bulk-rate", "300000", "-rr-rate", c.rr, "-dns-rate", "0", "-udp-rate", "0")
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, p)
	}
	return clients
}

// exactReorder runs the exact reordering tracker, with the probes'
// default prefixes, over a capture: each prefix's counts over all of it.
func exactReorder(t testing.TB, pcap string) map[netip.Prefix]reorder.Stats {
	t.Helper()
	pc := probe.DefaultReorderConfig().Prefixes
	pc.Max = reorder.MaxPrefixes
	x := reorder.NewExact(pc)
	eachPacket(t, pcap, x.Add)
	out := map[netip.Prefix]reorder.Stats{}
	for _, p := range x.Report().Prefixes {
		out[p.Prefix] = p.Stats
	}
	return out
}

// probeReordering asks ListReorderedPrefixes of a probe over its whole
// run, every prefix, until its total has 95% of the packets of the truth
// or ctx ends.
func probeReordering(ctx context.Context, q owlv1.QueryServiceClient, probe string, truth map[netip.Prefix]reorder.Stats) (*owlv1.ListReorderedPrefixesResponse, error) {
	var want uint64
	for _, s := range truth {
		want += s.Packets
	}
	for {
		r, err := q.ListReorderedPrefixes(ctx, &owlv1.ListReorderedPrefixesRequest{Probe: probe, Limit: 1000})
		if err != nil {
			return nil, err
		}
		if float64(r.GetTotal().GetPackets()) >= 0.95*float64(want) || ctx.Err() != nil {
			return r, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkRealLinkReordering compares a probe's reordered prefixes with
// the exact tracker over its own capture, logs them side by side, and
// asks ListReorderedPrefixes for the prefixes over the threshold: at the
// probe downstream of the relay reorderedPrefix alone, with a rate within
// three standard errors of the truth; upstream of it none.
func checkRealLinkReordering(t testing.TB, q owlv1.QueryServiceClient, probe, pcap string, downstream bool) {
	t.Helper()
	truth := exactReorder(t, pcap)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all, err := probeReordering(ctx, q, probe, truth)
	if err != nil {
		t.Errorf("ListReorderedPrefixes of %s: %v", probe, err)
		return
	}
	t.Logf("reordering at %s (%d reports), owl against the exact tracker over its capture:\n%s", probe, all.GetEpochs(), reorderTable(all, truth))
	over, err := q.ListReorderedPrefixes(ctx, &owlv1.ListReorderedPrefixesRequest{Probe: probe, MinRate: reorderMinRate, MinPackets: reorderMinPackets})
	if err != nil {
		t.Errorf("ListReorderedPrefixes of %s over %g: %v", probe, reorderMinRate, err)
		return
	}
	var got []string
	for _, p := range over.GetPrefixes() {
		got = append(got, p.GetPrefix())
	}
	var want []string
	if downstream {
		want = []string{reorderedPrefix}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: prefixes reordered at ≥ %g%% over ≥ %d packets: %v, want %v", probe, 100*reorderMinRate, reorderMinPackets, got, want)
	}
	// The truth agrees with the relay's flags, or the run proves nothing.
	for p, s := range truth {
		if over := s.Packets >= reorderMinPackets && s.Rate() >= reorderMinRate; over != (downstream && p.String() == reorderedPrefix) {
			t.Errorf("%s: the exact tracker has %v at %.2f%% over %d packets", probe, p, 100*s.Rate(), s.Packets)
		}
	}
	for _, p := range over.GetPrefixes() {
		s := truth[netip.MustParsePrefix(p.GetPrefix())]
		if d := math.Abs(p.GetRate() - s.Rate()); d > 3*p.GetRateSe() {
			t.Errorf("%s %s: owl's rate %.3f%% ± %.3f%%, exact %.3f%%: %.1f standard errors off", probe, p.GetPrefix(),
				100*p.GetRate(), 100*p.GetRateSe(), 100*s.Rate(), d/p.GetRateSe())
		}
	}
}

// reorderTable lines up owl's prefixes (and its other) with the exact
// tracker's, most packets first.
func reorderTable(r *owlv1.ListReorderedPrefixesResponse, truth map[netip.Prefix]reorder.Stats) string {
	owl := map[string]*owlv1.ReorderedPrefix{}
	for _, p := range r.GetPrefixes() {
		owl[p.GetPrefix()] = p
	}
	var rows []string
	for p := range truth {
		rows = append(rows, p.String())
	}
	for p := range owl {
		if !slices.Contains(rows, p) {
			rows = append(rows, p)
		}
	}
	slices.SortFunc(rows, func(a, b string) int {
		return cmp.Compare(truth[netip.MustParsePrefix(b)].Packets, truth[netip.MustParsePrefix(a)].Packets)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s %8s %9s %9s %7s %9s %6s %18s %6s\n", "prefix", "packets", "reordered", "retrans", "rate", "owl pkts", "flows", "owl rate ± SE", "off")
	for _, p := range rows {
		s, o := truth[netip.MustParsePrefix(p)], owl[p]
		off := math.NaN()
		if o.GetRateSe() > 0 {
			off = (o.GetRate() - s.Rate()) / o.GetRateSe()
		}
		fmt.Fprintf(&b, "%-16s %8d %9d %9d %6.3f%% %9d %6d %8.3f%% ± %.3f%% %5.1fσ\n", p, s.Packets, s.Reordered, s.Retransmitted, 100*s.Rate(),
			o.GetPackets(), o.GetFlows(), 100*o.GetRate(), 100*o.GetRateSe(), off)
	}
	if o := r.GetOther(); o != nil {
		fmt.Fprintf(&b, "%-16s %8s %9s %9s %7s %9d %6d %8.3f%% ± %.3f%%\n", "other", "", "", "", "", o.GetPackets(), o.GetFlows(), 100*o.GetRate(), 100*o.GetRateSe())
	}
	return b.String()
}
