package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/cluster"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/lds"
)

// heldBy names a path whose first holders among members are want, in
// order.
func heldBy(t *testing.T, members []string, want ...string) string {
	t.Helper()
	var ms []cluster.Member
	for _, n := range members {
		ms = append(ms, cluster.Member{Name: n})
	}
	for i := range 10000 {
		p := fmt.Sprintf("p%d", i)
		var got []string
		for _, m := range cluster.Holders(ms, p, len(want)) {
			got = append(got, m.Name)
		}
		if slices.Equal(got, want) {
			return p
		}
	}
	t.Fatalf("no path held by %v among %v", want, members)
	return ""
}

// replicaConfig is the configuration of a cluster's members for path:
// a pair timeout long enough that no lone side times out in a test.
func replicaConfig(t *testing.T, path string) Config {
	cfg := testConfig(t)
	cfg.Paths = []netpath.Path{{Name: path, Upstream: "a", Downstream: "b"}}
	cfg.PairTimeout, cfg.PairRetention = time.Minute, time.Minute
	return cfg
}

// waitFor polls cond until it holds, failing the test after 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited in vain for %s", what)
		}
	}
}

// waitMembers waits until each collector sees n live members.
func waitMembers(t *testing.T, n int, cs ...*Collector) {
	t.Helper()
	for _, c := range cs {
		waitFor(t, fmt.Sprintf("%s to see %d members", c.cl.Name(), n), func() bool { return len(c.members()) == n })
	}
}

// flowReports are both sides of an epoch of path with two flows in their
// sketches and top-flow lists.
func flowReports(t testing.TB, cfg Config, path string, epoch int64) (up, down *owlv1.EpochReport) {
	t.Helper()
	flows := []capture.FlowKey{
		{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 1, DstPort: 2, Proto: 6},
		{Src: netip.MustParseAddr("10.0.0.3"), Dst: netip.MustParseAddr("10.0.0.4"), SrcPort: 3, DstPort: 4, Proto: 17},
	}
	upL, _ := lds.New(cfg.Params.LDS)
	downL, _ := lds.New(cfg.Params.LDS)
	r := rand.New(rand.NewPCG(uint64(epoch), 2))
	var top []*owlv1.TopFlow
	for i, f := range flows {
		h, n := f.Hash(cfg.Params.LDS.Seed), 1000*(i+1)
		for range n {
			id, ts := r.Uint64(), r.Int64N(900_000_000)
			upL.Insert(h, id, ts, 1)
			downL.Insert(h, id, ts+int64(1000*(i+1))+epoch, 1)
		}
		top = append(top, &owlv1.TopFlow{Flow: netpath.FlowToProto(f), Packets: uint64(n)})
	}
	ub, _ := upL.MarshalBinary()
	db, _ := downL.MarshalBinary()
	ul, dl := ldaPair(t, cfg.Params.LDA, 100, 1000+epoch, uint64(epoch))
	up, down = report(path, epoch, owlv1.Role_ROLE_UPSTREAM, ul), report(path, epoch, owlv1.Role_ROLE_DOWNSTREAM, dl)
	up.Lds, up.TopFlows, down.Lds = ub, top, db
	return up, down
}

// pairEpochs reports both sides of epochs 1..n to c and returns its
// stored results.
func pairEpochs(t *testing.T, c *Collector, path string, n int) []*owlv1.PathStats {
	t.Helper()
	var out []*owlv1.PathStats
	for e := int64(1); e <= int64(n); e++ {
		sendEpoch(t, c, path, e)
		out = append(out, waitResult(t, c, path, e, anyResult))
	}
	return out
}

// sendEpoch reports both sides of an epoch of path to c (flowReports).
func sendEpoch(t *testing.T, c *Collector, path string, epoch int64) {
	t.Helper()
	up, down := flowReports(t, c.cfg, path, epoch)
	if err := c.report("a", up); err != nil {
		t.Fatal(err)
	}
	if err := c.report("b", down); err != nil {
		t.Fatal(err)
	}
}

