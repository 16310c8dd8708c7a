package collector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/store"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRestoredSideTimesOutFromRestart: a side stored long before a
// restart waits a whole pair timeout after it for its other side, instead
// of timing out at once (its probe's partner has had no chance to send).
func TestRestoredSideTimesOutFromRestart(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	c.now = func() time.Time { return epochTime(1000, 0) } // received long ago
	up, _ := ldaPair(t, cfg.Params.LDA, 100, 77, 3)
	if err := c.report("a", report("p", 9, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c2 := newTest(t, cfg)
	defer c2.Close()
	c2.sweep()
	if r, _ := c2.store.Result("p", 9); r != nil {
		t.Fatalf("restored side timed out at the restart: %v", r.GetStatus())
	}
	c2.now = func() time.Time { return time.Now().Add(cfg.PairTimeout) }
	c2.sweep()
	if r, _ := c2.store.Result("p", 9); r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM {
		t.Fatalf("after a pair timeout from the restart: %v", r)
	}
}

// panicky is a query service whose ListPaths panics.
type panicky struct {
	owlv1.UnimplementedQueryServiceServer
}

func (panicky) ListPaths(context.Context, *owlv1.ListPathsRequest) (*owlv1.ListPathsResponse, error) {
	panic("a damaged record") // as a read of a damaged store would

}

func (panicky) ListProbes(context.Context, *owlv1.ListProbesRequest) (*owlv1.ListProbesResponse, error) {
	return &owlv1.ListProbesResponse{}, nil
}

// TestPanickingCallFailsAlone: a call that panics gets an INTERNAL error;
// the server goes on answering other calls.
func TestPanickingCallFailsAlone(t *testing.T) {
	c := newTest(t, testConfig(t))
	defer c.Close()
	l := bufconn.Listen(1 << 20)
	s := grpc.NewServer(c.serverOptions()...)
	owlv1.RegisterQueryServiceServer(s, panicky{})
	go s.Serve(l)
	defer s.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return l.DialContext(ctx)
	}), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	q := owlv1.NewQueryServiceClient(conn)
	_, err = q.ListPaths(context.Background(), &owlv1.ListPathsRequest{})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "a damaged record") {
		t.Fatalf("panicking call: %v", err)
	}
	if _, err := q.ListProbes(context.Background(), &owlv1.ListProbesRequest{}); err != nil {
		t.Fatalf("the server did not go on: %v", err)
	}
}

// TestRangeBeyondNanoseconds: a time range past what nanoseconds since
// 1970 count selects nothing (from 9999-12-31) or everything (to
// 9999-12-31), instead of overflowing into every epoch.
func TestRangeBeyondNanoseconds(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	up, down := ldaPair(t, cfg.Params.LDA, 200, 500, 4)
	last, _ := cfg.Params.Epoch.Of(time.Now().UnixNano())
	for _, e := range []int64{last - 1, last} {
		_ = c.report("a", report("p", e, owlv1.Role_ROLE_UPSTREAM, up))
		_ = c.report("b", report("p", e, owlv1.Role_ROLE_DOWNSTREAM, down))
		waitResult(t, c, "p", e, anyResult)
	}
	far := timestamppb.New(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
	early := timestamppb.New(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC))
	q := queryService{c: c}
	for _, tc := range []struct {
		from, to *timestamppb.Timestamp
		want     int
	}{{far, nil, 0}, {nil, far, 2}, {early, nil, 2}, {nil, early, 0}, {early, far, 2}} {
		r, err := q.GetPathStats(context.Background(), &owlv1.GetPathStatsRequest{Path: "p", From: tc.from, To: tc.to})
		if err != nil || len(r.GetStats()) != tc.want {
			t.Errorf("from %v to %v: %d results, want %d (%v)", tc.from.AsTime(), tc.to.AsTime(), len(r.GetStats()), tc.want, err)
		}
	}
}

