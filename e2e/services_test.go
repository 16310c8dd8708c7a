package e2e

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/reflection/grpc_reflection_v1"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/sim"
)

// impaired is the path of most tests: Weibull delays, 1% loss, 1% of
// packets held back by up to 20 ms (reordered, some across epoch
// boundaries) and 0.2% duplicates.
var impaired = sim.Impairment{Delay: sim.Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond},
	Loss: 0.01, Reorder: 0.01, ReorderExtra: 20 * time.Millisecond, Duplicate: 0.002, DuplicateGap: 50 * time.Microsecond, Seed: 7}

// lossOnly is the path LDA is made for: Weibull delays and 1% loss.
var lossOnly = sim.Impairment{Delay: sim.Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond}, Loss: 0.01, Seed: 7}

// setup builds the binaries and makes two captures of the bundled trace
// across the impaired path.
func setup(t *testing.T) (*harness.Env, sim.Outputs, []sim.EpochTruth) {
	return setupWith(t, impaired)
}

func setupWith(t *testing.T, m sim.Impairment) (*harness.Env, sim.Outputs, []sim.EpochTruth) {
	env, out, truths, _ := setupFlows(t, m)
	return env, out, truths
}

// setupFlows is setupWith, also returning the per-flow truth.
func setupFlows(t *testing.T, m sim.Impairment) (*harness.Env, sim.Outputs, []sim.EpochTruth, map[int64]map[capture.FlowKey]*sim.FlowTruth) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	env := newEnv(t)
	out, truth := makeTrace(t, env, m)
	// The truth file has no flow keys: take them from the input capture.
	link, frames, err := sim.ReadCapture("../testdata/trace.pcap")
	if err != nil {
		t.Fatal(err)
	}
	dec, _ := capture.NewDecoder(link, capture.DefaultIdentityConfig())
	for i := range truth {
		var p capture.Packet
		if dec.Decode(frames[truth[i].Frame-1].Data, 0, &p) == nil {
			truth[i].Flow = p.Flow
		}
	}
	return env, out, sim.EpochTruths(truth, epoch.DefaultConfig(), 0), sim.FlowTruths(truth, epoch.DefaultConfig(), 0)
}

// makeTrace makes the two captures of the bundled trace across an
// impaired path, in env's directory, and reads their ground truth.
func makeTrace(t *testing.T, env *harness.Env, m sim.Impairment) (sim.Outputs, []sim.Record) {
	t.Helper()
	return makeTraceFrom(t, env, "../testdata/trace.pcap", m)
}

// makeTraceFrom is makeTrace of another input capture.
func makeTraceFrom(t *testing.T, env *harness.Env, in string, m sim.Impairment) (sim.Outputs, []sim.Record) {
	t.Helper()
	return makeShapedTrace(t, env, in, sim.Shape{}, m)
}

// makeShapedTrace is makeTraceFrom of the input shaped by shape.
func makeShapedTrace(t *testing.T, env *harness.Env, in string, shape sim.Shape, m sim.Impairment) (sim.Outputs, []sim.Record) {
	t.Helper()
	out := sim.OutputsFor(filepath.Join(env.Dir, "trace"))
	if _, err := sim.GenerateShaped(in, shape, out, capture.DefaultIdentityConfig(), m); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out.Truth)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	truth, err := sim.ReadTruth(f)
	if err != nil {
		t.Fatal(err)
	}
	return out, truth
}

// newEnv builds the binaries into a fresh directory; the test fails if a
// race-built process reported a data race.
func newEnv(t *testing.T) *harness.Env {
	t.Helper()
	dir := t.TempDir()
	env, err := harness.NewEnv(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if raced := env.Close(); len(raced) > 0 {
			t.Errorf("data races in %v:\n%s", raced, env.RaceReports())
		}
		keepLogs(t, dir)
	})
	return env
}