// sameResults says whether results in st are those of want, each equal.
func sameResults(st *store.Store, want []*owlv1.PathStats) bool {
	for _, w := range want {
		r, err := st.Result(w.GetPath(), w.GetEpoch())
		if err != nil || !proto.Equal(r, w) {
			return false
		}
	}
	return true
}

// flowsOf lists a path's stored per-flow results.
func flowsOf(t *testing.T, st *store.Store, path string) []*owlv1.FlowStats {
	t.Helper()
	var out []*owlv1.FlowStats
	err := st.FlowResults(path, 0, 1<<40, func(_ uint64, f *owlv1.FlowStats) bool {
		out = append(out, f)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// replicaSides lists the copies of lone sides a store keeps.
func replicaSides(t *testing.T, st *store.Store) []string {
	t.Helper()
	ps, _, err := st.AllReplicaPending()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("%s/%d/%s", p.Report.GetPath(), p.Report.GetEpoch(), roleName(p.Report.GetRole())))
	}
	return out
}

// replicatedEpochs runs two members, c0 owning a path and c1 its
// replica, pairs epochs 1..n at c0 and waits for c1 to hold their
// results, which it returns.
func replicatedEpochs(t *testing.T, n int) (path string, c0, c1 *Collector, want []*owlv1.PathStats) {
	t.Helper()
	path = heldBy(t, []string{"c0", "c1"}, "c0", "c1")
	cfg := replicaConfig(t, path)
	c0, a0 := runMember(t, cfg, "c0", "")
	cfg.DataDir = t.TempDir()
	c1, _ = runMember(t, cfg, "c1", a0.Gossip)
	waitMembers(t, 2, c0, c1)
	want = pairEpochs(t, c0, path, n)
	waitFor(t, "the replica's results", func() bool { return sameResults(c1.store, want) })
	return path, c0, c1, want
}

// TestReplicaKeepsOwnersState: the owner of a path sends its replica what
// it stores; the replica holds the same results and per-flow results,
// and a copy of a lone side until the epoch is paired.
func TestReplicaKeepsOwnersState(t *testing.T) {
	path, c0, c1, _ := replicatedEpochs(t, 3)
	f0 := flowsOf(t, c0.store, path)
	waitFor(t, "the replica's per-flow results", func() bool { return len(flowsOf(t, c1.store, path)) == len(f0) })
	for i, f := range flowsOf(t, c1.store, path) {
		if !proto.Equal(f, f0[i]) {
			t.Errorf("per-flow result %d on the replica %v, on the owner %v", i, f, f0[i])
		}
	}
	if len(f0) != 6 {
		t.Errorf("%d per-flow results, want 2 in each of 3 epochs", len(f0))
	}
	if r, _ := c1.store.Result(path, 1); r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
		t.Errorf("replicated result %v", r)
	}

	up, down := flowReports(t, c0.cfg, path, 9)
	if err := c0.report("a", up); err != nil {
		t.Fatal(err)
	}
	lone := []string{path + "/9/upstream"}
	waitFor(t, "the replica's copy of the lone side", func() bool { return slices.Equal(replicaSides(t, c1.store), lone) })
	if got := replicaSides(t, c0.store); len(got) != 0 {
		t.Errorf("the owner keeps copies of its own sides: %v", got)
	}
	if err := c0.report("b", down); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, c0, path, 9, anyResult)
	waitFor(t, "the replica to forget the paired side", func() bool { return len(replicaSides(t, c1.store)) == 0 })
	waitFor(t, "the replica's result of the paired epoch", func() bool { return sameResults(c1.store, []*owlv1.PathStats{r}) })
	if n := testutil.ToFloat64(c0.m.replicated); n < 5 {
		t.Errorf("the owner counts %v copies taken, want at least 5", n)
	}
}

// localQuery is a query client of the collector at addr, and a context
// that makes it answer from its own store alone.
func localQuery(t *testing.T, addr string) (owlv1.QueryServiceClient, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return owlv1.NewQueryServiceClient(conn), metadata.AppendToOutgoingContext(context.Background(), forwardedKey, "test")
}

