package collector

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/colate"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// helloProbe registers a probe as its Hello would, live or replaying.
func helloProbe(t testing.TB, c *Collector, id string, replay bool) {
	t.Helper()
	if err := c.probes.hello(&owlv1.Hello{ProbeId: id, Params: c.cfg.Params.ToProto(), Replay: replay}, "test", ""); err != nil {
		t.Fatal(err)
	}
}

// nowEpoch is the epoch the collector's clock is in.
func nowEpoch(c *Collector) int64 {
	e, _ := c.cfg.Params.Epoch.Of(c.now().UnixNano())
	return e
}

// wantRejection fails unless err is a rejection whose reason holds want.
func wantRejection(t testing.TB, err error, want string) {
	t.Helper()
	var rej *rejection
	if !errors.As(err, &rej) || !strings.Contains(rej.reason, want) {
		t.Errorf("got %v, want a rejection saying %q", err, want)
	}
}

// flowEpochs lists the epochs of a path with stored sketches.
func flowEpochs(t testing.TB, c *Collector, path string) []int64 {
	t.Helper()
	var out []int64
	if err := c.store.FlowEpochs(path, func(e int64) bool { out = append(out, e); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitDone waits until a path's epoch has left the pairing table: its
// worker is done with it.
func waitDone(t *testing.T, c *Collector, path string, epoch int64) {
	t.Helper()
	ps := c.paths[path]
	waitFor(t, "the epoch's worker", func() bool {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		return ps.pending[epoch] == nil
	})
}

// infoOf is what ListProbes says of a probe (nil: nothing).
func infoOf(c *Collector, id string) *owlv1.ProbeInfo {
	for _, p := range c.probes.infos() {
		if p.GetProbeId() == id {
			return p
		}
	}
	return nil
}

// TestFarFutureEpochKeepsFlows: a live probe's epoch 100 years ahead is
// rejected; and where one gets stored anyway (a member's copy), per-flow
// data are pruned by when they were stored, so the others stay until
// their own retention is over.
func TestFarFutureEpochKeepsFlows(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	helloProbe(t, c, "a", false)
	helloProbe(t, c, "b", false)
	e := nowEpoch(c) - 2
	up, down := flowReports(t, cfg, "p", e)
	if err := c.report("a", up); err != nil {
		t.Fatal(err)
	}
	if err := c.report("b", down); err != nil {
		t.Fatal(err)
	}
	waitResult(t, c, "p", e, anyResult)
	waitDone(t, c, "p", e)
	far := e + 100*365*24*3600
	fu, _ := flowReports(t, cfg, "p", far)
	err := c.report("a", fu)
	wantRejection(t, err, "limits.max_epoch_ahead")
	wantRejection(t, err, fmt.Sprintf(`path "p" epoch %d starts at`, far))
	if n := testutil.ToFloat64(c.m.rejected.WithLabelValues("epoch_ahead")); n != 1 {
		t.Errorf("%v rejections for epochs ahead counted, want 1", n)
	}
	farRes := &owlv1.PathStats{Path: "p", Epoch: far, Status: owlv1.ResultStatus_RESULT_STATUS_OK}
	if _, err := c.storeCopies([]*owlv1.EpochCopy{{Path: "p", Epoch: far, Result: farRes, LdsUp: fu.GetLds(), LdsDown: fu.GetLds()}}); err != nil {
		t.Fatal(err)
	}
	c.worker.pruneFlows()
	if got := flowEpochs(t, c, "p"); len(got) != 2 || got[0] != e {
		t.Fatalf("after a prune: sketches of epochs %v, want %d and %d", got, e, far)
	}
	later := time.Now().Add(cfg.Flows.Retention + 2*flowSlot)
	c.now = func() time.Time { return later }
	c.worker.pruneFlows()
	if got := flowEpochs(t, c, "p"); len(got) != 0 {
		t.Errorf("a retention later: sketches of epochs %v kept", got)
	}
}

// TestReplayProbeOldEpoch: a probe that replays files may send epochs of
// any age (and keeps their per-flow data for the retention from when they
// came), not epochs ahead; a live probe may not send old ones.
func TestReplayProbeOldEpoch(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	helloProbe(t, c, "a", true)
	helloProbe(t, c, "b", true)
	old, _ := cfg.Params.Epoch.Of(time.Date(2023, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	up, down := flowReports(t, cfg, "p", old)
	if err := c.report("a", up); err != nil {
		t.Fatal(err)
	}
	if err := c.report("b", down); err != nil {
		t.Fatal(err)
	}
	waitResult(t, c, "p", old, anyResult)
	waitDone(t, c, "p", old)
	c.worker.pruneFlows()
	if got := flowEpochs(t, c, "p"); len(got) != 1 {
		t.Errorf("replayed epoch's sketches after a prune: %v", got)
	}
	ahead, _ := flowReports(t, cfg, "p", nowEpoch(c)+3600)
	wantRejection(t, c.report("a", ahead), "limits.max_epoch_ahead")

	helloProbe(t, c, "a", false) // the same probe, live now
	u2, _ := flowReports(t, cfg, "p", old+1)
	wantRejection(t, c.report("a", u2), "limits.max_epoch_age")
}

// TestAbsurdEpochs: epochs that do not start between 2000 and 2200 are
// rejected, from any probe, in reports and COLATE vectors; the probe hears
// why, the report is acknowledged, and ListProbes counts it.
func TestAbsurdEpochs(t *testing.T) {
	cfg := testConfig(t)
	cfg.Params.Epoch.Start = time.Time{} // epoch 0 starts in 1970
	c := newTest(t, cfg)
	defer c.Close()
	helloProbe(t, c, "a", true)
	up, _ := ldaPair(t, cfg.Params.LDA, 10, 1, 1)
	for _, e := range []int64{math.MaxInt64, math.MinInt64, -1, 0, math.MaxInt64 / int64(time.Second)} {
		wantRejection(t, c.report("a", report("p", e, owlv1.Role_ROLE_UPSTREAM, up)), "does not start between")
		wantRejection(t, c.takeColate("a", &owlv1.ColateVector{Epoch: e}), "does not start between")
	}
	if r, _ := c.store.Results("p", math.MinInt64, math.MaxInt64, 10); len(r) != 0 {
		t.Errorf("results stored: %v", r)
	}

	conn := serve(t, c)
	st := probeStream(t, conn, "a", cfg.Params)
	r := report("p", math.MaxInt64, owlv1.Role_ROLE_UPSTREAM, up)
	r.Seq = 5
	if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || !strings.Contains(m.GetReject().GetReason(), "no probe measured it") {
		t.Fatalf("answer %v, %v; want a rejection", m, err)
	}
	if a := nextAck(t, st); a.GetSeq() != 5 {
		t.Errorf("ack %v, want the rejected report's", a)
	}
	if n := infoOf(c, "a").GetRefused(); n != 1 {
		t.Errorf("ListProbes counts %d refused, want 1", n)
	}
}

// TestConflictingResends: a report sent again with other content than
// the side held, or the side used, is rejected and counted in the epoch's
// result; the same content again is a plain duplicate; a result stored
// without digests tells nothing.
func TestConflictingResends(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	up, down := ldaPair(t, cfg.Params.LDA, 100, 700, 1)
	forged, _ := ldaPair(t, cfg.Params.LDA, 100, 900, 2)
	if err := c.report("a", report("p", 5, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	// Pending: held, not yet used.
	wantRejection(t, c.report("a", report("p", 5, owlv1.Role_ROLE_UPSTREAM, forged)), "differs from the one held")
	if err := c.report("a", report("p", 5, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(c.m.dupReports); n != 1 {
		t.Errorf("%v duplicates, want 1", n)
	}
	if err := c.report("b", report("p", 5, owlv1.Role_ROLE_DOWNSTREAM, down)); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, c, "p", 5, anyResult)
	waitDone(t, c, "p", 5)
	if r.GetConflictingReports() != 1 || r.GetMeanNs() != 700 || r.GetUpstreamDigest() == 0 || r.GetDownstreamDigest() == 0 {
		t.Fatalf("result %v: want 1 conflicting report, the first side's mean, both digests", r)
	}
	// Stored: used.
	wantRejection(t, c.report("a", report("p", 5, owlv1.Role_ROLE_UPSTREAM, forged)), "differs from the one used")
	if r := waitResult(t, c, "p", 5, anyResult); r.GetConflictingReports() != 2 || r.GetMeanNs() != 700 {
		t.Errorf("stored result %v: want 2 conflicting reports", r)
	}
	if err := c.report("b", report("p", 5, owlv1.Role_ROLE_DOWNSTREAM, down)); err != nil {
		t.Fatal(err)
	}
	if n, m := testutil.ToFloat64(c.m.dupReports), testutil.ToFloat64(c.m.conflicting.WithLabelValues("a")); n != 2 || m != 2 {
		t.Errorf("%v duplicates and %v conflicting reports of a, want 2 and 2", n, m)
	}
	// Boundary matching re-stores results it changes: the count stays.
	again := proto.CloneOf(r)
	again.ConflictingReports = 0
	if err := c.store.Apply(store.Write{Results: []*owlv1.PathStats{again}}); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.store.Result("p", 5); r.GetConflictingReports() != 2 {
		t.Errorf("re-stored result counts %d conflicting reports, want 2", r.GetConflictingReports())
	}
	// A result stored before digests: any report of it is a duplicate.
	undigested := &owlv1.PathStats{Path: "p", Epoch: 6, Status: owlv1.ResultStatus_RESULT_STATUS_OK}
	if _, err := c.storeCopies([]*owlv1.EpochCopy{{Path: "p", Epoch: 6, Result: undigested, Done: true}}); err != nil {
		t.Fatal(err)
	}
	if err := c.report("a", report("p", 6, owlv1.Role_ROLE_UPSTREAM, forged)); err != nil {
		t.Errorf("report of an epoch stored without digests: %v", err)
	}
}

// TestMaxProbes: past limits.max_probes a new id is refused, one a path
// names is not; a probe no path names is forgotten, with its series, once
// it has been gone for limits.forget_probes_after; one a path names never.
func TestMaxProbes(t *testing.T) {
	cfg := testConfig(t)
	cfg.Params.Colate.Enabled = true // any id may come
	cfg.Paths = append(cfg.Paths, netpath.Path{Name: "q", Upstream: "c", Downstream: "d"})
	cfg.Limits.MaxProbes = 3
	c := newTest(t, cfg)
	defer c.Close()
	now := time.Now()
	c.now = func() time.Time { return now }
	clock := &owlv1.ClockStatus{Source: "ptp", State: owlv1.ClockState_CLOCK_STATE_SYNCHRONIZED, Synchronized: true}
	for _, id := range []string{"a", "x1", "x2"} {
		if err := c.probes.hello(&owlv1.Hello{ProbeId: id, Clock: clock}, "test", ""); err != nil {
			t.Fatal(err)
		}
	}
	wantRejection(t, c.probes.hello(&owlv1.Hello{ProbeId: "x3"}, "test", ""), "limits.max_probes")
	if n := testutil.ToFloat64(c.m.probesRefused.WithLabelValues("max_probes")); n != 1 {
		t.Errorf("%v probes refused counted, want 1", n)
	}
	c.probes.sawReport("x1")
	for _, id := range []string{"a", "x1"} {
		c.probes.goodbye(&session{probe: id})
	}
	now = now.Add(cfg.Limits.ForgetProbesAfter - time.Second)
	c.sweep()
	if infoOf(c, "x1") == nil {
		t.Fatal("x1 forgotten too early")
	}
	now = now.Add(2 * time.Second)
	c.sweep()
	if infoOf(c, "x1") != nil || infoOf(c, "a") == nil || infoOf(c, "x2") == nil {
		t.Errorf("probes after forget_probes_after: %v; want x1 gone, a (in a path) and x2 (connected) kept", c.probes.infos())
	}
	mfs, err := c.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "probe" && l.GetValue() == "x1" {
					t.Errorf("series %s of the forgotten probe kept", mf.GetName())
				}
			}
		}
	}
	if err := c.probes.hello(&owlv1.Hello{ProbeId: "x3"}, "test", ""); err != nil {
		t.Errorf("x3 once x1 was forgotten: %v", err)
	}
	if err := c.probes.hello(&owlv1.Hello{ProbeId: "c"}, "test", ""); err != nil {
		t.Errorf("a probe a path names, past max_probes: %v", err)
	}
}

// TestStreamsPerProbe: past limits.max_streams_per_probe a probe's new
// stream is refused at its Hello with ResourceExhausted naming the probe
// and the key, and counted; a place given back is taken again.
func TestStreamsPerProbe(t *testing.T) {
	cfg := testConfig(t)
	cfg.Limits.MaxStreamsPerProbe = 2
	c := newTest(t, cfg)
	defer c.Close()
	conn := serve(t, c)
	first := probeStream(t, conn, "a", cfg.Params)
	probeStream(t, conn, "a", cfg.Params)
	probeStream(t, conn, "b", cfg.Params) // another probe's count is its own
	st, err := owlv1.NewProbeServiceClient(conn).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Hello{Hello: &owlv1.Hello{ProbeId: "a", Params: cfg.Params.ToProto(), Replay: true}}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), "limits.max_streams_per_probe") {
		t.Fatalf("third stream of a: %v, %v; want ResourceExhausted naming the probe and limits.max_streams_per_probe", m, err)
	}
	if n := testutil.ToFloat64(c.m.probesRefused.WithLabelValues("max_streams_per_probe")); n != 1 {
		t.Errorf("%v streams refused counted, want 1", n)
	}
	if n := len(c.probes.allSessions()); n != 3 {
		t.Errorf("%d sessions open, want 3", n)
	}
	if err := first.CloseSend(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a's first stream to end", func() bool { return len(c.probes.allSessions()) == 2 })
	probeStream(t, conn, "a", cfg.Params)
}

// TestWatcherLimit: past limits.max_watchers a WatchPathStats stream is
// refused with ResourceExhausted; a place given back is taken again.
func TestWatcherLimit(t *testing.T) {
	cfg := testConfig(t)
	cfg.Limits.MaxWatchers = 2
	c := newTest(t, cfg)
	defer c.Close()
	q := owlv1.NewQueryServiceClient(serve(t, c))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, cancelFirst := context.WithCancel(ctx)
	for _, wctx := range []context.Context{first, ctx} {
		if _, err := q.WatchPathStats(wctx, &owlv1.WatchPathStatsRequest{Path: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "two watchers", func() bool { return c.watchers.open.Load() == 2 })
	w, err := q.WatchPathStats(ctx, &owlv1.WatchPathStatsRequest{Path: "p"})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max_watchers") {
		t.Fatalf("third watcher: %v, want ResourceExhausted naming max_watchers", err)
	}
	if n := testutil.ToFloat64(c.m.watchersRefused); n != 1 {
		t.Errorf("%v watchers refused counted", n)
	}
	cancelFirst()
	waitFor(t, "the first watcher to leave", func() bool { return c.watchers.open.Load() == 1 })
	if _, err := q.WatchPathStats(ctx, &owlv1.WatchPathStatsRequest{Path: "p"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new watcher in the place given back", func() bool { return c.watchers.open.Load() == 2 })
}

// TestReportRateLimit: a probe that sends faster than
// limits.reports_per_second is slowed (the collector waits before reading
// on, counted), not cut off: every report is acknowledged.
func TestReportRateLimit(t *testing.T) {
	cfg := testConfig(t)
	cfg.Limits.ReportsPerSecond = 10 // 30 reports wait unless reading them takes 2 s
	c := newTest(t, cfg)
	defer c.Close()
	sweepEvery(t, c, 50*time.Millisecond) // lone sides are stored, then acknowledged
	st := probeStream(t, serve(t, c), "a", cfg.Params)
	up, _ := ldaPair(t, cfg.Params.LDA, 10, 1, 1)
	const n = 30
	for e := int64(1); e <= n; e++ {
		r := report("p", e, owlv1.Role_ROLE_UPSTREAM, up)
		r.Seq = uint64(e)
		if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		nextAck(t, st)
	}
	if w := testutil.ToFloat64(c.m.rateWait.WithLabelValues("a")); w <= 0 {
		t.Errorf("waited %v s for %d reports at 10/s", w, n)
	}
}

// TestColateRateLimit: COLATE vectors count against
// limits.reports_per_second as reports do: a probe that sends them faster
// is slowed (counted), and every vector is acknowledged.
func TestColateRateLimit(t *testing.T) {
	cfg := colateTestConfig(t)
	// 10 a second, bursts of 10: the 30 vectors wait unless reading them
	// takes 2 s (a race-built run on a loaded machine took 0.56 s at 20 a
	// second, bursts of 20, and had tokens enough).
	cfg.Limits.ReportsPerSecond = 10
	c := newTest(t, cfg)
	defer c.Close()
	st := probeStream(t, serve(t, c), "a", cfg.Params)
	const n = 30
	for e := int64(1); e <= n; e++ {
		v, err := colate.New(cfg.Params.ColateConfig(), cfg.Params.Epoch.StartNS(e))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := v.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		m := &owlv1.ColateVector{Epoch: e, Seq: uint64(e), Vector: raw}
		if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Colate{Colate: m}}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		nextAck(t, st)
	}
	if w := testutil.ToFloat64(c.m.rateWait.WithLabelValues("a")); w <= 0 {
		t.Errorf("waited %v s for %d COLATE vectors at 10/s", w, n)
	}
}

// maximalLDA is the wire form of an LDA of the deployment's shape whose
// every cell takes its longest encoding.
func maximalLDA(cfg Config) []byte {
	l := cfg.Params.LDA
	b := synopsis.AppendHeader(nil, synopsis.KindLDA, 1)
	b = binary.AppendUvarint(b, uint64(l.Rows))
	b = append(b, byte(len(l.BankSampleLog2)))
	b = append(b, l.BankSampleLog2...)
	b = binary.LittleEndian.AppendUint64(b, l.Seed)
	for range len(l.BankSampleLog2) * l.Rows {
		b = binary.AppendVarint(b, math.MinInt64)
		b = binary.AppendUvarint(b, math.MaxUint64)
	}
	return b
}

// maximalLDS is maximalLDA for the LDS.
func maximalLDS(cfg Config) []byte {
	l := cfg.Params.LDS
	b := synopsis.AppendHeader(nil, synopsis.KindLDS, 1)
	b = append(b, byte(l.Rows))
	b = binary.AppendUvarint(b, uint64(l.Cols))
	b = append(b, byte(l.K), 1)
	b = append(b, l.RowSampleLog2...)
	b = binary.LittleEndian.AppendUint64(b, l.Seed)
	for range l.Rows * l.Cols {
		b = binary.AppendVarint(b, math.MinInt64)
		b = binary.AppendUvarint(b, math.MaxUint64)
		b = binary.LittleEndian.AppendUint64(b, math.MaxUint64)
	}
	return b
}

// maximalRDA is an RDA of the deployment's hashing with buckets per bank,
// every bucket at its longest encoding.
func maximalRDA(t testing.TB, cfg Config, buckets int) []byte {
	rc := cfg.Params.RDA
	rc.Buckets = buckets
	r, err := rda.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	for l := range rc.Banks {
		for i, bs := 0, r.Buckets(l); i < len(bs); i++ {
			bs[i] = rda.Bucket{ID: math.MaxUint64, SumNS: math.MinInt64, Count: math.MinInt64, Check: math.MaxUint32}
		}
	}
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLargestReport: the largest report the default configuration lets a
// probe send (LDA and LDS at params, RDA at rda.max_buckets, the most top
// flows, every field at its longest) fits max_message_bytes and is taken;
// with one bucket more its RDA is refused before it is held.
func TestLargestReport(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	l := bufconn.Listen(1 << 20)
	s := grpc.NewServer(grpc.MaxRecvMsgSize(cfg.MaxMessageBytes))
	owlv1.RegisterProbeServiceServer(s, probeService{c: c})
	go s.Serve(l)
	defer s.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return l.DialContext(ctx)
	}), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st := probeStream(t, conn, "a", cfg.Params)

	addr := "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"
	top := make([]*owlv1.TopFlow, maxTopFlows)
	for i := range top {
		top[i] = &owlv1.TopFlow{Flow: &owlv1.FlowKey{Src: addr, Dst: addr, SrcPort: math.MaxUint32, DstPort: math.MaxUint32, Protocol: math.MaxUint32}, Packets: math.MaxUint64}
	}
	r := report("p", 1, owlv1.Role_ROLE_UPSTREAM, maximalLDA(cfg))
	r.Lds, r.TopFlows, r.Seq = maximalLDS(cfg), top, 1
	r.Rda = maximalRDA(t, cfg, cfg.RDA.MaxBuckets)
	m := &owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}
	size, bound := proto.Size(m), maxReportBytes(cfg.Params, cfg.RDA.MaxBuckets)
	if size > bound || bound > cfg.MaxMessageBytes {
		t.Fatalf("largest report %d bytes, bound %d, max_message_bytes %d", size, bound, cfg.MaxMessageBytes)
	}
	t.Logf("largest report: %d bytes (bound %d, max_message_bytes %d)", size, bound, cfg.MaxMessageBytes)
	if err := st.Send(m); err != nil {
		t.Fatal(err)
	}
	if a, err := st.Recv(); err != nil || a.GetAck().GetSeq() != 1 {
		t.Fatalf("largest report: %v, %v; want its ack", a, err)
	}

	r.Epoch, r.Seq = 2, 2
	r.Rda = maximalRDA(t, cfg, cfg.RDA.MaxBuckets+1)
	if err := st.Send(m); err != nil {
		t.Fatal(err)
	}
	a, err := st.Recv()
	if err != nil || !strings.Contains(a.GetReject().GetReason(), "rda.max_buckets") {
		t.Fatalf("one bucket more: %v, %v; want a rejection naming rda.max_buckets", a, err)
	}
	if n := testutil.ToFloat64(c.m.rejected.WithLabelValues("oversized")); n != 1 {
		t.Errorf("%v oversized reports counted", n)
	}
	ps := c.paths["p"]
	ps.mu.Lock()
	held := ps.pending[2] != nil
	ps.mu.Unlock()
	if held {
		t.Error("the oversized report is held")
	}
}

// TestPendingShare: a probe whose reports hold over
// limits.max_pending_share of max_pending_bytes is turned away
// (unacknowledged, counted by probe); another probe's reports are taken.
func TestPendingShare(t *testing.T) {
	cfg := testConfig(t)
	cfg.Paths = append(cfg.Paths, netpath.Path{Name: "q", Upstream: "c", Downstream: "d"})
	c := newTest(t, cfg)
	defer c.Close()
	up, _ := ldaPair(t, c.cfg.Params.LDA, 50, 1000, 1)
	c.cfg.MaxPendingBytes = int64(4 * heldBytes(t, c, "a", report("p", 1, owlv1.Role_ROLE_UPSTREAM, up)))
	c.cfg.Limits.MaxPendingShare = 0.5 // 2 reports of a probe
	for e := int64(1); e <= 3; e++ {   // the third at its share, taken
		if err := c.report("a", report("p", e, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
			t.Fatalf("report %d of a: %v", e, err)
		}
		c.measureBacklog()
	}
	err := c.report("a", report("p", 4, owlv1.Role_ROLE_UPSTREAM, up))
	if !errors.Is(err, errProbeShare) {
		t.Fatalf("over a's share: %v", err)
	}
	if st := status.Convert(c.answer(&session{probe: "a"}, owlv1.Reject_KIND_REPORT, "p", 4, 9, err)); st.Code() != codes.ResourceExhausted {
		t.Errorf("the stream ends with %v, want ResourceExhausted", st)
	}
	if err := c.report("c", report("q", 1, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Errorf("another probe's report: %v", err)
	}
	if n := testutil.ToFloat64(c.m.shed.WithLabelValues("a", "probe_share")); n != 1 {
		t.Errorf("%v of a's reports shed, want 1", n)
	}
}

// TestLimitsConfig: the defaults hold together; limits out of range, and
// an RDA bound whose reports would not fit max_message_bytes, are errors
// that name the key.
func TestLimitsConfig(t *testing.T) {
	ok := testConfig(t)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := maxReportBytes(ok.Params, ok.RDA.MaxBuckets); n > ok.MaxMessageBytes {
		t.Errorf("the default largest report takes %d bytes, over max_message_bytes %d", n, ok.MaxMessageBytes)
	}
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"age", func(c *Config) { c.Limits.MaxEpochAge = time.Second }, "max_epoch_age"},
		{"ahead", func(c *Config) { c.Limits.MaxEpochAhead = -time.Second }, "max_epoch_ahead"},
		{"probes", func(c *Config) { c.Limits.MaxProbes = 0 }, "max_probes"},
		{"rate", func(c *Config) { c.Limits.ReportsPerSecond = -1 }, "reports_per_second"},
		{"watchers", func(c *Config) { c.Limits.MaxWatchers = 0 }, "max_watchers"},
		{"streams", func(c *Config) { c.Limits.MaxStreamsPerProbe = 0 }, "max_streams_per_probe"},
		{"share", func(c *Config) { c.Limits.MaxPendingShare = 1.5 }, "max_pending_share"},
		{"rda too large", func(c *Config) { c.RDA.MaxBuckets = 1 << 20 }, "lower rda.max_buckets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tc.set(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestFlowAges: runs of epochs stored at once expire together, less the
// epochs stored again since.
func TestFlowAges(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var a flowAges
	for e := int64(100); e < 160; e++ {
		a.note(e, t0.Add(time.Duration(e-100)*100*time.Millisecond))
	}
	a.note(10_000, t0) // far away: its own run
	a.note(120, t0.Add(2*time.Minute))
	if len(a.runs) != 3 {
		t.Fatalf("runs %+v, want 3", a.runs)
	}
	got := a.expire(t0.Add(time.Minute))
	want := []store.EpochRange{{First: 100, Last: 119}, {First: 121, Last: 159}, {First: 10_000, Last: 10_000}}
	if len(got) != len(want) {
		t.Fatalf("expired %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("expired %v, want %v", got, want)
		}
	}
	if len(a.runs) != 1 || a.runs[0].lo != 120 {
		t.Errorf("kept %+v, want epoch 120's run", a.runs)
	}
}

// TestFetchEntriesOnlyAsked: a probe's fetch answer naming IDs the
// collector did not ask for adds nothing to what it holds.
func TestFetchEntriesOnlyAsked(t *testing.T) {
	rep := &owlv1.FetchReply{PacketIds: []uint64{1, 2, 2, 3}, OffsetsNs: []int64{10, 20, 21, 30}}
	out, _, err := fetchEntries("a", []uint64{2}, rep)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || len(out[2]) != 2 || out[2][1].OffsetNS != 21 {
		t.Errorf("entries %v, want both copies of 2 only", out)
	}
	// Asking for the IDs seen more than once names none: all are kept.
	if out, _, _ := fetchEntries("a", nil, rep); len(out) != 3 {
		t.Errorf("entries %v, want every ID", out)
	}
}

// TestTakePendingNamesASide: a TakePending without a side is refused,
// not answered with the upstream one.
func TestTakePendingNamesASide(t *testing.T) {
	c := newTest(t, testConfig(t))
	defer c.Close()
	_, err := clusterService{c: c}.TakePending(context.Background(), &owlv1.TakePendingRequest{Path: "p", Epoch: 3})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("no role: %v, want InvalidArgument", err)
	}
}

// TestMemoryLimit: the soft memory limit follows max_pending_bytes and the
// paths unless set or turned off; a size below -1 is refused.
func TestMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		pending, limit, want int64
		ok                   bool
	}{{512 << 20, 0, 1536 << 20, true}, {512 << 20, 1 << 30, 1 << 30, true}, {512 << 20, -1, 0, false}, {0, 0, 0, false}, {0, 2 << 30, 2 << 30, true}} {
		c := Config{MaxPendingBytes: tc.pending, MemoryLimitBytes: tc.limit}
		if got, ok := c.MemoryLimit(); got != tc.want || ok != tc.ok {
			t.Errorf("max_pending_bytes %d, memory_limit_bytes %d: %d, %t; want %d, %t", tc.pending, tc.limit, got, ok, tc.want, tc.ok)
		}
	}
	// The default grows by 768 KiB a path: 2.96 GiB at 2,000 paths.
	c := Config{MaxPendingBytes: 512 << 20, Paths: make([]netpath.Path, 2000)}
	if got, _ := c.MemoryLimit(); got != 3036<<20 {
		t.Errorf("2,000 paths: limit %d MiB, want 3036", got>>20)
	}
	c.MemoryLimitBytes = 1 << 30
	if got, _ := c.MemoryLimit(); got != 1<<30 {
		t.Errorf("2,000 paths, memory_limit_bytes 1 GiB: limit %d, want 1 GiB", got)
	}
	cfg := DefaultConfig()
	cfg.DataDir, cfg.MemoryLimitBytes = t.TempDir(), -2
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "memory_limit_bytes") {
		t.Errorf("memory_limit_bytes -2: %v", err)
	}
}

// TestGCTarget: gc_percent 0 stands for twice Go's default; off (-1) is
// refused without a memory limit, as is anything below it.
func TestGCTarget(t *testing.T) {
	for _, tc := range []struct{ percent, want int }{{0, 200}, {100, 100}, {-1, -1}} {
		if got := (Config{GCPercent: tc.percent}).GCTarget(); got != tc.want {
			t.Errorf("gc_percent %d: target %d, want %d", tc.percent, got, tc.want)
		}
	}
	for _, tc := range []struct {
		percent int
		limit   int64
		ok      bool
	}{{-1, 0, true}, {-1, -1, false}, {-2, 0, false}, {50, -1, true}} {
		cfg := testConfig(t)
		cfg.GCPercent, cfg.MemoryLimitBytes = tc.percent, tc.limit
		err := cfg.Validate()
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "gc_percent") {
			t.Errorf("gc_percent %d, memory_limit_bytes %d: %v", tc.percent, tc.limit, err)
		}
	}
}
