package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.GRPCListen = "127.0.0.1:0"
	cfg.HTTPListen = ""
	cfg.Insecure = true // the TLS tests set their own
	cfg.PairTimeout = time.Second
	cfg.PairRetention = time.Second
	// Every report is stored and acknowledged when it comes (the tests
	// of reports held in memory set their own: unsaved_test.go).
	cfg.WriteLoneAfter = 0
	cfg.Paths = []netpath.Path{{Name: "p", Upstream: "a", Downstream: "b"}}
	// Epochs of few digits, as the tests number them, start in 2024:
	// the collector rejects epochs before 2000.
	cfg.Params.Epoch.Start = testEpochStart
	return cfg
}

// testEpochStart is t0 of the tests' epoch grid.
var testEpochStart = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// epochTime is the start of epoch e of the tests' grid, plus d.
func epochTime(e int64, d time.Duration) time.Time {
	return testEpochStart.Add(time.Duration(e)*time.Second + d)
}

// newTest makes a collector whose path workers run until the test ends.
func newTest(t testing.TB, cfg Config) *Collector {
	t.Helper()
	c, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { checkHeld(t, c) }) // after the workers stop
	t.Cleanup(startWorkers(c))
	return c
}

// checkHeld fails t when a path's count of the memory its pairing table
// holds (pathState.held, kept as sides come and go) is not the sum over
// the sides in the table.
func checkHeld(t testing.TB, c *Collector) {
	t.Helper()
	for name, ps := range c.paths {
		var sum [2]int64
		paired := int64(0)
		ps.mu.Lock()
		for _, pr := range ps.pending {
			for _, s := range []*side{pr.up, pr.down} {
				if s != nil {
					sum[roleIndex(s)] += s.size
				}
			}
			if pr.complete() {
				paired += pr.up.size + pr.down.size
			}
		}
		held, heldPaired := [2]int64{ps.held[0].Load(), ps.held[1].Load()}, ps.paired.Load()
		ps.mu.Unlock()
		if held != sum || heldPaired != paired {
			t.Errorf("path %s: held counted %v bytes (upstream, downstream), %d paired; its table holds %v, %d paired", name, held, heldPaired, sum, paired)
		}
	}
}

// startWorkers runs the collector's path workers until the returned
// function is called (which waits for them).
func startWorkers(c *Collector) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, ps := range c.paths {
		wg.Go(func() { c.worker.work(ctx, ps) })
	}
	return func() { cancel(); wg.Wait() }
}

// waitResult waits for a path's epoch to have a result that satisfies ok.
func waitResult(t testing.TB, c *Collector, path string, epoch int64, ok func(*owlv1.PathStats) bool) *owlv1.PathStats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := c.store.Result(path, epoch)
		if err != nil {
			t.Fatal(err)
		}
		if r != nil && ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fitting result for %s epoch %d; last %v", path, epoch, r)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func anyResult(*owlv1.PathStats) bool { return true }

// ldaPair builds the two sides' LDAs of n packets with a constant delay.
func ldaPair(t testing.TB, cfg lda.Config, n int, delayNS int64, seed uint64) ([]byte, []byte) {
	up, _ := lda.New(cfg)
	down, _ := lda.New(cfg)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i < n; i++ {
		id, ts := r.Uint64(), r.Int64N(900_000_000)
		up.Insert(id, ts)
		down.Insert(id, ts+delayNS)
	}
	a, _ := up.MarshalBinary()
	b, _ := down.MarshalBinary()
	return a, b
}

func report(path string, epoch int64, role owlv1.Role, l []byte) *owlv1.EpochReport {
	return &owlv1.EpochReport{Path: path, Epoch: epoch, Role: role, Lda: l, Counters: &owlv1.Counters{}, ClosedUnixNs: time.Now().UnixNano()}
}

func TestPairAndStore(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	up, down := ldaPair(t, cfg.Params.LDA, 1000, 12345, 1)
	if err := c.report("a", report("p", 7, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.store.Result("p", 7); r != nil {
		t.Fatal("result before the second side")
	}
	if err := c.report("b", report("p", 7, owlv1.Role_ROLE_DOWNSTREAM, down)); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, c, "p", 7, anyResult)
	if r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || r.GetMeanNs() != 12345 || r.GetSamples() != 1000 {
		t.Errorf("result %v", r)
	}
	if got := r.GetStart().AsTime(); !got.Equal(epochTime(7, 0)) {
		t.Errorf("start %v", got)
	}
	// The same report again (after a reconnect) is acknowledged, not recombined.
	if err := c.report("a", report("p", 7, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(c.m.dupReports); n != 1 {
		t.Errorf("duplicates %v", n)
	}
	// The worker takes the epoch out of the pairing table just after it
	// stores the result: the duplicate may have come before.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c.paths["p"].mu.Lock()
		left := len(c.paths["p"].pending)
		c.paths["p"].mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Error("a duplicate left a pending report")
			break
		}
	}
	c.Close()

	// A restart keeps the result.
	c2 := newTest(t, cfg)
	defer c2.Close()
	res, err := c2.store.Results("p", 0, 100, 10)
	if err != nil || len(res) != 1 || res[0].GetMeanNs() != 12345 {
		t.Fatalf("after restart: %v, %v", res, err)
	}
}

func TestRejections(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	up, _ := ldaPair(t, cfg.Params.LDA, 10, 1, 1)
	other := cfg.Params.LDA
	other.Rows = 2 * cfg.Params.LDA.Rows // a collector asks for fewer rows, never more
	odd, _ := ldaPair(t, other, 10, 1, 1)
	other.Rows, other.Seed = 512, cfg.Params.LDA.Seed+1
	seeded, _ := ldaPair(t, other, 10, 1, 1)
	sampled := func(seed uint64, n int) *owlv1.EpochReport {
		r := report("p", 1, owlv1.Role_ROLE_UPSTREAM, up)
		cfg, _ := sample.ForShift(seed, 0)
		s, _ := sample.New(cfg)
		for i := range n {
			s.Insert(uint64(i), int64(i))
		}
		r.Sample, _ = s.MarshalBinary()
		return r
	}
	max := cfg.Params.Sample.MaxEntries
	tests := []struct {
		name, probe string
		r           *owlv1.EpochReport
		want        string
	}{
		{"unknown path", "a", report("nope", 1, owlv1.Role_ROLE_UPSTREAM, up), "not configured"},
		{"wrong probe", "b", report("p", 1, owlv1.Role_ROLE_UPSTREAM, up), "not its upstream"},
		{"no role", "a", report("p", 1, owlv1.Role_ROLE_UNSPECIFIED, up), "without a role"},
		{"malformed", "a", report("p", 1, owlv1.Role_ROLE_UPSTREAM, up[:20]), "malformed"},
		{"mismatch", "a", report("p", 1, owlv1.Role_ROLE_UPSTREAM, odd), "lda rows 2048 exceed"},
		{"seed", "a", report("p", 1, owlv1.Role_ROLE_UPSTREAM, seeded), "seed"},
		{"sample seed", "a", sampled(cfg.Params.Sample.Seed+1, 10), "a sample of 10 packets under seed"},
		{"sample size", "a", sampled(cfg.Params.Sample.Seed, max+1), fmt.Sprintf("a sample of %d packets", max+1)},
		{"sample malformed", "a", func() *owlv1.EpochReport {
			r := sampled(cfg.Params.Sample.Seed, 10)
			r.Sample = r.Sample[:20]
			return r
		}(), "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.report(tt.probe, tt.r)
			var rej *rejection
			if !errors.As(err, &rej) || !strings.Contains(rej.reason, tt.want) {
				t.Errorf("got %v, want a rejection containing %q", err, tt.want)
			}
		})
	}
	if err := c.report("a", sampled(cfg.Params.Sample.Seed, max)); err != nil {
		t.Errorf("a sample of max_entries: %v", err)
	}
	other.Seed = cfg.Params.LDA.Seed
	fewer, _ := ldaPair(t, other, 10, 1, 1)
	if err := c.report("a", report("p", 2, owlv1.Role_ROLE_UPSTREAM, fewer)); err != nil {
		t.Errorf("an LDA of 512 of the parameters' %d rows: %v", cfg.Params.LDA.Rows, err)
	}
}