// TestConfigurationMistakes: a collector with no path (and COLATE off)
// and a probe in no path are refused with a clear error.
func TestConfigurationMistakes(t *testing.T) {
	cfg := testConfig(t)
	cfg.Paths = nil
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "paths") {
		t.Errorf("no paths: %v", err)
	}
	cfg.Params.Colate.Enabled = true
	if err := cfg.Validate(); err != nil {
		t.Errorf("no paths, COLATE on (a COLATE-only deployment): %v", err)
	}
	cfg = testConfig(t)
	cfg.Paths = append(cfg.Paths, netpath.Path{Name: "q", Upstream: "c", Downstream: "d", Selector: netpath.Selector{SrcCIDRs: []string{"10.1.2.3/8"}}})
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "10.0.0.0/8") {
		t.Errorf("a CIDR with host bits: %v", err)
	}
	c := newTest(t, testConfig(t))
	defer c.Close()
	err := c.probes.hello(&owlv1.Hello{ProbeId: "stray", Params: cfg.Params.ToProto()}, "x", "")
	if err == nil || !strings.Contains(err.Error(), "no configured path") {
		t.Errorf("a probe in no path: %v", err)
	}
	if n := len(c.probes.infos()); n != 0 {
		t.Errorf("a stray probe id is kept: %d probes", n)
	}
}