// equalStats says whether two lists of results are equal, one by one.
func equalStats(a, b []*owlv1.PathStats) bool {
	return slices.EqualFunc(a, b, func(x, y *owlv1.PathStats) bool { return proto.Equal(x, y) })
}

// TestHistorySurvivesLosingAMember: three members, a path held by c0
// (owner) and c1. c0 goes for good, its data deleted: every member still
// answers every past result exactly, and c2, the path's new second
// holder, catches up. A new c0 with no data takes the path back and
// catches up too.
func TestHistorySurvivesLosingAMember(t *testing.T) {
	path := heldBy(t, []string{"c0", "c1", "c2"}, "c0", "c1")
	cfg := replicaConfig(t, path)
	dir0 := cfg.DataDir
	c0, a0, stop0 := startMember(t, cfg, "c0", "")
	cfg.DataDir = t.TempDir()
	c1, a1 := runMember(t, cfg, "c1", a0.Gossip)
	cfg.DataDir = t.TempDir()
	c2, a2 := runMember(t, cfg, "c2", a0.Gossip)
	waitMembers(t, 3, c0, c1, c2)
	want := pairEpochs(t, c0, path, 4)
	waitFor(t, "the replica's results", func() bool { return sameResults(c1.store, want) })
	if r, _ := c2.store.Result(path, 1); r != nil {
		t.Fatalf("c2, not a holder, stores %v", r)
	}

	stop0()
	if err := os.RemoveAll(dir0); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, 2, c1, c2)
	for _, a := range []Addrs{a1, a2} {
		q, _ := localQuery(t, a.GRPC)
		r, err := q.GetPathStats(context.Background(), &owlv1.GetPathStatsRequest{Path: path})
		if err != nil || !equalStats(r.GetStats(), want) || r.GetNote() != "" {
			t.Errorf("GetPathStats via %s without c0: %v, %v", a.GRPC, r, err)
		}
	}
	waitFor(t, "c2, the new second holder, to catch up", func() bool { return sameResults(c2.store, want) })

	cfg.DataDir = t.TempDir()
	c0, a0 = runMember(t, cfg, "c0", a1.Gossip)
	waitMembers(t, 3, c0, c1, c2)
	q, local := localQuery(t, a0.GRPC)
	waitFor(t, "the new c0 to catch up", func() bool {
		r, err := q.GetPathStats(local, &owlv1.GetPathStatsRequest{Path: path})
		return err == nil && equalStats(r.GetStats(), want)
	})
	// The count follows the store write.
	waitFor(t, "c0 to count what it caught up", func() bool { return testutil.ToFloat64(c0.m.caughtUp) >= float64(len(want)) })
	if len(flowsOf(t, c0.store, path)) != 2*len(want) {
		t.Errorf("c0 caught up %d per-flow results, want %d", len(flowsOf(t, c0.store, path)), 2*len(want))
	}
}

// TestReplicaPairsLoneSide: a lone side reached the owner, c0, which
// then goes for good; c1, its replica and now the owner, pairs the copy
// it kept with the other side when that comes.
func TestReplicaPairsLoneSide(t *testing.T) {
	path := heldBy(t, []string{"c0", "c1"}, "c0", "c1")
	cfg := replicaConfig(t, path)
	dir0 := cfg.DataDir
	c0, a0, stop0 := startMember(t, cfg, "c0", "")
	cfg.DataDir = t.TempDir()
	c1, _ := runMember(t, cfg, "c1", a0.Gossip)
	waitMembers(t, 2, c0, c1)
	up, down := ldaPair(t, cfg.Params.LDA, 100, 4321, 7)
	if err := c0.report("a", report(path, 5, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replica's copy of the lone side", func() bool { return len(replicaSides(t, c1.store)) == 1 })

	stop0()
	if err := os.RemoveAll(dir0); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, 1, c1)
	waitFor(t, "c1 to take the copy", func() bool { return len(replicaSides(t, c1.store)) == 0 })
	if err := c1.report("b", report(path, 5, owlv1.Role_ROLE_DOWNSTREAM, down)); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, c1, path, 5, anyResult)
	if r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || r.GetMeanNs() != 4321 {
		t.Errorf("result %v, want a mean of 4321 ns", r)
	}
	if n := testutil.ToFloat64(c1.m.promoted); n != 1 {
		t.Errorf("c1 counts %v sides taken from its copies, want 1", n)
	}
}

