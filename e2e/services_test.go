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
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/sim"
)

// setup builds the binaries and makes two captures of the bundled trace
// across a path with Weibull delays and 1% loss.
func setup(t *testing.T) (*harness.Env, sim.Outputs, []sim.EpochTruth) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	env, err := harness.NewEnv(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	out := sim.OutputsFor(filepath.Join(dir, "trace"))
	m := sim.Impairment{Delay: sim.Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond}, Loss: 0.01, Seed: 7}
	if _, err := sim.GenerateFiles("../testdata/trace.pcap", out, capture.DefaultIdentityConfig(), m); err != nil {
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
	return env, out, sim.EpochTruths(truth, epoch.DefaultConfig(), 0)
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
// loopback and checks the per-epoch means against ground truth.
func TestServicesEndToEnd(t *testing.T) {
	env, out, truths := setup(t)
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
	byEpoch := map[int64]*owlv1.PathStats{}
	for _, s := range stats {
		byEpoch[s.GetEpoch()] = s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%12s %6s %12s %12s %9s %9s\n", "epoch", "sent", "true µs", "owl µs", "rel err", "samples")
	checked := 0
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
		rel := math.Abs(s.GetMeanNs()-tr.MeanNS) / tr.MeanNS
		fmt.Fprintf(&b, "%12d %6d %12.3f %12.3f %8.3f%% %9d\n", tr.Epoch, tr.Sent, tr.MeanNS/1e3, s.GetMeanNs()/1e3, 100*rel, s.GetSamples())
		if rel > 0.01 {
			t.Errorf("epoch %d: mean %.1f ns, truth %.1f ns: relative error %.3f%% > 1%%", tr.Epoch, s.GetMeanNs(), tr.MeanNS, 100*rel)
		}
		checked++
	}
	t.Logf("collector vs ground truth at 1%% loss:\n%s", b.String())
	if checked < 5 {
		t.Fatalf("only %d epochs checked", checked)
	}

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
	addr, err := harness.FreePort()
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
	got, err := harness.WaitStats(ctx, query(t, addr), "a-to-b", len(want))
	if err != nil {
		t.Fatalf("%v\n%s", err, coll2.Log())
	}
	if len(got) != len(want) {
		t.Fatalf("%d results after the restart, %d without", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.GetEpoch() != w.GetEpoch() || g.GetStatus() != w.GetStatus() || g.GetMeanNs() != w.GetMeanNs() ||
			g.GetStddevNs() != w.GetStddevNs() || g.GetSamples() != w.GetSamples() || g.GetLost() != w.GetLost() {
			t.Errorf("epoch %d: after restart %v mean %.3f std %.3f n %d lost %.0f; without %v mean %.3f std %.3f n %d lost %.0f",
				w.GetEpoch(), g.GetStatus(), g.GetMeanNs(), g.GetStddevNs(), g.GetSamples(), g.GetLost(),
				w.GetStatus(), w.GetMeanNs(), w.GetStddevNs(), w.GetSamples(), w.GetLost())
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