// keepLogs copies the processes' logs of a failed test into the directory
// OWL_E2E_KEEP names, if it is set, before the test's directory goes.
func keepLogs(t *testing.T, dir string) {
	keep := os.Getenv("OWL_E2E_KEEP")
	if keep == "" || !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	to := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Logf("keeping the logs: %v", err)
		return
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err == nil {
			err = os.WriteFile(filepath.Join(to, filepath.Base(l)), b, 0o644)
		}
		if err != nil {
			t.Logf("keeping %s: %v", l, err)
		}
	}
	t.Logf("the processes' logs are kept in %s", to)
}

func collectorYAML(dataDir, grpc string, paths string) string {
	return fmt.Sprintf(`grpc_listen: %s
http_listen: 127.0.0.1:0
data_dir: %s
pair_timeout: 3s
paths:
%s`, grpc, dataDir, paths)
}

const pathAB = `  - name: a-to-b
    upstream: op-a
    downstream: op-b
`

// runProbes starts op-a and op-b on the two captures and waits for them.
func runProbes(t *testing.T, env *harness.Env, grpc string, out sim.Outputs, extra ...string) (a, b *harness.Proc) {
	t.Helper()
	run := fmt.Sprintf("-%d", time.Now().UnixNano())
	a, err := env.Start("op-a"+run, "probe", append([]string{"-id", "op-a", "-collector", grpc, "-file", out.Up, "-reconnect-max", "200ms"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	b, err = env.Start("op-b"+run, "probe", append([]string{"-id", "op-b", "-collector", grpc, "-file", out.Down, "-reconnect-max", "200ms"}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*harness.Proc{a, b} {
		if err := p.Wait(60 * time.Second); err != nil {
			t.Errorf("%s: %v\n%s", p.Name, err, p.Log())
		}
	}
	return a, b
}

func query(t *testing.T, grpc string) owlv1.QueryServiceClient {
	t.Helper()
	conn, err := harness.Dial(grpc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return owlv1.NewQueryServiceClient(conn)
}

// TestServicesEndToEnd runs a collector and two probes as processes on
// loopback and checks the per-epoch results against ground truth: with loss
// only, LDA within 1% and RDA exact; with loss, reordering and duplicates,
// RDA exact (LDA, which assumes neither, is shown beside it).
func TestServicesEndToEnd(t *testing.T) {
	t.Run("loss", func(t *testing.T) { endToEnd(t, lossOnly, true) })
	t.Run("loss+reorder+duplicates", func(t *testing.T) { endToEnd(t, impaired, false) })
}

func endToEnd(t *testing.T, m sim.Impairment, checkLDA bool) {
	env, out, truths, flowTruths := setupFlows(t, m)
	coll, addrs, err := env.StartCollector("collector", collectorYAML(filepath.Join(env.Dir, "data"), "127.0.0.1:0", pathAB))
	if err != nil {
		t.Fatal(err)
	}
	runProbes(t, env, addrs.GRPC, out)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := query(t, addrs.GRPC)
	stats, err := harness.WaitStats(ctx, q, "a-to-b", len(truths))
	if err != nil {
		t.Fatalf("%v\n%s", err, coll.Log())
	}
	checkTruth(t, stats, truths, m, checkLDA)

	checkFlows(t, q, flowTruths)

	// Reflection lists the services, as grpcurl's "list" does.
	conn, _ := harness.Dial(addrs.GRPC)
	defer conn.Close()
	rc, err := grpc_reflection_v1.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&grpc_reflection_v1.ServerReflectionRequest{MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"owl.v1.ProbeService", "owl.v1.QueryService"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}

	// Probes, paths, metrics, health.
	probes, err := q.ListProbes(ctx, &owlv1.ListProbesRequest{})
	if err != nil || len(probes.GetProbes()) != 2 || probes.GetProbes()[0].GetError() != "" {
		t.Errorf("ListProbes: %v, %v", probes, err)
	}
	metrics := httpGet(t, "http://"+addrs.HTTP+"/metrics")
	for _, want := range []string{`owl_path_delay_mean_seconds{path="a-to-b"}`, `owl_collector_results_total{path="a-to-b",status="ok"}`, "owl_path_delay_seconds_bucket"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if h := httpGet(t, "http://"+addrs.HTTP+"/healthz"); strings.TrimSpace(h) != "ok" {
		t.Errorf("/healthz: %q", h)
	}
	if err := coll.Stop(10 * time.Second); err != nil {
		t.Errorf("collector shutdown: %v\n%s", err, coll.Log())
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestCollectorRestartLosesNothing kills the collector in the middle of a
// paced replay and restarts it on the same data directory: the probes send
// the unacknowledged epochs again, and the results equal those of a run
// without the restart.
func TestCollectorRestartLosesNothing(t *testing.T) {
	env, out, truths := setup(t)

	// Reference run.
	_, ref, err := env.StartCollector("ref", collectorYAML(filepath.Join(env.Dir, "ref-data"), "127.0.0.1:0", pathAB))
	if err != nil {
		t.Fatal(err)
	}
	runProbes(t, env, ref.GRPC, out)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want, err := harness.WaitStats(ctx, query(t, ref.GRPC), "a-to-b", len(truths))
	if err != nil {
		t.Fatal(err)
	}

	// Run with a crash: replay at 2× (about 2.5 s), kill the collector
	// after 1 s, restart it 1 s later on the same port and data.
	addr, err := cli.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := collectorYAML(filepath.Join(env.Dir, "crash-data"), addr, pathAB)
	coll, _, err := env.StartCollector("crash1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var pa, pb *harness.Proc
	go func() {
		defer close(done)
		pa, pb = runProbes(t, env, addr, out, "-replay-speed", "2")
	}()
	time.Sleep(time.Second)
	coll.Kill()
	time.Sleep(time.Second)
	coll2, _, err := env.StartCollector("crash2", cfg)
	if err != nil {
		t.Fatal(err)
	}
	<-done
	for _, p := range []*harness.Proc{pa, pb} {
		if strings.Contains(p.Log(), "exiting before the collector released every epoch") {
			t.Errorf("%s waited out its release timeout: the restarted collector did not release every epoch\n%s", p.Name, p.Log())
		}
	}
	// The probes wait for every release before they exit (runProbes
	// returns then): the results are all in by now.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	got, err := harness.WaitStats(ctx2, query(t, addr), "a-to-b", len(want))
	if err != nil {
		t.Fatalf("%v\n%s", err, coll2.Log())
	}
	if len(got) != len(want) {
		t.Fatalf("%d results after the restart, %d without", len(got), len(want))
	}
	// RDA sizes and sampling rates adapt to the traffic as results come
	// in, so the two runs may reconcile an epoch at different sizes and
	// rates, and one may send an exact list where the other sends
	// synopses: the mean (exact) and counts must agree. The standard
	// deviation must be the same where both took it from the same sample
	// (rate and delays), and within 10% where both estimated it from RDA
	// buckets; from samples at two rates it may differ as much as the
	// sample's spread does (this trace's delays have a heavy tail: 28–34%
	// between a quarter of the packets and all of them).
	for i := range want {
		w, g := want[i], got[i]
		exactBoth := w.GetUnusableBuckets() == 0 && g.GetUnusableBuckets() == 0 && w.GetDecoded() && g.GetDecoded()
		meanRel := math.Abs(g.GetMeanNs()-w.GetMeanNs()) / w.GetMeanNs()
		stdRel := math.Abs(g.GetStddevNs()-w.GetStddevNs()) / w.GetStddevNs()
		sameSample := g.GetStddevFromSample() && w.GetStddevFromSample() && g.GetSampleRate() == w.GetSampleRate() && g.GetSampleDelays() == w.GetSampleDelays()
		bothBuckets := !g.GetStddevFromSample() && !w.GetStddevFromSample()
		bad := g.GetEpoch() != w.GetEpoch() || g.GetStatus() != w.GetStatus() || g.GetEstimator() != w.GetEstimator() ||
			g.GetLost() != w.GetLost() || g.GetBoundaryMatched() != w.GetBoundaryMatched() || g.GetDuplicates() != w.GetDuplicates() ||
			g.GetStddevNs() <= 0 || sameSample && stdRel > 1e-9 || bothBuckets && stdRel > 0.1
		if exactBoth {
			bad = bad || meanRel > 1e-9 || g.GetSamples() != w.GetSamples()
		} else {
			bad = bad || meanRel > 0.01
		}
		if bad {
			t.Errorf("epoch %d: after restart %v mean %.3f std %.3f n %d lost %.0f (%s m=%d rebuilds %d dec %t unusable %d, sample %g/%d/%t); without %v mean %.3f std %.3f n %d lost %.0f (%s m=%d rebuilds %d dec %t unusable %d, sample %g/%d/%t)",
				w.GetEpoch(), g.GetStatus(), g.GetMeanNs(), g.GetStddevNs(), g.GetSamples(), g.GetLost(), g.GetEstimator(), g.GetRdaBuckets(), g.GetRebuilds(), g.GetDecoded(), g.GetUnusableBuckets(),
				g.GetSampleRate(), g.GetSampleDelays(), g.GetStddevFromSample(),
				w.GetStatus(), w.GetMeanNs(), w.GetStddevNs(), w.GetSamples(), w.GetLost(), w.GetEstimator(), w.GetRdaBuckets(), w.GetRebuilds(), w.GetDecoded(), w.GetUnusableBuckets(),
				w.GetSampleRate(), w.GetSampleDelays(), w.GetStddevFromSample())
		}
	}
	// The restart happened mid-run: each probe connected twice, and sent
	// some epochs again.
	for _, p := range []*harness.Proc{pa, pb} {
		if n := strings.Count(p.Log(), "connected to collector"); n != 2 {
			t.Errorf("%s connected %d times, want 2\n%s", p.Name, n, p.Log())
		}
	}
	t.Logf("restarted collector:\n%s", coll2.Log())
}

// TestParameterMismatch starts a third probe whose LDA differs: it is
// rejected with a clear error, and the path between the other two goes on.
func TestParameterMismatch(t *testing.T) {
	env, out, truths := setup(t)
	paths := pathAB + `  - name: a-to-c
    upstream: op-a
    downstream: op-c
`
	coll, addrs, err := env.StartCollector("collector", collectorYAML(filepath.Join(env.Dir, "data"), "127.0.0.1:0", paths))
	if err != nil {
		t.Fatal(err)
	}
	c, err := env.Start("op-c", "probe", "-id", "op-c", "-collector", addrs.GRPC, "-file", out.Down, "-lda-rows", "512")
	if err != nil {
		t.Fatal(err)
	}
	runProbes(t, env, addrs.GRPC, out)
	if err := c.Wait(20 * time.Second); err == nil {
		t.Fatalf("mismatched probe exited cleanly\n%s", c.Log())
	}
	if log := c.Log(); !strings.Contains(log, "rejected") || !strings.Contains(log, "lda rows 1024") {
		t.Errorf("mismatched probe's error is not clear:\n%s", log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := query(t, addrs.GRPC)
	stats, err := harness.WaitStats(ctx, q, "a-to-b", len(truths))
	if err != nil {
		t.Fatalf("%v\n%s", err, coll.Log())
	}
	for _, s := range stats {
		if s.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
			t.Errorf("a-to-b epoch %d: %v", s.GetEpoch(), s.GetStatus())
		}
	}
	probes, err := q.ListProbes(ctx, &owlv1.ListProbesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var cErr string
	for _, p := range probes.GetProbes() {
		if p.GetProbeId() == "op-c" {
			cErr = p.GetError()
		}
	}
	if !strings.Contains(cErr, "lda rows") {
		t.Errorf("ListProbes does not show op-c's error: %q", cErr)
	}
	// The path to the rejected probe reports its missing side.
	missing, err := harness.WaitStats(ctx, q, "a-to-c", len(truths))
	if err != nil {
		t.Fatal(err)
	}
	if missing[0].GetStatus() != owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM {
		t.Errorf("a-to-c: %v", missing[0].GetStatus())
	}
	if m := httpGet(t, "http://"+addrs.HTTP+"/metrics"); !strings.Contains(m, `owl_collector_parameter_mismatches_total{probe="op-c"} 1`) {
		t.Errorf("mismatch not counted")
	}
}

// checkFlows asks for the path's heaviest flow and checks its per-epoch
// delay (LDS) against the ground truth.
func checkFlows(t *testing.T, q owlv1.QueryServiceClient, truths map[int64]map[capture.FlowKey]*sim.FlowTruth) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	top, err := q.TopFlows(ctx, &owlv1.TopFlowsRequest{Path: "a-to-b", Limit: 3})
	if err != nil || len(top.GetFlows()) == 0 {
		t.Fatalf("TopFlows: %v, %v", top, err)
	}
	heavy := top.GetFlows()[0].GetFlow()
	fk, err := netpath.FlowFromProto(heavy)
	if err != nil {
		t.Fatal(err)
	}
	// The truth's heaviest flow over the run.
	sizes := map[capture.FlowKey]int{}
	for _, flows := range truths {
		for k, ft := range flows {
			sizes[k] += ft.Sent
		}
	}
	var want capture.FlowKey
	for k, n := range sizes {
		if n > sizes[want] {
			want = k
		}
	}
	if fk != want {
		t.Errorf("TopFlows' heaviest flow is %v (%.0f packets), the truth's %v (%d packets)", fk, top.GetFlows()[0].GetPackets(), want, sizes[want])
	}
	fs, err := q.GetFlowStats(ctx, &owlv1.GetFlowStatsRequest{Path: "a-to-b", Flow: heavy})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	checked := 0
	for _, s := range fs.GetStats() {
		ft := truths[s.GetEpoch()][fk]
		if ft == nil || ft.SameEpoch < 1000 {
			continue
		}
		rel := math.Abs(s.GetMeanNs()-ft.MeanNS) / ft.MeanNS
		// The LDS bound: the sketch measures a subset of the flow's
		// packets (cells with a lost packet are out), so its mean is off
		// by sampling, a few standard errors of the true spread, plus
		// up to 1% from colliding flows.
		bound := 4*ft.StddevNS/math.Sqrt(math.Max(s.GetObserved(), 1)) + 0.01*ft.MeanNS
		fmt.Fprintf(&b, "epoch %d: %d packets, true %.3f µs, LDS %.3f µs ± %.3f (%.2f%%, bound %.2f%%), %.0f samples, %.0f observed\n", s.GetEpoch(), ft.SameEpoch,
			ft.MeanNS/1e3, s.GetMeanNs()/1e3, s.GetStderrNs()/1e3, 100*rel, 100*bound/ft.MeanNS, s.GetSamples(), s.GetObserved())
		if !s.GetEstimated() || math.Abs(s.GetMeanNs()-ft.MeanNS) > bound {
			t.Errorf("flow %v epoch %d: LDS mean %.1f ns, truth %.1f ns: off by %.1f ns, bound %.1f ns", fk, s.GetEpoch(), s.GetMeanNs(), ft.MeanNS, math.Abs(s.GetMeanNs()-ft.MeanNS), bound)
		}
		checked++
	}
	t.Logf("heaviest flow %v:\n%s", fk, b.String())
	if checked < 3 {
		t.Errorf("only %d epochs of the heaviest flow checked", checked)
	}
}

// checkTruth compares a path's results with the ground truth of the
// impairment m: every epoch OK, estimated by a decoded RDA, its mean exact
// (or within 1% where identical packets left buckets out), loss and
// boundary matching exact but for the last epoch; with checkLDA, the LDA
// mean within 1%.
func checkTruth(t *testing.T, stats []*owlv1.PathStats, truths []sim.EpochTruth, m sim.Impairment, checkLDA bool) {
	t.Helper()
	byEpoch := map[int64]*owlv1.PathStats{}
	for _, s := range stats {
		byEpoch[s.GetEpoch()] = s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%12s %6s %5s %5s %5s %12s %12s %9s %12s %9s %8s %6s %4s\n", "epoch", "sent", "lost", "owl", "cross",
		"true µs", "owl µs", "rel err", "LDA µs", "LDA err", "samples", "est", "m")
	checked, exact := 0, 0
	last := truths[len(truths)-1].Epoch
	for _, tr := range truths {
		s := byEpoch[tr.Epoch]
		if s == nil {
			t.Errorf("epoch %d: no result", tr.Epoch)
			continue
		}
		if s.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
			t.Errorf("epoch %d: status %v (%s)", tr.Epoch, s.GetStatus(), s.GetDetail())
			continue
		}
		// RDA with boundary matching measures every packet sent in the
		// epoch, wherever it arrived.
		rel := math.Abs(s.GetMeanNs()-tr.AllMeanNS) / tr.AllMeanNS
		ldaRel := math.Abs(s.GetLdaMeanNs()-tr.MeanNS) / tr.MeanNS
		fmt.Fprintf(&b, "%12d %6d %5d %5.0f %5d %12.3f %12.3f %9.2e %12.3f %8.3f%% %8d %6s %4d\n", tr.Epoch, tr.Sent, tr.Lost, s.GetLost(), s.GetBoundaryMatched(),
			tr.AllMeanNS/1e3, s.GetMeanNs()/1e3, rel, s.GetLdaMeanNs()/1e3, 100*ldaRel, s.GetSamples(), s.GetEstimator(), s.GetRdaBuckets())
		if s.GetEstimator() != "rda" || !s.GetDecoded() {
			t.Errorf("epoch %d: estimator %s decoded %t: RDA reconciliation did not complete", tr.Epoch, s.GetEstimator(), s.GetDecoded())
		}
		switch {
		case s.GetUnusableBuckets() == 0:
			// Exact: every bucket repaired.
			if rel > 1e-9 {
				t.Errorf("epoch %d: mean %.3f ns, truth %.3f ns: relative error %.2e, want exact", tr.Epoch, s.GetMeanNs(), tr.AllMeanNS, rel)
			}
			exact++
		case rel > 0.01:
			// Identical packets (same ID) with one copy lost leave buckets out.
			t.Errorf("epoch %d: mean relative error %.3f%% with %d buckets left out", tr.Epoch, 100*rel, s.GetUnusableBuckets())
		}
		if checkLDA && ldaRel > 0.01 {
			t.Errorf("epoch %d: LDA mean relative error %.3f%% > 1%%", tr.Epoch, 100*ldaRel)
		}
		// Loss is exact once boundary crossers are matched; the last epoch
		// has no next epoch upstream to match them in.
		if tr.Epoch != last && s.GetLost() != float64(tr.Lost) {
			t.Errorf("epoch %d: lost %.0f, truth %d", tr.Epoch, s.GetLost(), tr.Lost)
		}
		if tr.Epoch != last && s.GetBoundaryMatched() != uint64(tr.Crossed) {
			t.Errorf("epoch %d: %d boundary matched, truth %d crossed", tr.Epoch, s.GetBoundaryMatched(), tr.Crossed)
		}
		checked++
	}
	t.Logf("collector vs ground truth, loss %g, reordering %g, duplicates %g (%d of %d epochs exact):\n%s",
		m.Loss, m.Reorder, m.Duplicate, exact, checked, b.String())
	if checked < 5 || exact < checked-1 {
		t.Fatalf("%d epochs checked, %d exact", checked, exact)
	}
}
