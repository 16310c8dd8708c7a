package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/netpath"
)

// vethPair makes a veth pair a–b, up, without offloads or IPv6 chatter,
// removed when the test ends.
func vethPair(t *testing.T, a, b string) {
	t.Helper()
	exec.Command("ip", "link", "del", a).Run()
	sh(t, "ip", "link", "add", a, "type", "veth", "peer", "name", b)
	t.Cleanup(func() { exec.Command("ip", "link", "del", a).Run() })
	for _, dev := range []string{a, b} {
		sh(t, "ip", "link", "set", dev, "up")
		exec.Command("ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off").Run()
		os.WriteFile("/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6", []byte("1"), 0o644)
	}
}

// midEpoch sleeps until at least 500 ms into an epoch of the default grid
// (its previous epoch, closed after a 100 ms grace, is then reported).
func midEpoch() {
	const second = int64(time.Second)
	if into := time.Now().UnixNano() % second; into < second/2 {
		time.Sleep(time.Duration(second/2 - into + int64(50*time.Millisecond)))
	}
}

// TestProbeKilled: the upstream probe of a live path is killed with
// SIGKILL while the collector is away, holding several unacknowledged
// epochs, and restarted on its data directory before the collector comes
// back. Every epoch it closed before the kill comes out OK and without
// loss (sent from its spool on disk, repaired from its caches on disk);
// the epochs it was down are MISSING_UPSTREAM; the epoch it restarted in
// is PARTIAL, not OK; the later ones are OK again.
func TestProbeKilled(t *testing.T) {
	needRoot(t, "ip", "tcpreplay")
	env := newEnv(t)
	a, b := "owlkilla", "owlkillb"
	vethPair(t, a, b)
	addr, err := cli.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := collectorYAML(filepath.Join(env.Dir, "data"), addr, "  - {name: a-to-b, upstream: kill-a, downstream: kill-b}\n")
	coll, _, err := env.StartCollector("collector", cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The upstream probe sees the frames leave: it counts outgoing ones.
	probe := func(name, id, dev string) *harness.Proc {
		p, err := env.Start(name, "probe", "-id", id, "-collector", addr, "-interface", dev, "-ring-blocks", "16",
			"-data-dir", filepath.Join(env.Dir, id), "-reconnect-max", "200ms", "-capture-outgoing="+fmt.Sprint(dev == a))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pa, pb := probe("kill-a", "kill-a", a), probe("kill-b", "kill-b", b)
	q := query(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	replay := loopTrace(ctx, t, q, a, pa, pb)
	trafficFrom := time.Now()
	time.Sleep(3 * time.Second)
	if err := coll.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // epochs pile up unacknowledged
	midEpoch()
	killedAt := time.Now()
	pa.Kill()
	time.Sleep(1500 * time.Millisecond)
	pa2 := probe("kill-a-2", "kill-a", a)
	time.Sleep(2500 * time.Millisecond)
	coll2, _, err := env.StartCollector("collector-2", cfg)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	first, last := stopTraffic(replay, trafficFrom)
	killed, _ := epochOf(killedAt)
	stats, err := harness.WaitEpochs(ctx, q, "a-to-b", harness.Epochs(first, last))
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, tail(coll2.Log()), tail(pa2.Log()))
	}
	var table strings.Builder
	partial := int64(0)
	crossed := map[int64]uint64{} // by epoch: its packets delivered in the next
	for _, s := range stats {
		crossed[s.GetEpoch()] = s.GetBoundaryMatched()
	}
	for _, s := range stats {
		e := s.GetEpoch()
		if e < first || e > last {
			continue // WaitEpochs returns every result; the start's epoch is partial
		}
		fmt.Fprintf(&table, "epoch %d (kill %+d): %v %s up %d down %d lost %.0f crossed %d %s\n", e, e-killed, s.GetStatus(), s.GetEstimator(),
			s.GetUpstreamCounters().GetPackets(), s.GetDownstreamCounters().GetPackets(), s.GetLost(), s.GetBoundaryMatched(), s.GetDetail())
		switch {
		case e < killed:
			checkWhole(t, s, crossed[e-1])
		case s.GetStatus() == owlv1.ResultStatus_RESULT_STATUS_PARTIAL && partial == 0:
			partial = e
			if !strings.Contains(s.GetDetail(), "kill-a") || !strings.Contains(s.GetDetail(), "capture started") {
				t.Errorf("epoch %d: partial without saying why: %q", e, s.GetDetail())
			}
		case partial == 0:
			if s.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_MISSING_UPSTREAM {
				t.Errorf("epoch %d: the upstream probe was down, yet %v", e, s.GetStatus())
			}
		default:
			checkWhole(t, s, crossed[e-1])
		}
	}
	t.Logf("killed in epoch %d, restarted in %d:\n%s", killed, partial, table.String())
	if partial == 0 || partial > killed+3 {
		t.Errorf("no partial epoch after the restart (killed in %d)", killed)
	}
	if killed-first < 5 {
		t.Errorf("only %d whole epochs before the kill", killed-first)
	}
	if !strings.Contains(pa2.Log(), "took up what the previous run left") {
		t.Errorf("the restarted probe did not take up its spool:\n%s", tail(pa2.Log()))
	}
	for _, p := range []*harness.Proc{pa2, pb, coll2} {
		if err := p.Stop(10 * time.Second); err != nil {
			t.Errorf("%s did not stop cleanly: %v\n%s", p.Name, err, tail(p.Log()))
		}
	}
}

// loopTrace waits until the probes are connected and capturing, then
// sends the bundled trace out of dev at 2,000 packets a second, over and
// over, until the returned command is killed or the test ends.
func loopTrace(ctx context.Context, t *testing.T, q owlv1.QueryServiceClient, dev string, probes ...*harness.Proc) *exec.Cmd {
	t.Helper()
	waitConnected(ctx, t, q, len(probes))
	waitCapturing(t, probes...)
	replay := exec.Command("tcpreplay", "-q", "-i", dev, "--pps", "2000", "--loop", "0", "../testdata/trace.pcap")
	if err := replay.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { replay.Process.Kill() })
	return replay
}

