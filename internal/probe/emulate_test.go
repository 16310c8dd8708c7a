package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/collector"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// TestTrafficSides checks the made-up traffic against its own truth: the
// downstream side is the delivered upstream packets, later by the delay,
// within the epoch, and both sides of a path's epoch are one variant.
func TestTrafficSides(t *testing.T) {
	tr, err := NewTraffic(params.Default(), TrafficConfig{Packets: 3000, Loss: 0.05, Reorder: 0.1, Flows: 30, Variants: 4, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	lengthNS := int64(tr.Params().Epoch.Length)
	for v, vr := range tr.variants {
		up := map[uint64]int64{}
		for _, p := range vr.up.packets {
			up[p.id] = p.offsetNS
		}
		var sumNS int64
		for _, p := range vr.down.packets {
			sent, ok := up[p.id]
			switch {
			case !ok:
				t.Fatalf("variant %d: packet %x seen downstream only", v, p.id)
			case p.offsetNS-sent < int64(emulatedDelay.Base) || p.offsetNS >= lengthNS:
				t.Fatalf("variant %d: packet %x sent at %d, seen at %d", v, p.id, sent, p.offsetNS)
			}
			sumNS += p.offsetNS - sent
		}
		tru := vr.truth
		if len(up) != 3000 || tru.Sent != 3000 || tru.Delivered != len(vr.down.packets) || tru.Lost != tru.Sent-tru.Delivered {
			t.Errorf("variant %d: %d distinct IDs upstream, truth %+v, %d downstream", v, len(up), tru, len(vr.down.packets))
		}
		if tru.Lost < 75 || tru.Lost > 225 { // 5% of 3000: 150 ± 6σ
			t.Errorf("variant %d: %d lost of 3000 at 5%%", v, tru.Lost)
		}
		if want := float64(sumNS) / float64(tru.Delivered); tru.MeanNS != want {
			t.Errorf("variant %d: truth mean %v, packets say %v", v, tru.MeanNS, want)
		}
		if len(vr.up.top) == 0 || vr.up.top[0].GetPackets() < vr.up.top[len(vr.up.top)-1].GetPackets() {
			t.Errorf("variant %d: top flows %v", v, vr.up.top)
		}
	}
	// Probes in other processes make the same traffic from the same seed.
	again, err := NewTraffic(params.Default(), tr.Config())
	if err != nil {
		t.Fatal(err)
	}
	if v := tr.Variant("a", 5); again.Variant("a", 5) != v || !reflect.DeepEqual(again.Truth("a", 5), tr.variants[v].truth) || !reflect.DeepEqual(again.Truth("a", 5), tr.Truth("a", 5)) {
		t.Error("the same seed made other traffic")
	}
	used := map[int]bool{}
	for e := range int64(64) {
		used[tr.Variant("a", e)] = true
	}
	if len(used) != 4 {
		t.Errorf("64 epochs use %d of 4 variants", len(used))
	}
}

// TestEmulatedAnswersRepairs checks fetch and rebuild answers against the
// side's packets, and refusals of a path the probe does not report.
func TestEmulatedAnswersRepairs(t *testing.T) {
	tr, err := NewTraffic(params.Default(), TrafficConfig{Packets: 500, Loss: 0.1, Flows: 5, Variants: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEmulated("b", "127.0.0.1:1", tr, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pc := &owlv1.PathConfig{Paths: []*owlv1.PathAssignment{{Path: (&netpath.Path{Name: "p", Upstream: "a", Downstream: "b"}).ToProto(), Role: owlv1.Role_ROLE_DOWNSTREAM, RdaBuckets: 300}}}
	if err := e.setPaths(pc); err != nil {
		t.Fatal(err)
	}
	down := tr.side("p", 9, owlv1.Role_ROLE_DOWNSTREAM)
	want := down.packets[7]
	rep := e.fetch(&owlv1.FetchRequest{RequestId: 4, Path: "p", Epoch: 9, PacketIds: []uint64{want.id, 12345}})
	if rep.GetError() != "" || rep.GetRequestId() != 4 || len(rep.GetPacketIds()) != 1 || rep.GetPacketIds()[0] != want.id ||
		rep.GetOffsetsNs()[0] != want.offsetNS || rep.GetFlowHashes()[0] != tr.flowHashes[want.flow] || rep.GetWeights()[0] != 1 {
		t.Errorf("fetch of %+v: %v", want, rep)
	}
	if rep := e.fetch(&owlv1.FetchRequest{Path: "p", Epoch: 9, Repeated: true}); rep.GetError() != "" || len(rep.GetPacketIds()) != 0 {
		t.Errorf("repeated: %v", rep)
	}
	rb := e.rebuild(&owlv1.RebuildRequest{Path: "p", Epoch: 9, Buckets: 700})
	r, err := rda.Decode(rb.GetRda())
	if err != nil || r.Config().Buckets != 700 || r.Packets() != int64(len(down.packets)) {
		t.Errorf("rebuild: %v, %v", rb.GetError(), err)
	}
	if rep := e.fetch(&owlv1.FetchRequest{Path: "q", Epoch: 9}); rep.GetError() == "" {
		t.Error("fetch of a path not reported was answered")
	}
	if e.bucketsOf("p") != 300 {
		t.Errorf("path configuration's RDA size not kept: %d", e.bucketsOf("p"))
	}
	if e.setRDASize(&owlv1.RDASize{Path: "p", Buckets: 0}) == nil {
		t.Error("an RDA of 0 buckets was taken")
	}
}

// TestEmulatedLDSSize: an emulated probe's reports carry the LDS at the
// size its collector set, from the epoch it named, with the side's packets.
func TestEmulatedLDSSize(t *testing.T) {
	tr, e, path := emulatedUpstream(t, false)
	e.Report(10)
	if err := e.setLDSSize(&owlv1.LDSSize{Path: "p", Cols: 128, FromEpoch: 12}); err != nil {
		t.Fatal(err)
	}
	for epoch, want := range map[int64]int{10: 512, 11: 512, 12: 128, 13: 128} {
		r, err := e.report(path, epoch)
		if err != nil {
			t.Fatal(err)
		}
		l, err := lds.Decode(r.GetLds())
		if err != nil || l.Config().Cols != want {
			t.Errorf("epoch %d: LDS (%v) not of %d cells per row", epoch, err, want)
			continue
		}
		if _, n := l.Load(1); math.Abs(n-float64(len(tr.side("p", epoch, path.role).packets))) > 0.5 {
			t.Errorf("epoch %d: LDS of %.0f packets, the side saw %d", epoch, n, len(tr.side("p", epoch, path.role).packets))
		}
	}
	if e.setLDSSize(&owlv1.LDSSize{Path: "p", Cols: 1 << 20}) == nil {
		t.Error("an LDS larger than the parameters' was taken")
	}
}

// TestEmulatedLDSOff checks that an emulated probe sends no LDS while its
// collector asks for none, from its path configuration or from an LDS
// size message, as a real probe does: the collector turns the LDS off on
// paths whose sample gives the large flows their delays.
func TestEmulatedLDSOff(t *testing.T) {
	_, e, path := emulatedUpstream(t, true)
	// Each change holds from its epoch on and keeps the setting before
	// it for the epochs until then, as a probe reports them: in order.
	check := func(from, to int64, on bool) {
		t.Helper()
		for epoch := from; epoch <= to; epoch++ {
			e.Report(epoch)
			r, err := e.report(path, epoch)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(r.GetLds()) > 0; got != on {
				t.Errorf("epoch %d: LDS sent %v, want %v", epoch, got, on)
			}
			if on {
				if l, err := lds.Decode(r.GetLds()); err != nil || l.Config().Cols != 256 {
					t.Errorf("epoch %d: LDS (%v) not of 256 cells per row", epoch, err)
				}
			}
		}
	}
	check(9, 10, false)
	if err := e.setLDSSize(&owlv1.LDSSize{Path: "p", Cols: 256, FromEpoch: 12}); err != nil {
		t.Fatal(err)
	}
	check(11, 11, false)
	check(12, 13, true)
	if err := e.setLDSSize(&owlv1.LDSSize{Path: "p", Cols: 256, FromEpoch: 15, Off: true}); err != nil {
		t.Fatal(err)
	}
	check(14, 14, true)
	check(15, 16, false)
}

// emulatedUpstream is an emulated probe upstream on path p, its LDS at
// 512 cells per row and off or on as the path configuration says.
func emulatedUpstream(t *testing.T, ldsOff bool) (*Traffic, *Emulated, emulatedPath) {
	t.Helper()
	tr, err := NewTraffic(params.Default(), TrafficConfig{Packets: 500, Flows: 5, Variants: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEmulated("a", "127.0.0.1:1", tr, slog.New(slog.NewTextHandler(io.Discard, nil)))
	path := emulatedPath{name: "p", role: owlv1.Role_ROLE_UPSTREAM}
	pc := &owlv1.PathConfig{Paths: []*owlv1.PathAssignment{{Path: (&netpath.Path{Name: "p", Upstream: "a", Downstream: "b"}).ToProto(), Role: path.role, LdsCols: 512, LdsOff: ldsOff}}}
	if err := e.setPaths(pc); err != nil {
		t.Fatal(err)
	}
	return tr, e, path
}

// TestEmulatedAgainstCollector runs a real collector and two emulated
// probes on one path with 1% loss: every epoch comes out exact, the RDA
// decoded and repaired, its loss and mean those of the generated truth.
func TestEmulatedAgainstCollector(t *testing.T) {
	addr := startCollector(t, []netpath.Path{{Name: "load-0", Upstream: "load-p0", Downstream: "load-p1"}})
	tr, err := NewTraffic(params.Default(), TrafficConfig{Packets: 4000, Loss: 0.01, Reorder: 0.05, Flows: 50, Variants: 3, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	var probes []*Emulated
	done := make(chan error, 2)
	for _, id := range []string{"load-p0", "load-p1"} {
		e := NewEmulated(id, addr, tr, log)
		probes = append(probes, e)
		go func() { done <- e.Run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range probes {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	})
	for _, e := range probes {
		select {
		case <-e.Ready():
		case <-time.After(10 * time.Second):
			t.Fatalf("probe %s: no path configuration", e.id)
		}
	}
	first, _ := tr.Params().Epoch.Of(time.Now().UnixNano())
	const epochs = 4
	for ep := first; ep < first+epochs; ep++ {
		for _, e := range probes {
			if n := e.Report(ep); n != 1 {
				t.Fatalf("probe %s reported %d paths of epoch %d, want 1", e.id, n, ep)
			}
		}
	}
	q := queryClient(t, addr)
	got := waitResults(t, q, "load-0", epochs)
	lost := 0
	for _, r := range got {
		tru := tr.Truth("load-0", r.GetEpoch())
		lost += tru.Lost
		if r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || r.GetEstimator() != "rda" || !r.GetDecoded() || r.GetUnusableBuckets() != 0 {
			t.Errorf("epoch %d: status %v estimator %q decoded %v unusable %d (%s)", r.GetEpoch(), r.GetStatus(), r.GetEstimator(), r.GetDecoded(), r.GetUnusableBuckets(), r.GetDetail())
		}
		if r.GetLost() != float64(tru.Lost) || math.Abs(r.GetMeanNs()-tru.MeanNS) > 1e-9*tru.MeanNS {
			t.Errorf("epoch %d: lost %v mean %v ns, truth %d and %v ns", r.GetEpoch(), r.GetLost(), r.GetMeanNs(), tru.Lost, tru.MeanNS)
		}
		if r.GetDownstreamCounters().GetPackets() != uint64(tru.Delivered) {
			t.Errorf("epoch %d: downstream counted %d packets, %d delivered", r.GetEpoch(), r.GetDownstreamCounters().GetPackets(), tru.Delivered)
		}
	}
	if lost == 0 {
		t.Error("no packet lost: the test shows nothing about repairs")
	}
	checkFlowLoss(t, q, tr, "load-0")
	var fetches uint64
	deadline := time.Now().Add(5 * time.Second)
	for _, e := range probes {
		for e.Stats().Unacked > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		s := e.Stats()
		if s.Reports != epochs || s.Acked() != epochs || s.RepairErrors != 0 {
			t.Errorf("probe %s: %+v", e.id, s)
		}
		fetches += s.Fetches
	}
	if fetches == 0 {
		t.Error("the collector fetched no timestamps: nothing was repaired")
	}
}

// checkFlowLoss asks for a path's top flows epoch by epoch: each one's
// loss is the truth's, and some are lost.
func checkFlowLoss(t *testing.T, q owlv1.QueryServiceClient, tr *Traffic, path string) {
	t.Helper()
	ctx := context.Background()
	top, err := q.TopFlows(ctx, &owlv1.TopFlowsRequest{Path: path, Limit: 5})
	if err != nil || len(top.GetFlows()) == 0 {
		t.Fatalf("TopFlows: %v, %v", top, err)
	}
	var lost float64
	for _, tf := range top.GetFlows() {
		f, err := netpath.FlowFromProto(tf.GetFlow())
		if err != nil {
			t.Fatal(err)
		}
		fs, err := q.GetFlowStats(ctx, &owlv1.GetFlowStatsRequest{Path: path, Flow: tf.GetFlow()})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range fs.GetStats() {
			want := tr.Truth(path, s.GetEpoch()).FlowLost[f]
			if !s.GetTop() || s.GetLost() != float64(want) {
				t.Errorf("flow %v epoch %d: top %t, lost %v, truth %d", f, s.GetEpoch(), s.GetTop(), s.GetLost(), want)
			}
			lost += s.GetLost()
		}
	}
	if lost == 0 {
		t.Error("the top flows lost nothing: the check shows nothing")
	}
}

// startCollector runs a collector of paths on a free loopback port until
// the test ends and returns its gRPC address. mods change its
// configuration first.
func startCollector(t *testing.T, paths []netpath.Path, mods ...func(*collector.Config)) string {
	t.Helper()
	dir := t.TempDir()
	cfg := collector.DefaultConfig()
	cfg.DataDir, cfg.GRPCListen, cfg.HTTPListen, cfg.Insecure = filepath.Join(dir, "data"), "127.0.0.1:0", "", true
	cfg.ReadyFile = filepath.Join(dir, "ready")
	cfg.Paths = paths
	for _, mod := range mods {
		mod(&cfg)
	}
	c, err := collector.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("collector: %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(cfg.ReadyFile); err == nil {
			var a collector.Addrs
			if err := json.Unmarshal(b, &a); err != nil {
				t.Fatal(err)
			}
			return a.GRPC
		}
		select {
		case err := <-stopped:
			t.Fatalf("collector stopped: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("collector not listening after 10s")
		}
	}
}

// queryClient is a query client of the collector at addr.
func queryClient(t *testing.T, addr string) owlv1.QueryServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return owlv1.NewQueryServiceClient(conn)
}

// waitResults polls a path's results until there are n.
func waitResults(t *testing.T, q owlv1.QueryServiceClient, path string, n int) []*owlv1.PathStats {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := q.GetPathStats(context.Background(), &owlv1.GetPathStatsRequest{Path: path})
		if err == nil && len(r.GetStats()) >= n {
			return r.GetStats()
		}
		if time.Now().After(deadline) {
			t.Fatalf("path %s: %d of %d results after 20s (last error %v)", path, len(r.GetStats()), n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPausedNotCutOff: one probe reports epoch after epoch of ten paths
// before the other has reported any, far past the collector's
// max_pending_bytes. The collector pauses it instead of ending its stream:
// every epoch comes out exact and each probe kept its one stream.
func TestPausedNotCutOff(t *testing.T) {
	var paths []netpath.Path
	for i := range 10 {
		paths = append(paths, netpath.Path{Name: fmt.Sprintf("load-%d", i), Upstream: "load-p0", Downstream: "load-p1"})
	}
	tr, err := NewTraffic(params.Default(), TrafficConfig{Packets: 2000, Loss: 0.01, Flows: 20, Variants: 2, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	// A side held takes about 80 KB: the first probe's 80 reports are
	// four times its share.
	addr := startCollector(t, paths, func(c *collector.Config) { c.MaxPendingBytes = 3 << 20 })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	var probes []*Emulated
	for _, id := range []string{"load-p0", "load-p1"} {
		e := NewEmulated(id, addr, tr, log)
		probes = append(probes, e)
		go func() { done <- e.Run(ctx) }()
		select {
		case <-e.Ready():
		case <-time.After(10 * time.Second):
			t.Fatalf("probe %s: no path configuration", id)
		}
	}
	t.Cleanup(func() {
		cancel()
		for range probes {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	})
	first, _ := tr.Params().Epoch.Of(time.Now().UnixNano())
	first -= 20
	const epochs = 8
	for ep := first; ep < first+epochs; ep++ {
		probes[0].Report(ep)
		time.Sleep(150 * time.Millisecond) // as a replay would, measured between
	}
	for ep := first; ep < first+epochs; ep++ {
		probes[1].Report(ep)
		time.Sleep(150 * time.Millisecond)
	}
	q := queryClient(t, addr)
	for _, p := range paths {
		for _, r := range waitResults(t, q, p.Name, epochs) {
			tru := tr.Truth(p.Name, r.GetEpoch())
			if r.GetEstimator() != "rda" || !r.GetDecoded() || r.GetUnusableBuckets() != 0 || r.GetLost() != float64(tru.Lost) {
				t.Errorf("%s epoch %d: %s, decoded %t, %d buckets left out, lost %v of %d (%s)", p.Name, r.GetEpoch(), r.GetEstimator(), r.GetDecoded(), r.GetUnusableBuckets(), r.GetLost(), tru.Lost, r.GetDetail())
			}
		}
	}
	s0, s1 := probes[0].Stats(), probes[1].Stats()
	if s0.Pauses == 0 || s0.Sessions != 1 || s1.Sessions != 1 {
		t.Errorf("first probe paused %d times; streams opened: %d and %d, want 1 each", s0.Pauses, s0.Sessions, s1.Sessions)
	}
	if sent := uint64(len(paths) * epochs); s0.Reports != sent || s0.Bytes == 0 {
		t.Errorf("first probe: %+v", s0)
	}
}