func TestHelloMismatch(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	good := cfg.Params
	err := c.probes.hello(&owlv1.Hello{ProbeId: "a", Params: good.ToProto()}, "x", "")
	pc := c.pathConfig("a")
	if err != nil || len(pc.GetPaths()) != 1 || pc.GetPaths()[0].GetRole() != owlv1.Role_ROLE_UPSTREAM {
		t.Fatalf("good hello: %v, %v", pc, err)
	}
	bad := cfg.Params
	bad.Identity.Seed++
	bad.Epoch.Length = 2 * time.Second
	err = c.probes.hello(&owlv1.Hello{ProbeId: "b", Params: bad.ToProto()}, "y", "")
	var rej *rejection
	if !errors.As(err, &rej) || !strings.Contains(rej.reason, "seed") || !strings.Contains(rej.reason, "length") {
		t.Fatalf("bad hello: %v", err)
	}
	infos := c.probes.infos()
	if len(infos) != 2 || infos[1].GetError() == "" || !infos[0].GetConnected() {
		t.Errorf("probe infos %v", infos)
	}
	if err := c.probes.hello(&owlv1.Hello{ProbeId: "bad id!", Params: good.ToProto()}, "z", ""); err == nil {
		t.Error("invalid probe id accepted")
	}
}

func TestTimeoutThenLateSide(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	now := epochTime(1000, 0)
	c.now = func() time.Time { return now }
	up, down := ldaPair(t, cfg.Params.LDA, 100, 500, 2)
	if err := c.report("a", report("p", 3, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(cfg.PairTimeout)
	c.sweep()
	r, _ := c.store.Result("p", 3)
	if r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM {
		t.Fatalf("after timeout: %v", r.GetStatus())
	}
	// The late side still completes the epoch within the retention.
	if err := c.report("b", report("p", 3, owlv1.Role_ROLE_DOWNSTREAM, down)); err != nil {
		t.Fatal(err)
	}
	r = waitResult(t, c, "p", 3, func(r *owlv1.PathStats) bool { return r.GetStatus() == owlv1.ResultStatus_RESULT_STATUS_OK })
	if r.GetMeanNs() != 500 {
		t.Fatalf("after the late side: %v", r)
	}
	// A lone report is forgotten after timeout + retention.
	if err := c.report("a", report("p", 4, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(cfg.PairTimeout)
	c.sweep()
	now = now.Add(cfg.PairRetention)
	c.sweep()
	// (Epoch 3's pairing leaves the map once its worker is done, a
	// moment after its result is stored: not this check's business.)
	c.paths["p"].mu.Lock()
	left := c.paths["p"].pending[4]
	c.paths["p"].mu.Unlock()
	if left != nil {
		t.Error("lone report kept after retention")
	}
	if pend, _, _ := c.store.AllPending(); len(pend) != 0 {
		t.Errorf("%d pending reports stored after retention", len(pend))
	}
}

func TestRestoreCompletesStoredPair(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	up, _ := ldaPair(t, cfg.Params.LDA, 100, 77, 3)
	if err := c.report("a", report("p", 9, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c2 := newTest(t, cfg)
	defer c2.Close()
	c2.paths["p"].mu.Lock()
	pr := c2.paths["p"].pending[9]
	c2.paths["p"].mu.Unlock()
	if pr == nil || pr.up == nil || pr.down != nil {
		t.Fatalf("pending after restart: %+v", pr)
	}
	_, down := ldaPair(t, cfg.Params.LDA, 100, 77, 3)
	if err := c2.report("b", report("p", 9, owlv1.Role_ROLE_DOWNSTREAM, down)); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, c2, "p", 9, anyResult); r.GetMeanNs() != 77 {
		t.Errorf("result %v", r)
	}
}

// serve starts the gRPC services on an in-memory listener.
func serve(t testing.TB, c *Collector) *grpc.ClientConn {
	l := bufconn.Listen(1 << 20)
	s := grpc.NewServer()
	owlv1.RegisterProbeServiceServer(s, probeService{c: c})
	owlv1.RegisterQueryServiceServer(s, queryService{c: c})
	go s.Serve(l)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return l.DialContext(ctx)
	}), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// probeStream opens a Connect stream and completes the Hello.
func probeStream(t testing.TB, conn *grpc.ClientConn, id string, p params.Params) owlv1.ProbeService_ConnectClient {
	return probeStreamCtx(t, context.Background(), conn, id, p)
}

// probeStreamCtx is probeStream with a stream that ends with ctx.
func probeStreamCtx(t testing.TB, ctx context.Context, conn *grpc.ClientConn, id string, p params.Params) owlv1.ProbeService_ConnectClient {
	st, err := owlv1.NewProbeServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The tests' epochs are old: the test probes replay.
	if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Hello{Hello: &owlv1.Hello{ProbeId: id, Params: p.ToProto(), Replay: true}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || m.GetPaths() == nil {
		t.Fatalf("hello answer %v, %v", m, err)
	}
	return st
}

// nextAck skips releases and size hints up to the next acknowledgement.
func nextAck(t testing.TB, st owlv1.ProbeService_ConnectClient) *owlv1.Ack {
	t.Helper()
	for {
		m, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if a := m.GetAck(); a != nil {
			return a
		}
	}
}

func TestGRPCFlow(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	conn := serve(t, c)
	q := owlv1.NewQueryServiceClient(conn)
	ctx := context.Background()
	watch, err := q.WatchPathStats(ctx, &owlv1.WatchPathStatsRequest{Path: "p"})
	if err != nil {
		t.Fatal(err)
	}
	a := probeStream(t, conn, "a", cfg.Params)
	b := probeStream(t, conn, "b", cfg.Params)
	for e := int64(10); e < 13; e++ {
		up, down := ldaPair(t, cfg.Params.LDA, 500, 1000*e, uint64(e))
		r := report("p", e, owlv1.Role_ROLE_UPSTREAM, up)
		r.Seq = uint64(e)
		if err := a.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}); err != nil {
			t.Fatal(err)
		}
		r = report("p", e, owlv1.Role_ROLE_DOWNSTREAM, down)
		if err := b.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}); err != nil {
			t.Fatal(err)
		}
		// Both sides are acknowledged once the result is stored.
		if m := nextAck(t, a); m.GetSeq() != uint64(e) {
			t.Fatalf("ack %v", m)
		}
		nextAck(t, b)
		got, err := watch.Recv()
		if err != nil || got.GetEpoch() != e || got.GetMeanNs() != float64(1000*e) {
			t.Fatalf("watched %v, %v", got, err)
		}
	}
	resp, err := q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: "p", Limit: 2})
	if err != nil || len(resp.GetStats()) != 2 || resp.GetStats()[1].GetEpoch() != 12 {
		t.Fatalf("limit 2: %v, %v", resp, err)
	}
	if _, err := q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: "nope"}); err == nil {
		t.Error("unknown path answered")
	}
	// A rejected probe hears why on its stream.
	bad := cfg.Params
	bad.LDA.Rows = 64
	st, _ := owlv1.NewProbeServiceClient(conn).Connect(ctx)
	_ = st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Hello{Hello: &owlv1.Hello{ProbeId: "b", Params: bad.ToProto()}}})
	m, err := st.Recv()
	if err != nil || !strings.Contains(m.GetReject().GetReason(), "rows") {
		t.Errorf("rejected hello: %v, %v", m, err)
	}
}