// stopTraffic ends the traffic loopTrace started at from, and returns the
// first and last epochs it filled whole.
func stopTraffic(replay *exec.Cmd, from time.Time) (first, last int64) {
	replay.Process.Kill()
	replay.Wait()
	first, _ = epochOf(from)
	last, _ = epochOf(time.Now())
	return first + 1, last - 1
}

// checkWhole holds an epoch both probes saw whole to a veth's truth:
// reconciled exactly, nothing lost, and its downstream count its
// upstream count less the packets that crossed into the next epoch,
// plus those that came in from the one before (cameIn). Packets cross
// when sent within the link's delay of an epoch's end (more often on a
// loaded machine) and are matched across the boundary.
func checkWhole(t *testing.T, s *owlv1.PathStats, cameIn uint64) {
	t.Helper()
	up, down := s.GetUpstreamCounters().GetPackets(), s.GetDownstreamCounters().GetPackets()
	if s.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || s.GetEstimator() != "rda" || s.GetLost() != 0 || up-s.GetBoundaryMatched()+cameIn != down || up == 0 {
		t.Errorf("epoch %d: %v %s lost %.0f, up %d down %d, %d crossed out and %d in: %s", s.GetEpoch(), s.GetStatus(), s.GetEstimator(), s.GetLost(), up, down,
			s.GetBoundaryMatched(), cameIn, s.GetDetail())
	}
}