// TestTakePendingGivesReplicaCopy: a member asked for a side it does not
// hold in its table gives away its copy, once.
func TestTakePendingGivesReplicaCopy(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	up, _ := ldaPair(t, cfg.Params.LDA, 10, 1, 1)
	r := report("p", 3, owlv1.Role_ROLE_UPSTREAM, up)
	if _, err := c.storeCopies([]*owlv1.EpochCopy{sideCopy(store.Pending{Probe: "a", Received: time.Now(), Report: r})}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.takePending("p", 3, owlv1.Role_ROLE_DOWNSTREAM); err != nil || got.GetProbe() != "" {
		t.Fatalf("asked for the other side: %v, %v", got, err)
	}
	got, err := c.takePending("p", 3, owlv1.Role_ROLE_UPSTREAM)
	if err != nil || got.GetProbe() != "a" || !proto.Equal(got.GetReport(), r) {
		t.Fatalf("took %v, %v", got, err)
	}
	if got, err := c.takePending("p", 3, owlv1.Role_ROLE_UPSTREAM); err != nil || got.GetProbe() != "" {
		t.Errorf("took it again: %v, %v", got, err)
	}
}

// TestStoreCopies: a result missing a side never replaces a stored one;
// a copy whose parts name another epoch, or of a path not configured, is
// left out; an epoch done takes out the copies of its lone sides.
func TestStoreCopies(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	at := timestamppb.New(time.Unix(100, 0))
	ok := &owlv1.PathStats{Path: "p", Epoch: 1, Status: owlv1.ResultStatus_RESULT_STATUS_OK, MeanNs: 7, Computed: at}
	missing := &owlv1.PathStats{Path: "p", Epoch: 1, Status: owlv1.ResultStatus_RESULT_STATUS_MISSING_UPSTREAM, Computed: timestamppb.Now()}
	n, err := c.storeCopies([]*owlv1.EpochCopy{{Path: "p", Epoch: 1, Result: ok, Done: true}, {Path: "p", Epoch: 1, Result: missing}})
	if err != nil || n != 1 {
		t.Fatalf("stored %d results, %v; want 1", n, err)
	}
	if r, _ := c.store.Result("p", 1); !proto.Equal(r, ok) {
		t.Errorf("stored %v, want the complete result", r)
	}
	n, err = c.storeCopies([]*owlv1.EpochCopy{
		{Path: "p", Epoch: 2, Result: &owlv1.PathStats{Path: "p", Epoch: 3}},
		{Path: "nowhere", Epoch: 2, Result: &owlv1.PathStats{Path: "nowhere", Epoch: 2}},
		{Path: "p", Epoch: 2, Flows: []*owlv1.StoredFlow{{Stats: &owlv1.FlowStats{Path: "p", Epoch: 4}}}},
	})
	if r, _ := c.store.Result("p", 3); err != nil || n != 0 || r != nil || len(flowsOf(t, c.store, "p")) != 0 {
		t.Errorf("stored %d results (%v), epoch 3 %v, flows %v", n, err, r, flowsOf(t, c.store, "p"))
	}
	up, _ := ldaPair(t, cfg.Params.LDA, 10, 1, 1)
	side := sideCopy(store.Pending{Probe: "a", Received: time.Now(), Report: report("p", 5, owlv1.Role_ROLE_UPSTREAM, up)})
	if _, err := c.storeCopies([]*owlv1.EpochCopy{side, {Path: "p", Epoch: 5, Done: true}}); err != nil {
		t.Fatal(err)
	}
	if got := replicaSides(t, c.store); len(got) != 0 {
		t.Errorf("copies of sides of an epoch done: %v", got)
	}
	if _, err := c.storeCopies([]*owlv1.EpochCopy{side}); err != nil || len(replicaSides(t, c.store)) != 1 {
		t.Errorf("copies %v, %v", replicaSides(t, c.store), err)
	}
}

// TestCatchUpTakesNewerResult: the copy of a result that boundary
// matching changed on the owner did not reach the replica; catch-up
// finds that their results differ and fetches the newer one, and an
// older copy never replaces a newer result, on either member.
func TestCatchUpTakesNewerResult(t *testing.T) {
	path, c0, c1, want := replicatedEpochs(t, 3)

	old := want[1]
	newer := proto.CloneOf(old)
	newer.BoundaryMatched, newer.Lost, newer.Samples = 1, old.GetLost()-1, old.GetSamples()+1
	if err := c0.store.Apply(store.Write{Results: []*owlv1.PathStats{newer}}); err != nil {
		t.Fatal(err)
	}
	want[1] = newer
	c1.catchUp(context.Background())
	if !sameResults(c1.store, want) {
		r, _ := c1.store.Result(path, old.GetEpoch())
		t.Errorf("after catch-up the replica has %v, want %v", r, newer)
	}
	c0.catchUp(context.Background())
	if n, err := c1.storeCopies([]*owlv1.EpochCopy{{Path: path, Epoch: old.GetEpoch(), Result: old, Done: true}}); err != nil || n != 0 {
		t.Errorf("an older copy: %d results stored, %v", n, err)
	}
	for _, c := range []*Collector{c0, c1} {
		if !sameResults(c.store, want) {
			r, _ := c.store.Result(path, old.GetEpoch())
			t.Errorf("%s has %v, want %v", c.cl.Name(), r, newer)
		}
	}
}

// TestStoreCopiesReplaceMissing: a complete result replaces a stored one
// missing a side whatever their boundary matching.
func TestStoreCopiesReplaceMissing(t *testing.T) {
	c := newTest(t, testConfig(t))
	defer c.Close()
	missing := &owlv1.PathStats{Path: "p", Epoch: 1, Status: owlv1.ResultStatus_RESULT_STATUS_MISSING_UPSTREAM}
	ok := &owlv1.PathStats{Path: "p", Epoch: 1, Status: owlv1.ResultStatus_RESULT_STATUS_OK, MeanNs: 7, Reordered: 3}
	for _, r := range []*owlv1.PathStats{missing, ok} {
		if _, err := c.storeCopies([]*owlv1.EpochCopy{{Path: "p", Epoch: 1, Result: r}}); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := c.store.Result("p", 1); !proto.Equal(r, ok) {
		t.Errorf("stored %v, want %v", r, ok)
	}
}

// TestStoreCopiesPreferExact: of two complete results of an epoch, the
// one nearer to exact stays whichever comes first, also against a later
// estimate whose boundary matching went further; and a query across
// members shows it.
func TestStoreCopiesPreferExact(t *testing.T) {
	ok := owlv1.ResultStatus_RESULT_STATUS_OK
	exact := &owlv1.PathStats{Path: "p", Epoch: 1, Status: ok, Estimator: "rda", MeanNs: 7}
	for _, worse := range []*owlv1.PathStats{
		{Path: "p", Epoch: 1, Status: ok, Estimator: "lda", MeanNs: 9, BoundaryMatched: 2, Computed: timestamppb.Now()},
		{Path: "p", Epoch: 1, Status: ok, Estimator: "rda-unrepaired", MeanNs: 8, Computed: timestamppb.Now()},
		{Path: "p", Epoch: 1, Status: ok, Estimator: "rda-partial", MeanNs: 8},
	} {
		for _, order := range [][]*owlv1.PathStats{{exact, worse}, {worse, exact}} {
			c := newTest(t, testConfig(t))
			for _, r := range order {
				if _, err := c.storeCopies([]*owlv1.EpochCopy{{Path: "p", Epoch: 1, Result: r, Done: true}}); err != nil {
					t.Fatal(err)
				}
			}
			if r, _ := c.store.Result("p", 1); !proto.Equal(r, exact) {
				t.Errorf("%s then %s: stored %v", order[0].GetEstimator(), order[1].GetEstimator(), r)
			}
			c.Close()
		}
		if !better(exact, worse) || better(worse, exact) {
			t.Errorf("a query across members shows %s over rda", worse.GetEstimator())
		}
	}
}

// TestTimeOutKeepsCopiedResult: a lone side times out on a member that
// has meanwhile got the epoch's complete result as a copy (another member
// paired it): the complete result stays, and no missing-side result is
// published.
func TestTimeOutKeepsCopiedResult(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	now := epochTime(1000, 0)
	c.now = func() time.Time { return now }
	up, _ := ldaPair(t, cfg.Params.LDA, 100, 500, 2)
	if err := c.report("a", report("p", 3, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	ok := &owlv1.PathStats{Path: "p", Epoch: 3, Status: owlv1.ResultStatus_RESULT_STATUS_OK, MeanNs: 500}
	if _, err := c.storeCopies([]*owlv1.EpochCopy{{Path: "p", Epoch: 3, Result: ok, Done: true}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(cfg.PairTimeout)
	c.sweep()
	if r, _ := c.store.Result("p", 3); !proto.Equal(r, ok) {
		t.Errorf("after the timeout: %v, want the copied result", r)
	}
	if n := c.m.pathSeries.get("p", pmResultsMissingDown); n != 0 {
		t.Errorf("%v missing-side results counted", n)
	}
}

// TestReplicatorWaitsForRoom: a copy that finds the queue full waits for
// room and goes in once the sender takes a batch; one that finds none
// while the sender takes nothing for its stall time, or after the sender
// is gone, is dropped, counted, and not waited for; a nil replicator
// takes anything.
func TestReplicatorWaitsForRoom(t *testing.T) {
	m := newMetrics()
	r := newReplicator(m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.stall = 50 * time.Millisecond
	for e := range replicaQueueLen {
		r.enqueue(&owlv1.EpochCopy{Path: "p", Epoch: int64(e)})
	}
	start := time.Now()
	r.progress.Store(start.UnixNano()) // the sender delivered a batch just now
	dropped := r.enqueueWait(&owlv1.EpochCopy{Path: "p", Epoch: -1})
	if waited := time.Since(start); waited < r.stall {
		t.Errorf("a copy for a full queue dropped after %v, want a wait of %v first", waited, r.stall)
	}
	select {
	case <-dropped:
	default:
		t.Error("a copy dropped from a full queue is still waited for")
	}
	if n := testutil.ToFloat64(m.replicaDropped); n != 1 {
		t.Errorf("%v copies dropped, want 1", n)
	}

	r.stall = time.Minute
	r.progress.Store(time.Now().UnixNano())
	queued := make(chan (<-chan struct{}))
	go func() { queued <- r.enqueueWait(&owlv1.EpochCopy{Path: "p", Epoch: int64(replicaQueueLen)}) }()
	time.Sleep(20 * time.Millisecond) // the copy waits
	batch, ok := r.next(context.Background())
	if !ok || len(batch) != replicaBatchCopies || batch[0].ec.GetEpoch() != 0 {
		t.Errorf("first batch of %d from epoch %d, want %d from 0", len(batch), batch[0].ec.GetEpoch(), replicaBatchCopies)
	}
	select {
	case done := <-queued:
		select {
		case <-done:
			t.Error("a copy that waited for room was given up")
		default:
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a copy waiting for room did not go in once the sender took a batch")
	}
	if n := testutil.ToFloat64(m.replicaDropped); n != 1 {
		t.Errorf("%v copies dropped, want 1 still", n)
	}

	for e := range replicaBatchCopies - 1 { // the queue is full again
		r.enqueue(&owlv1.EpochCopy{Path: "p", Epoch: int64(replicaQueueLen + 1 + e)})
	}
	r.stop() // the sender is gone
	start = time.Now()
	r.enqueue(&owlv1.EpochCopy{Path: "p", Epoch: -2})
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("with the sender gone, a copy waited %v for room", waited)
	}
	if n := testutil.ToFloat64(m.replicaDropped); n != 2 {
		t.Errorf("%v copies dropped, want 2", n)
	}

	var none *replicator
	none.enqueue(&owlv1.EpochCopy{})
	none.enqueueWrite(store.Write{Results: []*owlv1.PathStats{{}}})
	select {
	case <-none.enqueueWait(&owlv1.EpochCopy{}):
	default:
		t.Error("without a cluster, a copy is waited for")
	}
}

// TestReplicatorStallsOnFailedSends: a batch taken after one a member
// did not take is not progress. A sender whose calls all fail still
// takes a batch each call's timeout; copies waiting for room behind it
// are dropped once it has delivered nothing for its stall time, instead
// of waiting for minutes. After a delivered batch, taking is progress.
func TestReplicatorStallsOnFailedSends(t *testing.T) {
	for _, delivered := range []bool{false, true} {
		r := newReplicator(newMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		r.stall = 200 * time.Millisecond
		for e := range replicaQueueLen {
			r.enqueue(&owlv1.EpochCopy{Path: "p", Epoch: int64(e)})
		}
		r.progress.Store(time.Now().Add(-time.Hour).UnixNano())
		r.sent(delivered) // how the batch before went
		if delivered {
			r.progress.Store(time.Now().Add(-time.Hour).UnixNano())
		}
		if _, ok := r.next(context.Background()); !ok {
			t.Fatal("no batch")
		}
		for e := range replicaBatchCopies { // full again
			r.enqueue(&owlv1.EpochCopy{Path: "p", Epoch: int64(replicaQueueLen + e)})
		}
		start := time.Now()
		r.enqueue(&owlv1.EpochCopy{Path: "p", Epoch: -1})
		waited := time.Since(start)
		if !delivered && waited >= r.stall {
			t.Errorf("after a failed send, a copy waited %v for room: a batch taken then counted as progress", waited)
		}
		if delivered && waited < r.stall {
			t.Errorf("after a delivered batch, a copy waited %v for room, want %v: a batch taken then is progress", waited, r.stall)
		}
	}
}

// TestReplicatorStopLeavesReportsUnacknowledged: a copy not sent because
// the member stops keeps its report unacknowledged (its done channel
// open), so that the probe sends the report to the path's next owner
// instead of letting go of what only the stopping member's disk holds:
// one that waited for room when the sender went, one queued after, and
// a batch whose send the stop cut short. A batch given up while the
// member runs (a member did not take it) is acknowledged, as before, and
// so is one delivered.
func TestReplicatorStopLeavesReportsUnacknowledged(t *testing.T) {
	open := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return false
		default:
			return true
		}
	}
	m := newMetrics()
	r := newReplicator(m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for e := range replicaQueueLen {
		r.enqueue(&owlv1.EpochCopy{Path: "p", Epoch: int64(e)})
	}
	waiting := make(chan (<-chan struct{}))
	go func() { waiting <- r.enqueueWait(&owlv1.EpochCopy{Path: "p", Epoch: -1}) }()
	time.Sleep(20 * time.Millisecond) // it waits for room
	r.stop()
	select {
	case done := <-waiting:
		if !open(done) {
			t.Error("a copy the stop left unsent was acknowledged")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("with the sender gone, a copy still waits for room")
	}
	if after := r.enqueueWait(&owlv1.EpochCopy{Path: "p", Epoch: -2}); !open(after) {
		t.Error("a copy queued after the stop was acknowledged")
	}
	if n := testutil.ToFloat64(m.replicaDropped); n != 2 {
		t.Errorf("%v copies dropped, want 2", n)
	}

	for _, tc := range []struct {
		delivered, stopping, acked bool
	}{
		{delivered: false, stopping: true, acked: false},
		{delivered: false, stopping: false, acked: true},
		{delivered: true, stopping: true, acked: true},
		{delivered: true, stopping: false, acked: true},
	} {
		r := newReplicator(newMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		batch := []queuedCopy{{ec: &owlv1.EpochCopy{Path: "p"}, done: make(chan struct{})}, {ec: &owlv1.EpochCopy{Path: "p", Epoch: 1}}}
		goOn := r.settle(batch, tc.delivered, tc.stopping)
		if acked := !open(batch[0].done); acked != tc.acked || goOn != tc.acked {
			t.Errorf("delivered %v, stopping %v: acknowledged %v, sender goes on %v; want %v", tc.delivered, tc.stopping, acked, goOn, tc.acked)
		}
	}
}

// TestChunks: copies are split into messages under the size bound, one
// too large for it alone.
func TestChunks(t *testing.T) {
	big := &owlv1.EpochCopy{Path: "p", Boundary: make([]byte, 1000)}
	small := &owlv1.EpochCopy{Path: "p", Boundary: make([]byte, 100)}
	got := chunks([]*owlv1.EpochCopy{small, small, small, big, small}, 300)
	var sizes []int
	for _, c := range got {
		sizes = append(sizes, len(c))
	}
	if !slices.Equal(sizes, []int{2, 1, 1, 1}) {
		t.Errorf("chunks of %v copies, want [2 1 1 1]", sizes)
	}
}

// TestAckAfterReplicaCopy: the owner acknowledges a probe's report only
// once the replica holds its copy, so that the owner's death right after
// the acknowledgement loses nothing the probe has let go of.
func TestAckAfterReplicaCopy(t *testing.T) {
	path := heldBy(t, []string{"c0", "c1"}, "c0", "c1")
	cfg := replicaConfig(t, path)
	c0, a0 := runMember(t, cfg, "c0", "")
	cfg.DataDir = t.TempDir()
	c1, _ := runMember(t, cfg, "c1", a0.Gossip)
	waitMembers(t, 2, c0, c1)
	st := probeStream(t, serve(t, c0), "a", cfg.Params)
	for e := int64(1); e <= 5; e++ {
		up, _ := flowReports(t, cfg, path, e)
		up.Seq = uint64(e)
		if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: up}}); err != nil {
			t.Fatal(err)
		}
		if a := nextAck(t, st); a.GetEpoch() != e {
			t.Fatalf("ack %v, want epoch %d", a, e)
		}
		if got := replicaSides(t, c1.store); len(got) != int(e) {
			t.Fatalf("acknowledged epoch %d while the replica held %v", e, got)
		}
	}
}

// TestExportSendsOnlyWhatDiffers: two members hold the same 5 epochs of a
// path (one block) but for epoch 3, which boundary matching changed on
// the owner. Catch-up's request names the epochs of that newest block
// one by one: Export sends epoch 3 alone, and, to a caller that names
// blocks only (a member before fine_from), the whole block.
func TestExportSendsOnlyWhatDiffers(t *testing.T) {
	path, c0, c1, want := replicatedEpochs(t, 5)
	newer := proto.CloneOf(want[2])
	newer.BoundaryMatched, newer.Lost, newer.Samples = 1, want[2].GetLost()-1, want[2].GetSamples()+1
	if err := c0.store.Apply(store.Write{Results: []*owlv1.PathStats{newer}}); err != nil {
		t.Fatal(err)
	}
	var owner cluster.Member
	for _, m := range c1.cl.Members() {
		if m.Name == "c0" {
			owner = m
		}
	}
	conn, err := c1.peers.get(owner.GRPC)
	if err != nil {
		t.Fatal(err)
	}
	req, err := c1.exportRequest(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.GetEpochs()) != 5 {
		t.Fatalf("the request names %d epochs one by one, want the 5 of the newest block", len(req.GetEpochs()))
	}
	exported := func(req *owlv1.ExportRequest) []int64 {
		stream, err := owlv1.NewClusterServiceClient(conn).Export(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for {
			ec, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ec.GetEpoch())
		}
	}
	if got := exported(req); !slices.Equal(got, []int64{3}) {
		t.Errorf("exported epochs %v, want [3]", got)
	}
	req.FineFrom, req.Epochs = 0, nil
	if got := exported(req); len(got) != 5 {
		t.Errorf("by blocks only: exported epochs %v, want all 5", got)
	}
	c1.catchUp(context.Background())
	if !sameResults(c1.store, append(want[:2:2], append([]*owlv1.PathStats{newer}, want[3:]...)...)) {
		r, _ := c1.store.Result(path, 3)
		t.Errorf("after catch-up the replica has %v for epoch 3, want %v", r, newer)
	}
}