func TestMetricsExposition(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	up, down := ldaPair(t, cfg.Params.LDA, 100, 2500, 4)
	ru, rd := report("p", 1, owlv1.Role_ROLE_UPSTREAM, up), report("p", 1, owlv1.Role_ROLE_DOWNSTREAM, down)
	ru.Clock = &owlv1.ClockStatus{Source: "ptp", State: owlv1.ClockState_CLOCK_STATE_SYNCHRONIZED, Synchronized: true, OffsetNs: 300_000, DelayNs: 20_000, UncertaintyNs: 100}
	rd.Clock = &owlv1.ClockStatus{Source: "phc", State: owlv1.ClockState_CLOCK_STATE_HOLDOVER, Synchronized: true, UncertaintyNs: 200}
	_ = c.report("a", ru)
	_ = c.report("b", rd)
	c.probes.clockUpdate("a", ru.Clock)
	c.probes.clockUpdate("b", rd.Clock)
	// Metrics are updated right after the result is stored.
	for deadline := time.Now().Add(5 * time.Second); c.m.pathSeries.get("p", pmResultsOK) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("no result counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := `
# HELP owl_path_delay_mean_seconds Mean one-way delay of the path's latest epoch.
# TYPE owl_path_delay_mean_seconds gauge
owl_path_delay_mean_seconds{path="p"} 2.5e-06
# HELP owl_path_samples Effective sample size of the path's latest epoch.
# TYPE owl_path_samples gauge
owl_path_samples{path="p"} 100
# HELP owl_collector_results_total Epoch results computed, by path and status.
# TYPE owl_collector_results_total counter
owl_collector_results_total{path="p",status="ok"} 1
# HELP owl_path_clock_uncertainty_seconds ± on the mean delay of the path's latest epoch from the two probes' clocks.
# TYPE owl_path_clock_uncertainty_seconds gauge
owl_path_clock_uncertainty_seconds{path="p"} 3e-07
# HELP owl_path_clock_flagged 1 when the path's latest epoch is flagged: clock uncertainty above the configured share of the mean, or a clock not synchronized.
# TYPE owl_path_clock_flagged gauge
owl_path_clock_flagged{path="p"} 1
# HELP owl_collector_probe_clock_offset_seconds Last reported offset of each probe's clock from its reference (local − reference).
# TYPE owl_collector_probe_clock_offset_seconds gauge
owl_collector_probe_clock_offset_seconds{probe="a"} 0.0003
owl_collector_probe_clock_offset_seconds{probe="b"} 0
# HELP owl_collector_probe_clock_state 1 for each probe's current clock state and source.
# TYPE owl_collector_probe_clock_state gauge
owl_collector_probe_clock_state{probe="a",source="ptp",state="synchronized"} 1
owl_collector_probe_clock_state{probe="b",source="phc",state="holdover"} 1
`
	if err := testutil.GatherAndCompare(c.m.reg, strings.NewReader(want),
		"owl_path_delay_mean_seconds", "owl_path_samples", "owl_collector_results_total", "owl_path_clock_uncertainty_seconds",
		"owl_path_clock_flagged", "owl_collector_probe_clock_offset_seconds", "owl_collector_probe_clock_state"); err != nil {
		t.Error(err)
	}
}

func TestJudgeClocks(t *testing.T) {
	synced := func(unc int64) *owlv1.ClockStatus {
		return &owlv1.ClockStatus{State: owlv1.ClockState_CLOCK_STATE_SYNCHRONIZED, Synchronized: true, UncertaintyNs: unc}
	}
	for _, tc := range []struct {
		name     string
		up, down *owlv1.ClockStatus
		mean     float64
		flagged  bool
		unc      float64
		note     string
	}{
		{"tight", synced(50), synced(50), 10_000, false, 100, ""},
		{"too loose for the mean", synced(600), synced(500), 10_000, true, 1100, "more than 10% of the mean"},
		{"negative mean", synced(50), synced(50), -10_000, false, 100, ""},
		{"unsynchronized", synced(50), &owlv1.ClockStatus{State: owlv1.ClockState_CLOCK_STATE_UNSYNCHRONIZED, Detail: "no grandmaster"}, 1e9, true, 50, "downstream clock unsynchronized (no grandmaster)"},
		{"replayed files", &owlv1.ClockStatus{Source: "file"}, &owlv1.ClockStatus{Source: "file"}, 5, false, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &owlv1.PathStats{Status: owlv1.ResultStatus_RESULT_STATUS_OK, MeanNs: tc.mean, UpstreamClock: tc.up, DownstreamClock: tc.down}
			judgeClocks(res, 0.1)
			if res.GetClockFlagged() != tc.flagged || res.GetClockUncertaintyNs() != tc.unc || !strings.Contains(res.GetClockNote(), tc.note) {
				t.Errorf("flagged %t ±%v note %q", res.GetClockFlagged(), res.GetClockUncertaintyNs(), res.GetClockNote())
			}
		})
	}
}

// TestFlowQueries reports three flows of different delays with their LDSs
// and top-flow lists naming two, then asks for them over gRPC: the third
// from the sketches the collector kept.
func TestFlowQueries(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	conn := serve(t, c)
	q := owlv1.NewQueryServiceClient(conn)
	heavy := capture.FlowKey{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 1, DstPort: 2, Proto: 6}
	light := capture.FlowKey{Src: netip.MustParseAddr("10.0.0.3"), Dst: netip.MustParseAddr("10.0.0.4"), SrcPort: 3, DstPort: 4, Proto: 17}
	unnamed := capture.FlowKey{Src: netip.MustParseAddr("10.0.0.5"), Dst: netip.MustParseAddr("10.0.0.6"), SrcPort: 5, DstPort: 6, Proto: 6}
	upL, _ := lds.New(cfg.Params.LDS)
	downL, _ := lds.New(cfg.Params.LDS)
	r := rand.New(rand.NewPCG(1, 1))
	for _, f := range []struct {
		k       capture.FlowKey
		n       int
		delayNS int64
	}{{heavy, 3000, 500_000}, {light, 400, 90_000}, {unnamed, 800, 230_000}} {
		h := f.k.Hash(c.cfg.Params.LDS.Seed)
		for i := 0; i < f.n; i++ {
			id, ts := r.Uint64(), r.Int64N(900_000_000)
			upL.Insert(h, id, ts, 1)
			downL.Insert(h, id, ts+f.delayNS, 1)
		}
	}
	ub, _ := upL.MarshalBinary()
	db, _ := downL.MarshalBinary()
	up, down := ldaPair(t, cfg.Params.LDA, 100, 1, 5)
	top := []*owlv1.TopFlow{{Flow: netpath.FlowToProto(heavy), Packets: 3000}, {Flow: netpath.FlowToProto(light), Packets: 400}}
	ru := report("p", 4, owlv1.Role_ROLE_UPSTREAM, up)
	ru.Lds, ru.TopFlows = ub, top
	rd := report("p", 4, owlv1.Role_ROLE_DOWNSTREAM, down)
	rd.Lds = db
	if err := c.report("a", ru); err != nil {
		t.Fatal(err)
	}
	if err := c.report("b", rd); err != nil {
		t.Fatal(err)
	}
	waitResult(t, c, "p", 4, anyResult)
	ctx := context.Background()
	var tf *owlv1.TopFlowsResponse
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var err error
		tf, err = q.TopFlows(ctx, &owlv1.TopFlowsRequest{Path: "p", OrderBy: owlv1.TopFlowsRequest_ORDER_MEAN_DELAY})
		if err == nil && len(tf.GetFlows()) == 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(tf.GetFlows()) != 2 || tf.GetFlows()[0].GetMeanNs() != 500_000 || tf.GetFlows()[1].GetMeanNs() != 90_000 {
		t.Fatalf("TopFlows by delay: %v", tf)
	}
	// Any flow can be asked for, top or not: an unknown one has no estimate.
	fs, err := q.GetFlowStats(ctx, &owlv1.GetFlowStatsRequest{Path: "p", Flow: netpath.FlowToProto(light)})
	if err != nil || len(fs.GetStats()) != 1 || fs.GetStats()[0].GetMeanNs() != 90_000 || !fs.GetStats()[0].GetTop() {
		t.Fatalf("GetFlowStats: %v, %v", fs, err)
	}
	fs, err = q.GetFlowStats(ctx, &owlv1.GetFlowStatsRequest{Path: "p", Flow: netpath.FlowToProto(unnamed)})
	if err != nil || len(fs.GetStats()) != 1 || fs.GetStats()[0].GetMeanNs() != 230_000 || fs.GetStats()[0].GetTop() {
		t.Fatalf("GetFlowStats of a flow no top list names: %v, %v", fs, err)
	}
	other := netpath.FlowToProto(capture.FlowKey{Src: netip.MustParseAddr("10.9.9.9"), Dst: netip.MustParseAddr("10.9.9.8"), Proto: 17})
	fs, err = q.GetFlowStats(ctx, &owlv1.GetFlowStatsRequest{Path: "p", Flow: other})
	if err != nil || len(fs.GetStats()) != 1 || fs.GetStats()[0].GetEstimated() {
		t.Fatalf("unknown flow: %v, %v", fs, err)
	}
	if _, err := q.GetFlowStats(ctx, &owlv1.GetFlowStatsRequest{Path: "p", Flow: &owlv1.FlowKey{Src: "x"}}); err == nil {
		t.Error("bad flow accepted")
	}
}

// answerCaches plays a probe's caches on a stream: every copy of every
// packet (an ID may repeat), for plain and repeated fetches.
func answerCaches(st owlv1.ProbeService_ConnectClient, copies map[uint64][]int64, acks chan<- *owlv1.Ack) {
	for {
		m, err := st.Recv()
		if err != nil {
			close(acks)
			return
		}
		switch m := m.Msg.(type) {
		case *owlv1.CollectorMessage_Ack:
			acks <- m.Ack
		case *owlv1.CollectorMessage_Fetch:
			rep := &owlv1.FetchReply{RequestId: m.Fetch.GetRequestId()}
			add := func(id uint64) {
				for _, off := range copies[id] {
					rep.PacketIds = append(rep.PacketIds, id)
					rep.OffsetsNs = append(rep.OffsetsNs, off)
				}
			}
			if m.Fetch.GetRepeated() {
				for id, offs := range copies {
					if len(offs) > 1 {
						add(id)
					}
				}
			} else {
				for _, id := range m.Fetch.GetPacketIds() {
					add(id)
				}
			}
			_ = st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_FetchReply{FetchReply: rep}})
		}
	}
}

// TestDuplicateCopiesOnOneSide: a packet sent at the end of epoch 1 and
// duplicated on the way reaches the downstream point twice in epoch 2. The
// two copies cancel in epoch 2's ID xor, so peeling alone stalls; the
// collector must take the extra copy out, decode, match the first copy
// with epoch 1's loss, and keep both means exact.
func TestDuplicateCopiesOnOneSide(t *testing.T) {
	tw := newTwoEpochs(t)
	const delay = 40_000
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 400 {
		at := int64(i) * 4_000_000 // 4 ms apart, epochs 1 and 2
		if at+delay >= 2e9 {
			break
		}
		tw.send(rng.Uint64(), at, at+delay)
	}
	crosser := rng.Uint64()
	tw.send(crosser, 1e9-10_000, 1e9+30_000, 1e9+35_000) // two copies in epoch 2
	// One probe cache per side and epoch: this test's IDs are unique to
	// their epoch, so one map per side serves both epochs' fetches.
	tw.report(t)
	// Whichever epoch is reconciled first, boundary matching updates the
	// other: wait for the crosser's match and epoch 2's update.
	got := watchUntil(t, tw.watch, "the crosser's match", func(got map[int64]*owlv1.PathStats) bool {
		return len(got) == 2 && got[1].GetBoundaryMatched() > 0 && got[2].GetReordered() == 0
	})
	e1, e2 := got[1], got[2]
	if !e2.GetDecoded() || e2.GetEstimator() != "rda" || e2.GetDuplicates() != 1 || e2.GetReordered() != 0 {
		t.Errorf("epoch 2: decoded %t %s, duplicates %d, reordered %d", e2.GetDecoded(), e2.GetEstimator(), e2.GetDuplicates(), e2.GetReordered())
	}
	if e1.GetLost() != 0 || e1.GetBoundaryMatched() != 1 {
		t.Errorf("epoch 1: lost %v, boundary matched %d; want the crosser delivered", e1.GetLost(), e1.GetBoundaryMatched())
	}
	for _, r := range []*owlv1.PathStats{e1, e2} {
		if r.GetMeanNs() != delay {
			t.Errorf("epoch %d: mean %v, want exactly %d", r.GetEpoch(), r.GetMeanNs(), delay)
		}
	}
}

// TestCountersSettle: the path's counters of lost, reordered and
// duplicate packets add up to the stored results' once boundary matching
// is over, also when the later epoch is reconciled first: epoch 2 alone
// counts a packet sent at the end of epoch 1 as reordered, until epoch
// 1's loss takes it.
func TestCountersSettle(t *testing.T) {
	tw := newEpochs(t, 3)
	const delay = 40_000
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 600 {
		at := int64(i) * 5_000_000 // 5 ms apart, epochs 1 to 3
		tw.send(rng.Uint64(), at, at+delay)
	}
	tw.send(rng.Uint64(), 500_000_000)                                 // lost in epoch 1
	tw.send(rng.Uint64(), 1e9-10_000, 1e9+30_000)                      // sent in epoch 1, seen in epoch 2
	tw.send(rng.Uint64(), 1_500_000_000, 1_500_040_000, 1_500_045_000) // duplicated in epoch 2
	a, d := tw.connect(t)
	tw.sendReports(t, a, d, 2)
	got := watchUntil(t, tw.watch, "epoch 2 alone", func(got map[int64]*owlv1.PathStats) bool { return got[2] != nil })
	if r := got[2]; r.GetEstimator() != "rda" || r.GetReordered() != 1 || r.GetDuplicates() != 1 {
		t.Fatalf("epoch 2 alone: %s, %d reordered, %d duplicates; want rda, 1, 1", r.GetEstimator(), r.GetReordered(), r.GetDuplicates())
	}
	// Epoch 3 before epoch 1: epoch 2's neighbours come out of order.
	tw.sendReports(t, a, d, 3)
	e3 := watchUntil(t, tw.watch, "epoch 3", func(got map[int64]*owlv1.PathStats) bool { return got[3] != nil })[3]
	if e3.GetEstimator() != "rda" || e3.GetLost() != 0 || e3.GetReordered() != 0 || e3.GetDuplicates() != 0 {
		t.Fatalf("epoch 3: %v", e3)
	}
	tw.sendReports(t, a, d, 1)
	got = watchUntil(t, tw.watch, "epoch 1, and epoch 2 matched", func(got map[int64]*owlv1.PathStats) bool {
		return got[1] != nil && got[2] != nil && got[2].GetReordered() == 0
	})
	if got[1].GetLost() != 1 || got[1].GetBoundaryMatched() != 1 || got[2].GetDuplicates() != 1 {
		t.Fatalf("results: epoch 1 lost %v, matched %d; epoch 2 duplicates %d; want 1, 1, 1",
			got[1].GetLost(), got[1].GetBoundaryMatched(), got[2].GetDuplicates())
	}
	// Epoch 2 settles once both its neighbours are in; epochs 1 and 3, at
	// the edges, by the sweep a pair_timeout (1 s here) after theirs.
	m := tw.c.m
	counters := func() [4]float64 {
		ps := m.pathSeries
		return [4]float64{ps.get("p", pmLost), ps.get("p", pmReordered), ps.get("p", pmDuplicates), ps.get("p", pmBoundary)}
	}
	want := [4]float64{1, 0, 1, 1}
	for deadline := time.Now().Add(5 * time.Second); counters() != want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		tw.c.sweep() // the test runs no sweep loop
	}
	if c := counters(); c != want {
		t.Errorf("counters lost, reordered, duplicates, boundary matched: %v, want %v", c, want)
	}
}

// twoEpochs is path p's traffic in epochs 1 and 2 (or 1 to n:
// newEpochs) as both sides' RDAs and caches hold it, and a collector
// (RDAs of 256 buckets, rebuilt up to 4,096) whose results for p are
// watched.
type twoEpochs struct {
	cfg      Config
	c        *Collector
	conn     *grpc.ClientConn
	watch    owlv1.QueryService_WatchPathStatsClient
	rdas     map[int64][2]*rda.RDA
	up, down map[uint64][]int64 // each side's cached offsets by ID
}

func newTwoEpochs(t *testing.T) *twoEpochs {
	t.Helper()
	return newEpochs(t, 2)
}

func newEpochs(t *testing.T, n int64) *twoEpochs {
	t.Helper()
	cfg := testConfig(t)
	cfg.Params.RDA.Buckets = 256
	cfg.RDA.MinBuckets, cfg.RDA.MaxBuckets = 256, 4096
	c := newTest(t, cfg)
	conn := serve(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	watch, err := owlv1.NewQueryServiceClient(conn).WatchPathStats(ctx, &owlv1.WatchPathStatsRequest{Path: "p"})
	if err != nil {
		t.Fatal(err)
	}
	tw := &twoEpochs{cfg: cfg, c: c, conn: conn, watch: watch, rdas: map[int64][2]*rda.RDA{}, up: map[uint64][]int64{}, down: map[uint64][]int64{}}
	for e := int64(1); e <= n; e++ {
		u, _ := rda.New(cfg.Params.RDA)
		d, _ := rda.New(cfg.Params.RDA)
		tw.rdas[e] = [2]*rda.RDA{u, d}
	}
	return tw
}

// send has packet id leave upNS after epoch 1's start and arrive at each
// of downNS (none: lost).
func (tw *twoEpochs) send(id uint64, upNS int64, downNS ...int64) {
	grid, base := tw.cfg.Params.Epoch, tw.cfg.Params.Epoch.StartNS(1)
	ue, uoff := grid.Of(base + upNS)
	tw.rdas[ue][0].Insert(id, uoff)
	tw.up[id] = append(tw.up[id], uoff)
	for _, dn := range downNS {
		de, doff := grid.Of(base + dn)
		tw.rdas[de][1].Insert(id, doff)
		tw.down[id] = append(tw.down[id], doff)
	}
}

// report connects probes a (upstream) and b (downstream), which answer
// fetches from their caches, and sends their reports of the epochs (none:
// 1 and 2), in that order: an empty LDA and the RDAs.
func (tw *twoEpochs) report(t *testing.T, epochs ...int64) {
	t.Helper()
	a, d := tw.connect(t)
	if len(epochs) == 0 {
		epochs = []int64{1, 2}
	}
	tw.sendReports(t, a, d, epochs...)
}

// connect connects probes a (upstream) and b (downstream), which answer
// fetches from their caches.
func (tw *twoEpochs) connect(t *testing.T) (a, d *sendOneAtATime) {
	t.Helper()
	// The reports and answerCaches' replies share a stream: one Send at a
	// time (gRPC's rule; two at once hung a test under the race detector).
	a = &sendOneAtATime{ProbeService_ConnectClient: probeStream(t, tw.conn, "a", tw.cfg.Params)}
	d = &sendOneAtATime{ProbeService_ConnectClient: probeStream(t, tw.conn, "b", tw.cfg.Params)}
	go answerCaches(a, tw.up, make(chan *owlv1.Ack, 64))
	go answerCaches(d, tw.down, make(chan *owlv1.Ack, 64))
	return a, d
}

// sendReports sends a's and d's reports of the epochs, in that order.
func (tw *twoEpochs) sendReports(t *testing.T, a, d *sendOneAtATime, epochs ...int64) {
	t.Helper()
	for _, e := range epochs {
		for i, st := range []owlv1.ProbeService_ConnectClient{a, d} {
			role := []owlv1.Role{owlv1.Role_ROLE_UPSTREAM, owlv1.Role_ROLE_DOWNSTREAM}[i]
			l, _ := lda.New(tw.cfg.Params.LDA)
			lb, _ := l.MarshalBinary()
			r := report("p", e, role, lb)
			r.Rda, _ = tw.rdas[e][i].MarshalBinary()
			if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sendOneAtATime is a probe's stream whose Send two goroutines call.
type sendOneAtATime struct {
	owlv1.ProbeService_ConnectClient
	mu sync.Mutex
}

func (s *sendOneAtATime) Send(m *owlv1.ProbeMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ProbeService_ConnectClient.Send(m)
}

// watchUntil reads the watch's results, the latest by epoch, until done
// says they are what the test waits for (what, when the deadline comes
// first).
func watchUntil(t *testing.T, watch owlv1.QueryService_WatchPathStatsClient, what string, done func(map[int64]*owlv1.PathStats) bool) map[int64]*owlv1.PathStats {
	t.Helper()
	got := map[int64]*owlv1.PathStats{}
	for !done(got) {
		r, err := watch.Recv()
		if err != nil {
			for e, r := range got {
				t.Logf("epoch %d: %v", e, r)
			}
			t.Fatalf("waiting for %s: %v", what, err)
		}
		got[r.GetEpoch()] = r
	}
	return got
}

// TestEpochOfCrossersOnly: every packet sent in epoch 1 is sent in its
// last 10 ms and arrives in epoch 2 (traffic that starts just before an
// epoch's end on a link slower than that). Epoch 1 has no packet both
// sides saw within it; boundary matching must still deliver its packets,
// with their exact delay, and take them off epoch 2's extras.
func TestEpochOfCrossersOnly(t *testing.T) {
	tw := newTwoEpochs(t)
	const delay = 40_000_000 // 40 ms
	rng := rand.New(rand.NewPCG(7, 8))
	const crossers = 20
	for i := range crossers {
		at := 1e9 - 10_000_000 + int64(i)*500_000
		tw.send(rng.Uint64(), at, at+delay)
	}
	for i := range 200 {
		at := 1e9 + int64(i)*4_000_000
		tw.send(rng.Uint64(), at, at+delay)
	}
	tw.report(t)
	got := watchUntil(t, tw.watch, "the crossers' match", func(got map[int64]*owlv1.PathStats) bool {
		return len(got) == 2 && got[1].GetBoundaryMatched() == crossers && got[2].GetReordered() == 0
	})
	e1 := got[1]
	if e1.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || e1.GetEstimator() != "rda" || e1.GetLost() != 0 ||
		e1.GetMeanNs() != delay || e1.GetSamples() != crossers {
		t.Errorf("epoch 1: %v %s, lost %v, mean %v over %d; want OK rda, none lost, %d over %d", e1.GetStatus(), e1.GetEstimator(),
			e1.GetLost(), e1.GetMeanNs(), e1.GetSamples(), delay, crossers)
	}
}

// TestRepairWaitsForProbe: after a restart, the upstream side of an epoch
// is in the store and the downstream probe reconnects first; the epoch
// pairs at once and its repair needs the upstream probe's cache. The
// collector waits for that probe (up to the pair timeout) instead of
// giving up on the exact result.
func TestRepairWaitsForProbe(t *testing.T) {
	cfg := testConfig(t)
	cfg.PairTimeout = 10 * time.Second
	c := newTest(t, cfg)
	conn := serve(t, c)
	const delay = 25_000
	rng := rand.New(rand.NewPCG(5, 6))
	u, _ := rda.New(cfg.Params.RDA)
	d, _ := rda.New(cfg.Params.RDA)
	upCopies, downCopies := map[uint64][]int64{}, map[uint64][]int64{}
	for i := range 300 {
		id, at := rng.Uint64(), int64(i)*3_000_000
		u.Insert(id, at)
		upCopies[id] = []int64{at}
		if i%50 == 7 {
			continue // lost: only the upstream cache knows its timestamp
		}
		d.Insert(id, at+delay)
		downCopies[id] = []int64{at + delay}
	}
	rep := func(role owlv1.Role, r *rda.RDA) *owlv1.EpochReport {
		l, _ := lda.New(cfg.Params.LDA)
		lb, _ := l.MarshalBinary()
		out := report("p", 1, role, lb)
		out.Rda, _ = r.MarshalBinary()
		return out
	}
	if err := c.report("a", rep(owlv1.Role_ROLE_UPSTREAM, u)); err != nil { // stored before the restart
		t.Fatal(err)
	}
	b := probeStream(t, conn, "b", cfg.Params)
	bAcks := make(chan *owlv1.Ack, 16)
	go answerCaches(b, downCopies, bAcks)
	if err := b.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: rep(owlv1.Role_ROLE_DOWNSTREAM, d)}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the epoch is paired; a is not back yet
	a := probeStream(t, conn, "a", cfg.Params)
	aAcks := make(chan *owlv1.Ack, 16)
	go answerCaches(a, upCopies, aAcks)
	r := waitResult(t, c, "p", 1, anyResult)
	if r.GetEstimator() != "rda" || !r.GetDecoded() || r.GetLost() != 6 || r.GetMeanNs() != delay {
		t.Errorf("estimator %s decoded %t lost %v mean %v: want the exact RDA result (6 lost, %d ns)", r.GetEstimator(), r.GetDecoded(), r.GetLost(), r.GetMeanNs(), delay)
	}
}

// TestRepairAskedAgainOnNewStream: a probe's stream ends while the
// collector waits for its answer to a fetch (the probe reconnects, as it
// does when its cluster's routes change); the fetch is asked again on the
// stream it opens next, and the epoch comes out exact.
func TestRepairAskedAgainOnNewStream(t *testing.T) {
	cfg := testConfig(t)
	cfg.PairTimeout = 10 * time.Second
	c := newTest(t, cfg)
	conn := serve(t, c)
	const delay = 25_000
	rng := rand.New(rand.NewPCG(7, 8))
	u, _ := rda.New(cfg.Params.RDA)
	d, _ := rda.New(cfg.Params.RDA)
	upCopies, downCopies := map[uint64][]int64{}, map[uint64][]int64{}
	for i := range 300 {
		id, at := rng.Uint64(), int64(i)*3_000_000
		u.Insert(id, at)
		upCopies[id] = []int64{at}
		if i%50 == 7 {
			continue // lost: only the upstream cache knows its timestamp
		}
		d.Insert(id, at+delay)
		downCopies[id] = []int64{at + delay}
	}
	rep := func(role owlv1.Role, r *rda.RDA) *owlv1.EpochReport {
		l, _ := lda.New(cfg.Params.LDA)
		lb, _ := l.MarshalBinary()
		out := report("p", 1, role, lb)
		out.Rda, _ = r.MarshalBinary()
		return out
	}
	if err := c.report("a", rep(owlv1.Role_ROLE_UPSTREAM, u)); err != nil {
		t.Fatal(err)
	}
	// a's first stream ends at the first request it gets, unanswered;
	// the stream a opens then answers.
	ctx, cancel := context.WithCancel(context.Background())
	first, err := owlv1.NewProbeServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Hello{Hello: &owlv1.Hello{ProbeId: "a", Params: cfg.Params.ToProto(), Replay: true}}}); err != nil {
		t.Fatal(err)
	}
	cut := make(chan struct{})
	go func() {
		defer close(cut)
		for {
			m, err := first.Recv()
			if err != nil || m.GetFetch() != nil || m.GetRebuild() != nil {
				cancel()
				return
			}
		}
	}()
	b := probeStream(t, conn, "b", cfg.Params)
	go answerCaches(b, downCopies, make(chan *owlv1.Ack, 16))
	if err := b.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: rep(owlv1.Role_ROLE_DOWNSTREAM, d)}}); err != nil {
		t.Fatal(err)
	}
	<-cut
	a := probeStream(t, conn, "a", cfg.Params)
	go answerCaches(a, upCopies, make(chan *owlv1.Ack, 16))
	r := waitResult(t, c, "p", 1, anyResult)
	if r.GetEstimator() != "rda" || !r.GetDecoded() || r.GetUnusableBuckets() != 0 || r.GetLost() != 6 || r.GetMeanNs() != delay {
		t.Errorf("estimator %s decoded %t, %d buckets left out, lost %v, mean %v: want the exact RDA result (6 lost, %d ns)",
			r.GetEstimator(), r.GetDecoded(), r.GetUnusableBuckets(), r.GetLost(), r.GetMeanNs(), delay)
	}
}

// An epoch that times out with its other probe connected keeps the
// present side's cache at its probe (the late side, within
// pair_retention, needs its repairs): it is released when the lone side
// is forgotten. With the other probe gone it is released a pair_timeout
// after the timeout if that probe has not come back by then, and kept if
// it has (a restarted probe sends its side late).
func TestTimeoutKeepsCacheWhilePartnerConnected(t *testing.T) {
	cfg := testConfig(t)
	cfg.PairRetention = 5 * cfg.PairTimeout // a release at the retention's end is another case
	c := newTest(t, cfg)
	defer c.Close()
	now := epochTime(1000, 0)
	c.now = func() time.Time { return now }
	conn := serve(t, c)
	released := make(chan int64, 16)
	stA := probeStream(t, conn, "a", cfg.Params)
	go func() {
		for {
			m, err := stA.Recv()
			if err != nil {
				return
			}
			for _, e := range m.GetRelease().GetEpochs() {
				released <- e.GetEpoch()
			}
		}
	}()
	stB := probeStream(t, conn, "b", cfg.Params)
	expect := func(what string, want int64) {
		t.Helper()
		select {
		case e := <-released:
			if e != want {
				t.Errorf("%s: epoch %d released, want %d", what, e, want)
			}
			if want < 0 {
				t.Errorf("%s: epoch %d released, want none", what, e)
			}
		case <-time.After(500 * time.Millisecond):
			if want >= 0 {
				t.Errorf("%s: epoch %d not released", what, want)
			}
		}
	}
	up, _ := ldaPair(t, cfg.Params.LDA, 100, 500, 2)
	if err := c.report("a", report("p", 3, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(cfg.PairTimeout)
	c.sweep()
	if r, _ := c.store.Result("p", 3); r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM {
		t.Fatalf("after timeout: %v", r.GetStatus())
	}
	expect("timed out, b connected", -1)
	now = now.Add(cfg.PairRetention)
	c.sweep()
	expect("forgotten", 3)

	_ = stB.CloseSend()
	deadline := time.Now().Add(5 * time.Second)
	for c.probes.session("b") != nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.report("a", report("p", 5, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(cfg.PairTimeout)
	c.sweep()
	expect("timed out, b gone: b may come back", -1)
	now = now.Add(cfg.PairTimeout)
	c.sweep()
	expect("a pair_timeout after the timeout, b still gone", 5)

	// b gone at the timeout, back before a pair_timeout has passed (a
	// probe restarting): the cache stays for b's late side.
	if err := c.report("a", report("p", 7, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(cfg.PairTimeout)
	c.sweep()
	expect("timed out, b gone again", -1)
	stB = probeStream(t, conn, "b", cfg.Params)
	defer stB.CloseSend()
	now = now.Add(cfg.PairTimeout)
	c.sweep()
	expect("a pair_timeout after the timeout, b back", -1)
}

// TestRebuildRefusedKeepsLDAWithDetail: the RDAs are too small for the
// epoch's loss and the upstream probe has lost the epoch's cache, so it
// answers the rebuild with an error. The result is the LDA's estimate,
// and it says why the RDA was not used.
func TestRebuildRefusedKeepsLDAWithDetail(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	const delay = 25_000
	_, send := refusedRebuildEpoch(t, c, &cfg, delay)
	send(0)
	send(1)
	r := waitResult(t, c, "p", 1, anyResult)
	if r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || r.GetEstimator() != "lda" || r.GetRebuilds() != 1 || r.GetMeanNs() != delay ||
		!strings.Contains(r.GetDetail(), "RDA reconciliation failed") || !strings.Contains(r.GetDetail(), "no cache") {
		t.Errorf("%v %s, %d rebuilds, mean %v ns, detail %q: want the LDA's exact %d ns saying the rebuild failed",
			r.GetStatus(), r.GetEstimator(), r.GetRebuilds(), r.GetMeanNs(), r.GetDetail(), delay)
	}
}

// TestExactResultStaysOverLaterEstimate: another member reconciled the
// epoch exactly (its copy is stored here) and its repairs used up the
// probe's cache; this member's own reconciliation of the epoch can only
// estimate. The exact result stays, in the store and in what watchers
// are told.
func TestExactResultStaysOverLaterEstimate(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	conn, send := refusedRebuildEpoch(t, c, &cfg, 25_000)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	watch, err := owlv1.NewQueryServiceClient(conn).WatchPathStats(ctx, &owlv1.WatchPathStatsRequest{Path: "p"})
	if err != nil {
		t.Fatal(err)
	}
	send(0)
	time.Sleep(200 * time.Millisecond) // a's side is pending, the watch registered
	exact := &owlv1.PathStats{Path: "p", Epoch: 1, Status: owlv1.ResultStatus_RESULT_STATUS_OK, Estimator: "rda", Decoded: true, MeanNs: 24_999, Lost: 60}
	if _, err := c.storeCopies([]*owlv1.EpochCopy{{Path: "p", Epoch: 1, Result: exact, Done: true}}); err != nil {
		t.Fatal(err)
	}
	send(1)
	var shown *owlv1.PathStats
	for shown == nil || shown.GetEpoch() != 1 {
		if shown, err = watch.Recv(); err != nil {
			t.Fatalf("watching: %v", err)
		}
	}
	stored, _ := c.store.Result("p", 1)
	for what, r := range map[string]*owlv1.PathStats{"stored": stored, "shown": shown} {
		if r.GetEstimator() != "rda" || r.GetMeanNs() != exact.GetMeanNs() {
			t.Errorf("%s: %s mean %v ns (%q), want the exact copy's %v ns", what, r.GetEstimator(), r.GetMeanNs(), r.GetDetail(), exact.GetMeanNs())
		}
	}
}

// refusedRebuildEpoch serves c, has probes a and b report epoch 1 of
// path p (300 packets, 60 lost, constant delay) with RDAs of 16 buckets,
// which Size deems too few, and has a answer every rebuild and fetch with
// "no cache". It returns the connection, and send, which sends the
// upstream (0) or downstream (1) report.
func refusedRebuildEpoch(t *testing.T, c *Collector, cfg *Config, delay int64) (conn *grpc.ClientConn, send func(int)) {
	t.Helper()
	conn = serve(t, c)
	rcfg := cfg.Params.RDA
	rcfg.Buckets = 16
	rng := rand.New(rand.NewPCG(9, 10))
	u, _ := rda.New(rcfg)
	d, _ := rda.New(rcfg)
	ul, _ := lda.New(cfg.Params.LDA)
	dl, _ := lda.New(cfg.Params.LDA)
	for i := range 300 {
		id, at := rng.Uint64(), int64(i)*3_000_000
		u.Insert(id, at)
		ul.Insert(id, at)
		if i%5 == 0 {
			continue // 60 lost: Size wants 150 buckets
		}
		d.Insert(id, at+delay)
		dl.Insert(id, at+delay)
	}
	rep := func(role owlv1.Role, r *rda.RDA, l *lda.LDA) *owlv1.EpochReport {
		lb, _ := l.MarshalBinary()
		out := report("p", 1, role, lb)
		out.Rda, _ = r.MarshalBinary()
		return out
	}
	a := probeStream(t, conn, "a", cfg.Params)
	go func() {
		for {
			m, err := a.Recv()
			if err != nil {
				return
			}
			const gone = `no cache for path "p" epoch 1 (released, evicted or never seen)`
			switch {
			case m.GetRebuild() != nil:
				_ = a.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_RebuildReply{RebuildReply: &owlv1.RebuildReply{
					RequestId: m.GetRebuild().GetRequestId(), Error: gone}}})
			case m.GetFetch() != nil:
				_ = a.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_FetchReply{FetchReply: &owlv1.FetchReply{
					RequestId: m.GetFetch().GetRequestId(), Error: gone}}})
			}
		}
	}()
	b := probeStream(t, conn, "b", cfg.Params)
	go answerCaches(b, nil, make(chan *owlv1.Ack, 16))
	sides := []struct {
		st  owlv1.ProbeService_ConnectClient
		rep *owlv1.EpochReport
	}{{a, rep(owlv1.Role_ROLE_UPSTREAM, u, ul)}, {b, rep(owlv1.Role_ROLE_DOWNSTREAM, d, dl)}}
	return conn, func(i int) {
		if err := sides[i].st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: sides[i].rep}}); err != nil {
			t.Error(err)
		}
	}
}

// TestLateEpochMatchesFromTheStore: epochs 1 to 10 each send packets in
// their last 5 ms that arrive 20 ms later, in the next epoch; epoch 2's
// reports come after all the others. By then a path keeps only its
// newest boundary records in memory, and epoch 3's is read back from the
// store: epoch 2's crossers must still be matched into it, and epoch 1's
// into epoch 2.
func TestLateEpochMatchesFromTheStore(t *testing.T) {
	const n, crossers, delay = 10, 10, 20_000_000
	tw := newEpochs(t, n)
	rng := rand.New(rand.NewPCG(9, 10))
	for e := range int64(n) {
		for i := range 100 {
			at := e*1e9 + int64(i)*9_000_000
			tw.send(rng.Uint64(), at, at+delay/10)
		}
		for i := range crossers {
			if at := e*1e9 + 1e9 - 5_000_000 + int64(i)*400_000; e < n-1 {
				tw.send(rng.Uint64(), at, at+delay)
			}
		}
	}
	order := []int64{1}
	for e := int64(3); e <= n; e++ {
		order = append(order, e)
	}
	tw.report(t, append(order, 2)...)
	got := watchUntil(t, tw.watch, "epoch 2's matches", func(got map[int64]*owlv1.PathStats) bool {
		return got[2] != nil && got[2].GetBoundaryMatched() == crossers && got[3].GetReordered() == 0 && got[1].GetBoundaryMatched() == crossers
	})
	for _, e := range []int64{1, 2} {
		if r := got[e]; r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || r.GetLost() != 0 {
			t.Errorf("epoch %d: %v, lost %v; want OK, every crosser delivered", e, r.GetStatus(), r.GetLost())
		}
	}
	// Epochs may be reconciled in another order than sent, and a record
	// waits for its successor (or the pair timeout, in a sweep) to be
	// settled: wait for the 4 newest alone.
	ps := tw.c.paths["p"]
	held := func() int {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		return len(ps.boundaries)
	}
	waitFor(t, fmt.Sprintf("at most %d boundary records in memory", boundaryInMemory), func() bool {
		tw.c.sweep()
		return held() <= boundaryInMemory
	})
}