// waitCapturing waits until live probes have their capture sockets open
// (after the path configuration came): traffic sent before is not seen,
// and the epoch of the start is partial.
func waitCapturing(t *testing.T, ps ...*harness.Proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range ps {
		for !strings.Contains(p.Log(), "msg=capturing") {
			if time.Now().After(deadline) || p.Exited() {
				t.Fatalf("%s is not capturing:\n%s", p.Name, tail(p.Log()))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// waitConnected waits until n probes are connected to the collector.
func waitConnected(ctx context.Context, t *testing.T, q owlv1.QueryServiceClient, n int) {
	t.Helper()
	for {
		ps, err := q.ListProbes(ctx, &owlv1.ListProbesRequest{})
		connected := 0
		for _, p := range ps.GetProbes() {
			if p.GetConnected() {
				connected++
			}
		}
		if err == nil && connected == n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d probes connected: %v", connected, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestProbeFrozen: each live probe of a path is frozen (SIGSTOP) for
// 1.5 s in turn while traffic flows, as a starved machine would hold
// it, and goes on with the packets its capture ring kept meanwhile.
// Those packets are not late: their epochs stay open until the probe has
// read them, and every whole epoch comes out exact and without loss.
func TestProbeFrozen(t *testing.T) {
	needRoot(t, "ip", "tcpreplay")
	env := newEnv(t)
	a, b := "owlfreza", "owlfrezb"
	vethPair(t, a, b)
	addr, err := cli.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	coll, _, err := env.StartCollector("collector", colateParams(collectorYAML(filepath.Join(env.Dir, "data"), addr, "  - {name: a-to-b, upstream: frozen-a, downstream: frozen-b}\n")))
	if err != nil {
		t.Fatal(err)
	}
	// At 2,000 packets a second the kernel hands a ring block over
	// every block timeout (50 ms) with 100 packets in it: the default 64
	// blocks hold 3.2 s.
	probe := func(id, dev string) *harness.Proc {
		p, err := env.Start(id, "probe", "-id", id, "-collector", addr, "-interface", dev,
			"-capture-outgoing="+fmt.Sprint(dev == a), "-colate", "-colate-counters", colateCounters)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pa, pb := probe("frozen-a", a), probe("frozen-b", b)
	q := query(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	replay := loopTrace(ctx, t, q, a, pa, pb)
	trafficFrom := time.Now()
	var frozen []int64
	for _, p := range []*harness.Proc{pb, pa} {
		time.Sleep(2 * time.Second)
		midEpoch()
		e, _ := epochOf(time.Now())
		frozen = append(frozen, e)
		if err := p.Freeze(1500 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second)
	first, last := stopTraffic(replay, trafficFrom)
	stats, err := harness.WaitEpochs(ctx, q, "a-to-b", harness.Epochs(first, last))
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(coll.Log()))
	}
	crossed := map[int64]uint64{}
	for _, s := range stats {
		crossed[s.GetEpoch()] = s.GetBoundaryMatched()
	}
	var table strings.Builder
	for _, s := range stats {
		if e := s.GetEpoch(); e >= first && e <= last {
			uc, dc := s.GetUpstreamCounters(), s.GetDownstreamCounters()
			fmt.Fprintf(&table, "epoch %d: %v %s up %d down %d lost %.0f crossed %d late %d/%d ring drops %d/%d %s\n", e, s.GetStatus(), s.GetEstimator(),
				uc.GetPackets(), dc.GetPackets(), s.GetLost(), s.GetBoundaryMatched(), uc.GetLate(), dc.GetLate(), uc.GetDropped(), dc.GetDropped(), s.GetDetail())
			checkWhole(t, s, crossed[e-1])
		}
	}
	t.Logf("froze frozen-b in epoch %d, frozen-a in %d:\n%s", frozen[0], frozen[1], table.String())
	// COLATE over the run: the trace's heaviest flows crossed a veth,
	// microseconds.
	for _, k := range heaviestFlows(t, "../testdata/trace.pcap", 3) {
		res, err := q.GetFlowLatencyHistoric(ctx, &owlv1.GetFlowLatencyHistoricRequest{Flow: netpath.FlowToProto(k), Upstream: "frozen-a", Downstream: "frozen-b"})
		if err != nil {
			t.Errorf("COLATE of %v: %v", k, err)
			continue
		}
		t.Logf("COLATE %v: mean %.1f µs over %d/%d packets, %s, %d counters left out", k, res.GetMeanNs()/1e3, res.GetPackets(), res.GetDownstreamPackets(), res.GetEstimator(), res.GetLeftOutCounters())
		if m := res.GetMeanNs(); m < 0 || m > 1e6 {
			t.Errorf("COLATE of %v: mean %.1f µs on a veth", k, m/1e3)
		}
	}
	for _, p := range []*harness.Proc{pa, pb} {
		if err := p.Stop(10 * time.Second); err != nil {
			t.Errorf("%s did not stop cleanly: %v\n%s", p.Name, err, tail(p.Log()))
		}
	}
}

// heaviestFlows returns the n flows of a capture with the most packets.
func heaviestFlows(t *testing.T, path string, n int) []capture.FlowKey {
	t.Helper()
	count := map[capture.FlowKey]int{}
	eachFrame(t, path, func(_ capture.Frame, p *capture.Packet) {
		if p != nil {
			count[p.Flow]++
		}
	})
	keys := slices.Collect(maps.Keys(count))
	slices.SortFunc(keys, func(a, b capture.FlowKey) int { return count[b] - count[a] })
	return keys[:min(n, len(keys))]
}
