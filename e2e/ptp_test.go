package e2e

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/epoch"
)

// TestPTPCorrection runs facebook/time's ptp4u as the grandmaster (software
// timestamps) in its own namespace and probes that synchronize to it with
// owl's built-in SPTP client over a management bridge, while real traffic
// crosses a veth pair between two other namespaces. The downstream probes'
// clocks carry an artificial +300 µs fault, applied to every local
// timestamp, their PTP exchanges included. Two paths measure the same
// packets:
//
//   - fixed: the probes correct timestamps by their measured offset; each
//     epoch's mean must match the ground truth within the reported ±;
//   - raw: the probes measure and report the offset but do not correct;
//     each epoch's mean is off by the fault, and the ± says so.
//
// A fifth probe whose grandmaster never answers must be listed
// unsynchronized. Ground truth: the probes' own dumps of the kernel's
// capture timestamps (before fault and correction), matched by tshark
// header fields.
func TestPTPCorrection(t *testing.T) {
	needRoot(t, "ip", "tshark")
	env := newEnv(t)
	dir := env.Dir
	const fault = 300 * time.Microsecond

	// Namespaces: gm (grandmaster), pa and pb (the two observation
	// points); a bridge here joins the three for PTP and for the probes'
	// connection to the collector; a veth pair da–db carries the traffic.
	gm, pa, pb := "owl-ptp-gm", "owl-ptp-a", "owl-ptp-b"
	br := "owlptpbr"
	for _, ns := range []string{gm, pa, pb} {
		exec.Command("ip", "netns", "del", ns).Run()
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	exec.Command("ip", "link", "del", br).Run()
	sh(t, "ip", "link", "add", br, "type", "bridge")
	t.Cleanup(func() { exec.Command("ip", "link", "del", br).Run() })
	sh(t, "ip", "addr", "add", "10.252.0.254/24", "dev", br)
	sh(t, "ip", "link", "set", br, "up")
	in := func(ns string, args ...string) { sh(t, "ip", append([]string{"netns", "exec", ns}, args...)...) }
	for i, ns := range []string{gm, pa, pb} {
		host, inner := fmt.Sprintf("owlptph%d", i), fmt.Sprintf("owlptp%d", i)
		exec.Command("ip", "link", "del", host).Run()
		sh(t, "ip", "link", "add", host, "type", "veth", "peer", "name", inner, "netns", ns)
		sh(t, "ip", "link", "set", host, "master", br, "up")
		in(ns, "ip", "addr", "add", fmt.Sprintf("10.252.0.%d/24", i+1), "dev", inner)
		in(ns, "ip", "link", "set", inner, "up")
		in(ns, "ip", "link", "set", "lo", "up")
	}
	sh(t, "ip", "link", "add", "da", "netns", pa, "type", "veth", "peer", "name", "db", "netns", pb)
	in(pa, "ip", "addr", "add", "10.253.0.1/24", "dev", "da")
	in(pb, "ip", "addr", "add", "10.253.0.2/24", "dev", "db")
	for ns, d := range map[string]string{pa: "da", pb: "db"} {
		in(ns, "ip", "link", "set", d, "up")
		exec.Command("ip", "netns", "exec", ns, "ethtool", "-K", d, "tso", "off", "gso", "off", "gro", "off", "tx", "off").Run()
		exec.Command("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf."+d+".disable_ipv6=1").Run()
	}

	// The grandmaster: the real ptp4u, software timestamps, TAI = system
	// time + 37 s as it announces.
	ptp4u, err := env.StartIn(gm, "ptp4u", "ptp4u", "-iface", "owlptp0", "-ip", "10.252.0.1", "-timestamptype", "software",
		"-pidfile", filepath.Join(dir, "ptp4u.pid"), "-drainfile", filepath.Join(dir, "drain"), "-undrainfile", filepath.Join(dir, "undrain"),
		"-workers", "4", "-recvworkers", "2", "-loglevel", "info")
	if err != nil {
		t.Fatal(err)
	}

	port, err := cli.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr := "10.252.0.254:" + strings.Split(port, ":")[1]
	coll, addrs, err := env.StartCollector("collector", collectorYAML(filepath.Join(dir, "data"), grpcAddr, `  - name: fixed
    upstream: a-fixed
    downstream: b-fixed
    selector: {dst_cidrs: [10.253.0.2/32]}
  - name: raw
    upstream: a-raw
    downstream: b-raw
    selector: {dst_cidrs: [10.253.0.2/32]}
  - name: lost
    upstream: c-lost
    downstream: b-fixed
    selector: {dst_cidrs: [192.0.2.0/24]}
`))
	if err != nil {
		t.Fatal(err)
	}
	probe := func(ns, id, iface string, extra ...string) *harness.Proc {
		args := append([]string{"-id", id, "-collector", grpcAddr, "-interface", iface, "-capture-outgoing",
			"-clock", "ptp", "-clock-server", "10.252.0.1", "-clock-interval", "250ms", "-clock-holdover", "2s"}, extra...)
		p, err := env.StartIn(ns, id, "probe", args...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	aRawDump, bRawDump := filepath.Join(dir, "a-raw.pcap"), filepath.Join(dir, "b-raw.pcap")
	probes := []*harness.Proc{
		probe(pa, "a-fixed", "da"),
		probe(pa, "a-raw", "da", "-clock-correct=false", "-dump", aRawDump),
		probe(pb, "b-fixed", "db", "-clock-fault", fault.String()),
		probe(pb, "b-raw", "db", "-clock-fault", fault.String(), "-clock-correct=false", "-dump", bRawDump),
		// Nothing answers at .99: this probe's clock never synchronizes.
		// (A probe must be in a path; its path "lost" carries nothing.)
		probe(pb, "c-lost", "db", "-clock-server", "10.252.0.99"),
	}
	logs := func() string {
		var b strings.Builder
		for _, p := range append(probes, coll, ptp4u) {
			fmt.Fprintf(&b, "--- %s\n%s\n", p.Name, tail(p.Log()))
		}
		return b.String()
	}

	// Wait for every clock to settle: four synchronized, one not.
	q := query(t, addrs.GRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var clocks map[string]*owlv1.ClockStatus
	for {
		clocks = map[string]*owlv1.ClockStatus{}
		ps, err := q.ListProbes(ctx, &owlv1.ListProbesRequest{})
		synced := 0
		for _, p := range ps.GetProbes() {
			clocks[p.GetProbeId()] = p.GetClock()
			if p.GetConnected() && p.GetClock().GetState() == owlv1.ClockState_CLOCK_STATE_SYNCHRONIZED {
				synced++
			}
		}
		if err == nil && synced == 4 && clocks["c-lost"].GetState() == owlv1.ClockState_CLOCK_STATE_UNSYNCHRONIZED {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("clocks did not settle: %v\n%s", clocks, logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The probes' clocks report what they measured.
	for id, c := range clocks {
		t.Logf("%s: %s %s offset %v ± %v, delay %v (%s)", id, c.GetSource(), stateName(c.GetState()), time.Duration(c.GetOffsetNs()),
			time.Duration(c.GetUncertaintyNs()), time.Duration(c.GetDelayNs()), c.GetDetail())
	}
	for _, id := range []string{"b-fixed", "b-raw"} {
		if d := time.Duration(clocks[id].GetOffsetNs()) - fault; d.Abs() > 100*time.Microsecond {
			t.Errorf("%s measured offset %v, want the %v fault", id, time.Duration(clocks[id].GetOffsetNs()), fault)
		}
	}
	if c := clocks["c-lost"]; c.GetSynchronized() || !strings.Contains(c.GetDetail(), "10.252.0.99") {
		t.Errorf("c-lost: %v", c)
	}

	// Traffic from pa to pb and back.
	server, err := env.StartIn(pb, "trafficgen-server", "trafficgen", "-mode", "server")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	dur := 8 * time.Second
	start := time.Now()
	client, err := env.StartIn(pa, "trafficgen-client", "trafficgen", "-mode", "client", "-server", "10.253.0.2", "-duration", dur.String(),
		"-bulk-flows", "2", "-bulk-rate", "500000", "-rr-rate", "100", "-dns-rate", "200", "-udp-rate", "500")
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Wait(dur + 30*time.Second); err != nil {
		t.Fatalf("traffic client: %v\n%s", err, client.Log())
	}
	end := time.Now()
	time.Sleep(3 * time.Second)
	server.Signal(os.Interrupt, 5*time.Second)
	grid := epoch.DefaultConfig()
	first, _ := grid.Of(start.UnixNano())
	last, _ := grid.Of(end.UnixNano())
	for _, path := range []string{"fixed", "raw"} {
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := harness.WaitEpochs(wctx, q, path, harness.Epochs(first+1, last-1)) // the full epochs (see below)
		wcancel()
		if err != nil {
			t.Fatalf("%v\n%s", err, logs())
		}
	}
	for _, p := range append(probes, ptp4u) {
		if err := p.Stop(10 * time.Second); err != nil && p != ptp4u {
			t.Errorf("%s: %v\n%s", p.Name, err, tail(p.Log()))
		}
	}

	dst := netip.MustParseAddr("10.253.0.2")
	truth := matchTruth(tsharkPackets(t, aRawDump, dst), tsharkPackets(t, bRawDump, dst), grid)
	// Every epoch with traffic: the last one checked is final once the
	// next one is reconciled.
	var want []int64
	for e, tr := range truth {
		if e >= first && e <= last && tr.n > 0 {
			want = append(want, e)
		}
	}
	results := map[string]map[int64]*owlv1.PathStats{}
	for _, path := range []string{"fixed", "raw"} {
		wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
		stats, err := harness.WaitEpochs(wctx, q, path, want)
		wcancel()
		if err != nil {
			t.Fatalf("%v\n%s", err, logs())
		}
		results[path] = map[int64]*owlv1.PathStats{}
		for _, s := range stats {
			results[path][s.GetEpoch()] = s
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-11s %8s %12s %12s %12s %12s %12s %8s\n", "epoch", "packets", "truth µs", "fixed µs", "± µs", "raw µs", "± µs", "flagged")
	checked := 0
	// Epochs the traffic filled: one with only its start or its end
	// (which may come a while before a race-built client exits, and
	// leave a few closing packets after) has too few packets for a mean.
	var epochs []int64
	for e, tr := range truth {
		if e >= first && e <= last && tr.n >= 100 {
			epochs = append(epochs, e)
		}
	}
	slices.Sort(epochs)
	for _, e := range epochs {
		tr, fx, rw := truth[e], results["fixed"][e], results["raw"][e]
		if fx == nil || rw == nil {
			t.Errorf("epoch %d: truth %v, fixed %v, raw %v", e, tr, fx, rw)
			continue
		}
		checked++
		truthNS := tr.mean()
		fmt.Fprintf(&table, "%-11d %8d %12.3f %12.3f %12.3f %12.3f %12.3f %5t/%t\n", e, tr.n, truthNS/1e3, fx.GetMeanNs()/1e3,
			fx.GetClockUncertaintyNs()/1e3, rw.GetMeanNs()/1e3, rw.GetClockUncertaintyNs()/1e3, fx.GetClockFlagged(), rw.GetClockFlagged())
		for _, r := range []*owlv1.PathStats{fx, rw} {
			if r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || r.GetEstimator() != "rda" {
				t.Errorf("%s epoch %d: %v %s %s", r.GetPath(), e, r.GetStatus(), r.GetEstimator(), r.GetDetail())
			}
			// Every result carries both clocks and a ± from them, and
			// the flag follows the configured share (10%).
			if r.GetUpstreamClock().GetSource() != "ptp" || r.GetDownstreamClock().GetSource() != "ptp" ||
				r.GetClockUncertaintyNs() != float64(r.GetUpstreamClock().GetUncertaintyNs()+r.GetDownstreamClock().GetUncertaintyNs()) {
				t.Errorf("%s epoch %d: clocks %v / %v, ± %v", r.GetPath(), e, r.GetUpstreamClock(), r.GetDownstreamClock(), r.GetClockUncertaintyNs())
			}
			if want := r.GetClockUncertaintyNs() > 0.1*math.Abs(r.GetMeanNs()); r.GetClockFlagged() != want {
				t.Errorf("%s epoch %d: flagged %t with ± %.0f ns on a mean of %.0f ns (%s)", r.GetPath(), e, r.GetClockFlagged(),
					r.GetClockUncertaintyNs(), r.GetMeanNs(), r.GetClockNote())
			}
		}
		// Corrected: within the reported ± of the truth, and the ± is
		// well below the fault it removed.
		if d := math.Abs(fx.GetMeanNs() - truthNS); d > fx.GetClockUncertaintyNs() {
			t.Errorf("fixed epoch %d: mean %.0f ns, truth %.0f ns: off by %.0f ns, beyond the ± %.0f ns", e, fx.GetMeanNs(), truthNS, d, fx.GetClockUncertaintyNs())
		}
		if fx.GetClockUncertaintyNs() > float64(fault)/2 {
			t.Errorf("fixed epoch %d: ± %.0f ns is no better than the fault", e, fx.GetClockUncertaintyNs())
		}
		// Uncorrected: off by the fault, and honest about it.
		if d := rw.GetMeanNs() - truthNS - float64(fault); math.Abs(d) > fx.GetClockUncertaintyNs() {
			t.Errorf("raw epoch %d: mean %.0f ns, truth %.0f ns: off by %.0f ns, want the fault %v", e, rw.GetMeanNs(), truthNS, rw.GetMeanNs()-truthNS, fault)
		}
		if d := math.Abs(rw.GetMeanNs() - truthNS); d > rw.GetClockUncertaintyNs() || rw.GetClockUncertaintyNs() < float64(fault) {
			t.Errorf("raw epoch %d: off by %.0f ns with ± %.0f ns: the ± must cover the uncorrected offset", e, d, rw.GetClockUncertaintyNs())
		}
	}
	t.Logf("one-way delay per epoch, fixed (corrected) and raw (reported only) against the truth:\n%s", table.String())
	if checked < 5 {
		t.Errorf("only %d epochs checked", checked)
	}
}

func stateName(s owlv1.ClockState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "CLOCK_STATE_"))
}