// TestLoneSideStopsWaitingForDoneProbe: a side alone is timed out at
// once when the probe it waits for said its capture files are done, and
// not before pair_timeout otherwise (nor when the probe that said so is
// its own); a side held in memory only is written at once then too.
func TestLoneSideStopsWaitingForDoneProbe(t *testing.T) {
	cfg := testConfig(t)
	cfg.WriteLoneAfter = time.Hour
	held := newTest(t, cfg)
	defer held.Close()
	start := time.Now()
	held.now = func() time.Time { return start }
	up, _ := ldaPair(t, cfg.Params.LDA, 100, 900, 5)
	if _, _, err := held.takeReport("a", report("p", 4, owlv1.Role_ROLE_UPSTREAM, up), true, false, 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		done [2]bool
		want int
	}{{[2]bool{}, 0}, {[2]bool{true, false}, 0}, {[2]bool{false, true}, 1}} {
		if plan := held.planSweep(held.paths["p"], start.Add(time.Millisecond), tc.done); len(plan.save) != tc.want {
			t.Fatalf("side held in memory, done %v: %d epochs to write, want %d", tc.done, len(plan.save), tc.want)
		}
	}

	cfg = testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	c.now = func() time.Time { return start }
	if err := c.report("a", report("p", 4, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	ps := c.paths["p"]
	for _, tc := range []struct {
		done [2]bool
		want int
	}{{[2]bool{}, 0}, {[2]bool{true, false}, 0}, {[2]bool{false, true}, 1}} {
		plan := c.planSweep(ps, start.Add(time.Millisecond), tc.done)
		if len(plan.timeOut) != tc.want {
			t.Fatalf("done %v: %d epochs timed out, want %d", tc.done, len(plan.timeOut), tc.want)
		}
	}
}

// TestSideArrivingDuringTimeOut: the other side comes after a sweep chose
// to time an epoch out and before it wrote the missing-side result: the
// epoch is reconciled, never reported as missing a side.
func TestSideArrivingDuringTimeOut(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	start := time.Now()
	c.now = func() time.Time { return start }
	up, down := ldaPair(t, cfg.Params.LDA, 100, 900, 5)
	if err := c.report("a", report("p", 4, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	ps := c.paths["p"]
	plan := c.planSweep(ps, start.Add(cfg.PairTimeout), [2]bool{})
	if len(plan.timeOut) != 1 {
		t.Fatalf("sweep plan %+v", plan)
	}
	if err := c.report("b", report("p", 4, owlv1.Role_ROLE_DOWNSTREAM, down)); err != nil {
		t.Fatal(err)
	}
	c.timeOut(ps, 4)
	r := waitResult(t, c, "p", 4, anyResult)
	if r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || r.GetMeanNs() != 900 {
		t.Fatalf("result %v %v", r.GetStatus(), r.GetMeanNs())
	}
	time.Sleep(100 * time.Millisecond) // nothing may overwrite it
	if r, _ := c.store.Result("p", 4); r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
		t.Fatalf("overwritten: %v", r.GetStatus())
	}
}

// TestPprofOnlyWhenAsked: the profiles are served with Pprof on, and not
// without.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := testConfig(t)
		cfg.Pprof = on
		c := newTest(t, cfg)
		rec := httptest.NewRecorder()
		c.httpHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
		if got := rec.Code == http.StatusOK; got != on {
			t.Errorf("pprof %t: /debug/pprof/ answered %d", on, rec.Code)
		}
		c.Close()
	}
}

// gauge reads a gauge of the collector's registry.
func gauge(t *testing.T, c *Collector, name string) float64 {
	t.Helper()
	mfs, err := c.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// heldBytes is what a side of r, once held, counts in the backlog.
func heldBytes(t *testing.T, c *Collector, probe string, r *owlv1.EpochReport) int {
	t.Helper()
	s, err := c.decodeReport(probe, r)
	if err != nil {
		t.Fatal(err)
	}
	return s.bytes()
}

// TestBacklogGauges: a lone side shows in the backlog until its pair
// comes and the epoch is reconciled.
func TestBacklogGauges(t *testing.T) {
	c := newTest(t, testConfig(t))
	defer c.Close()
	up, down := ldaPair(t, c.cfg.Params.LDA, 50, 1000, 1)
	if err := c.report("a", report("p", 1, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	want := heldBytes(t, c, "a", report("p", 1, owlv1.Role_ROLE_UPSTREAM, up))
	if n, b := gauge(t, c, "owl_collector_pending_sides"), gauge(t, c, "owl_collector_pending_synopsis_bytes"); n != 1 || b != float64(want) || want < 2*len(up) {
		t.Errorf("one side in: %v sides, %v bytes; want 1 and %d (the wire form's %d and the decoded LDA)", n, b, want, len(up))
	}
	c.measureBacklog()
	if n, by := c.pendingBytes.Load(), *c.pendingByProbe.Load(); n != int64(want) || by["a"] != int64(want) || by["b"] != 0 {
		t.Errorf("one side in: %d bytes measured, %v by probe; want %d, all a's", n, by, want)
	}
	if err := c.report("b", report("p", 1, owlv1.Role_ROLE_DOWNSTREAM, down)); err != nil {
		t.Fatal(err)
	}
	waitResult(t, c, "p", 1, anyResult)
	waitFor(t, "an empty backlog", func() bool {
		return gauge(t, c, "owl_collector_pending_sides") == 0 && gauge(t, c, "owl_collector_queued_epochs") == 0
	})
	c.measureBacklog()
	if n, by := c.pendingBytes.Load(), *c.pendingByProbe.Load(); n != 0 || by["a"] != 0 || by["b"] != 0 {
		t.Errorf("after the pair: %d bytes measured, %v by probe; want none", n, by)
	}
}

// TestBacklogBound: past max_pending_bytes a report is turned away
// unacknowledged (the probe sends it again) and counted; below it, taken.
func TestBacklogBound(t *testing.T) {
	cfg := testConfig(t)
	cfg.Paths = append(cfg.Paths, netpath.Path{Name: "q", Upstream: "a", Downstream: "b"})
	c := newTest(t, cfg)
	defer c.Close()
	up, _ := ldaPair(t, c.cfg.Params.LDA, 50, 1000, 1)
	c.cfg.MaxPendingBytes = int64(heldBytes(t, c, "a", report("p", 1, owlv1.Role_ROLE_UPSTREAM, up)))
	c.cfg.Limits.MaxPendingShare = 1 // the bound of all probes (TestPendingShare: of one)
	if err := c.report("a", report("p", 1, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	c.measureBacklog()
	if err := c.report("a", report("q", 1, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	c.measureBacklog()
	err := c.report("a", report("p", 2, owlv1.Role_ROLE_UPSTREAM, up))
	if !errors.Is(err, errBusy) || testutil.ToFloat64(c.m.shed) != 1 {
		t.Errorf("over the bound: %v, %v shed", err, testutil.ToFloat64(c.m.shed))
	}
	if st := status.Convert(c.answer(&session{probe: "a"}, owlv1.Reject_KIND_REPORT, "p", 2, 9, err)); st.Code() != codes.ResourceExhausted {
		t.Errorf("the stream ends with %v, want ResourceExhausted", st)
	}
}

// TestHelloReleasesStoredEpochs: a collector that stored an epoch's
// result and stopped before it released the epoch releases it when the
// probe, connecting again, lists it as unreleased; epochs stored missing
// a side, without a result, of another path's probes or of no path stay
// unreleased.
func TestHelloReleasesStoredEpochs(t *testing.T) {
	cfg := testConfig(t)
	cfg.Paths = append(cfg.Paths, netpath.Path{Name: "q", Upstream: "b", Downstream: "c"})
	c := newTest(t, cfg)
	defer c.Close()
	for _, r := range []struct {
		path   string
		epoch  int64
		status owlv1.ResultStatus
	}{
		{"p", 5, owlv1.ResultStatus_RESULT_STATUS_OK},
		{"p", 6, owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM},
		{"p", 9, owlv1.ResultStatus_RESULT_STATUS_PARTIAL},
		{"q", 5, owlv1.ResultStatus_RESULT_STATUS_OK},
	} {
		res := &owlv1.PathStats{Path: r.path, Epoch: r.epoch, Start: timestamppb.New(epochTime(r.epoch, 0)), Status: r.status, Samples: 10}
		if err := c.store.PutResult(res, true); err != nil {
			t.Fatal(err)
		}
	}
	conn := serve(t, c)
	st, err := owlv1.NewProbeServiceClient(conn).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	refs := []*owlv1.EpochRef{{Path: "p", Epoch: 5}, {Path: "p", Epoch: 6}, {Path: "p", Epoch: 7},
		{Path: "p", Epoch: 9}, {Path: "q", Epoch: 5}, {Path: "nowhere", Epoch: 5}}
	hello := &owlv1.Hello{ProbeId: "a", Params: cfg.Params.ToProto(), Replay: true, Unreleased: refs}
	if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	released := make(chan *owlv1.EpochRef, 16)
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				return
			}
			for _, e := range m.GetRelease().GetEpochs() {
				released <- e
			}
		}
	}()
	var got []string
	timeout := time.After(time.Second)
	for done := false; !done; {
		select {
		case e := <-released:
			got = append(got, fmt.Sprintf("%s/%d", e.GetPath(), e.GetEpoch()))
		case <-timeout:
			done = true
		}
	}
	slices.Sort(got)
	if want := []string{"p/5", "p/9"}; !slices.Equal(got, want) {
		t.Errorf("released %v, want %v", got, want)
	}
}

// TestCaptureDropsMakePartial: an epoch during which a side's capture
// dropped packets comes out PARTIAL, saying which side and how many; an
// epoch without drops stays OK.
func TestCaptureDropsMakePartial(t *testing.T) {
	side := func(probe string, role owlv1.Role, dropped uint64) *side {
		return &side{Pending: store.Pending{Probe: probe, Report: &owlv1.EpochReport{Role: role, Counters: &owlv1.Counters{Dropped: dropped}}}}
	}
	for _, c := range []struct {
		up, down uint64
		want     owlv1.ResultStatus
		detail   string
	}{
		{0, 0, owlv1.ResultStatus_RESULT_STATUS_OK, ""},
		{0, 774, owlv1.ResultStatus_RESULT_STATUS_PARTIAL, "downstream probe b: its capture dropped 774 packets"},
		{3, 0, owlv1.ResultStatus_RESULT_STATUS_PARTIAL, "upstream probe a: its capture dropped 3 packets"},
	} {
		res := &owlv1.PathStats{Status: owlv1.ResultStatus_RESULT_STATUS_OK}
		markPartial(res, side("a", owlv1.Role_ROLE_UPSTREAM, c.up), side("b", owlv1.Role_ROLE_DOWNSTREAM, c.down))
		if res.GetStatus() != c.want || !strings.HasPrefix(res.GetDetail(), c.detail) {
			t.Errorf("drops %d and %d: %v %q, want %v %q", c.up, c.down, res.GetStatus(), res.GetDetail(), c.want, c.detail)
		}
	}
}
