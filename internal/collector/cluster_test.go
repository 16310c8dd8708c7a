package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/cluster"
	"github.com/owl-latency/owl/internal/netpath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

func TestMergeResults(t *testing.T) {
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(time.Unix(int64(s), 0)) }
	ok := owlv1.ResultStatus_RESULT_STATUS_OK
	missing := owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM
	// Epoch 1: the old owner's complete result beats the new owner's
	// later one that misses a side. Epoch 2: of two complete, the newer.
	a := []*owlv1.PathStats{{Epoch: 1, Status: ok, Computed: at(10), MeanNs: 1}, {Epoch: 2, Status: ok, Computed: at(10), MeanNs: 2}}
	b := []*owlv1.PathStats{{Epoch: 1, Status: missing, Computed: at(20)}, {Epoch: 2, Status: ok, Computed: at(20), MeanNs: 3}, {Epoch: 3, Status: ok, MeanNs: 4}}
	got := mergeResults([][]*owlv1.PathStats{b, a}, 10)
	if len(got) != 3 || got[0].GetMeanNs() != 1 || got[1].GetMeanNs() != 3 || got[2].GetEpoch() != 3 {
		t.Fatalf("merged %v", got)
	}
	if got := mergeResults([][]*owlv1.PathStats{a, b}, 2); len(got) != 2 || got[0].GetEpoch() != 2 {
		t.Errorf("limit 2 keeps %v, want the newest two epochs", got)
	}
	// Epoch 4, computed once: the copy after boundary matching beats the
	// one before, whichever list it is in and whatever its time.
	stale := &owlv1.PathStats{Epoch: 4, Status: ok, Computed: at(30), Lost: 2, Reordered: 1}
	matched := &owlv1.PathStats{Epoch: 4, Status: ok, Computed: at(30), Lost: 1, BoundaryMatched: 1, Reordered: 1}
	fewerReordered := &owlv1.PathStats{Epoch: 4, Status: ok, Computed: at(20), Lost: 1, BoundaryMatched: 1}
	for _, lists := range [][][]*owlv1.PathStats{{{stale}, {matched}}, {{matched}, {stale}}} {
		if got := mergeResults(lists, 1); len(got) != 1 || got[0] != matched {
			t.Errorf("merged %v, want %v", got, matched)
		}
	}
	if got := mergeResults([][]*owlv1.PathStats{{matched}, {fewerReordered}}, 1); len(got) != 1 || got[0] != fewerReordered {
		t.Errorf("merged %v, want %v", got, fewerReordered)
	}
}

func TestMergeProbes(t *testing.T) {
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(time.Unix(int64(s), 0)) }
	got := mergeProbes([][]*owlv1.ProbeInfo{
		{{ProbeId: "a", Connected: true, Version: "old", LastSeen: at(1), Reports: 5}},
		{{ProbeId: "a", Version: "new", LastSeen: at(2), Reports: 7}, {ProbeId: "b"}},
	})
	if len(got) != 2 || got[0].GetProbeId() != "a" || !got[0].GetConnected() || got[0].GetVersion() != "new" || got[0].GetReports() != 12 {
		t.Errorf("merged %v", got)
	}
}

// runMember runs a collector as a member of a cluster until the test ends
// and returns it with its addresses.
func runMember(t *testing.T, cfg Config, name, join string) (*Collector, Addrs) {
	t.Helper()
	c, a, _ := startMember(t, cfg, name, join)
	return c, a
}

// startMember is runMember that also returns a function that stops the
// member (it leaves the cluster) and waits for it.
func startMember(t *testing.T, cfg Config, name, join string) (*Collector, Addrs, func()) {
	t.Helper()
	cfg.Cluster = cluster.Config{Bind: "127.0.0.1:0", Name: name, JoinTimeout: 10 * time.Second}
	if join != "" {
		cfg.Cluster.Join = []string{join}
	}
	cfg.ReadyFile = filepath.Join(t.TempDir(), "ready")
	c, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(cfg.ReadyFile); err == nil {
			var a Addrs
			if err := json.Unmarshal(b, &a); err != nil {
				t.Fatal(err)
			}
			return c, a, stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHandOverAfterJoin: a path's upstream report of an epoch reaches its
// owner c0; a third member joins and takes the path, and the downstream
// report goes there. At the pair timeout the new owner takes the upstream
// side from c0 and measures the epoch, instead of two results that each
// miss a side.
func TestHandOverAfterJoin(t *testing.T) {
	two := []cluster.Member{{Name: "c0"}, {Name: "c1"}}
	three := append(two, cluster.Member{Name: "c2"})
	path := ""
	for i := range 1000 {
		p := fmt.Sprintf("p%d", i)
		if cluster.Owner(two, p).Name == "c0" && cluster.Owner(three, p).Name == "c2" {
			path = p
			break
		}
	}
	cfg := testConfig(t)
	cfg.Paths = []netpath.Path{{Name: path, Upstream: "a", Downstream: "b"}}
	member := func(name, join string) (*Collector, Addrs) {
		mc := cfg
		mc.DataDir = t.TempDir()
		return runMember(t, mc, name, join)
	}
	c0, a0 := member("c0", "")
	c1, _ := member("c1", a0.Gossip)
	waitMembers := func(n int, cs ...*Collector) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for _, c := range cs {
			for len(c.members()) != n {
				if time.Now().After(deadline) {
					t.Fatalf("%s sees %v", c.cl.Name(), c.members())
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	waitMembers(2, c0, c1)
	up, down := ldaPair(t, cfg.Params.LDA, 100, 77, 3)
	if err := c0.report("a", report(path, 1, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	c2, _ := member("c2", a0.Gossip)
	waitMembers(3, c0, c1, c2)
	if err := c2.report("b", report(path, 1, owlv1.Role_ROLE_DOWNSTREAM, down)); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, c2, path, 1, func(r *owlv1.PathStats) bool { return r.GetStatus() == owlv1.ResultStatus_RESULT_STATUS_OK })
	if r.GetMeanNs() != 77 {
		t.Errorf("result %v, want a mean of 77 ns", r)
	}
	c0.paths[path].mu.Lock()
	left := c0.paths[path].pending[1]
	c0.paths[path].mu.Unlock()
	if left != nil {
		t.Errorf("c0 still holds the side it handed over: %+v", left)
	}
}

// TestWatchFollowsMembers: a watch opened on one member gets the results
// of a member that joined after it was opened, and, once that member has
// left and come back on another gRPC address, its results again: the
// watch follows the members. (It watched the members of its start only,
// and missed every result of a member that joined or restarted later.)
// Results the member computed before the watch reached it come too: the
// watch asks for those computed since it was listed, or since its last
// watch ended.
func TestWatchFollowsMembers(t *testing.T) {
	defer func(d time.Duration) { watchFollow = d }(watchFollow)
	watchFollow = 500 * time.Millisecond
	path := heldBy(t, []string{"c0", "c1"}, "c1")
	cfg := replicaConfig(t, path)
	c0, a0 := runMember(t, cfg, "c0", "")
	watch := watchOn(t, a0.GRPC, &owlv1.WatchPathStatsRequest{Path: path})
	waitFor(t, "the watch to open on c0", func() bool { return c0.watchers.watched(path) })

	for i, epochs := range []int{1, 2} { // c1 joins; c1 comes back
		cfg.DataDir = t.TempDir()
		c1, _, stop := startMember(t, cfg, "c1", a0.Gossip)
		waitMembers(t, 2, c0, c1)
		// Computed before c0's watch reaches c1 (mostly: c0 looks every
		// half second), and relayed all the same (since).
		pairEpochs(t, c1, path, epochs)
		t.Logf("round %d: c0's watch had reached c1 when its epochs were computed: %t", i, c1.watchers.watched(path))
		watchUntil(t, watch, fmt.Sprintf("c1's epoch %d through the watch on c0 (round %d)", epochs, i), func(got map[int64]*owlv1.PathStats) bool {
			return got[int64(epochs)] != nil
		})
		stop()
		waitMembers(t, 1, c0)
	}
}

// TestWatchSince: a watch with since gets first the stored results
// computed since then, of the member it is opened on (c0 holds copies, as
// the path's replica) and of the others (c1, the owner), each once, and
// not those computed before; then the new ones.
func TestWatchSince(t *testing.T) {
	path := heldBy(t, []string{"c0", "c1"}, "c1", "c0")
	cfg := replicaConfig(t, path)
	c0, a0 := runMember(t, cfg, "c0", "")
	cfg.DataDir = t.TempDir()
	c1, _ := runMember(t, cfg, "c1", a0.Gossip)
	waitMembers(t, 2, c0, c1)
	older := pairEpochs(t, c1, path, 2)
	since := time.Now()
	time.Sleep(10 * time.Millisecond)
	sendEpoch(t, c1, path, 3)
	third := waitResult(t, c1, path, 3, anyResult)
	waitFor(t, "c0's copies", func() bool { return sameResults(c0.store, append(older, third)) })

	bad := watchOn(t, a0.GRPC, &owlv1.WatchPathStatsRequest{Since: &timestamppb.Timestamp{Nanos: -1}})
	if _, err := bad.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a watch since an invalid time: %v, want InvalidArgument", err)
	}
	watch := watchOn(t, a0.GRPC, &owlv1.WatchPathStatsRequest{Path: path, Since: timestamppb.New(since)})
	var got []int64
	for len(got) == 0 || got[len(got)-1] != 4 {
		r, err := watch.Recv()
		if err != nil {
			t.Fatalf("watching: %v (got epochs %v)", err, got)
		}
		got = append(got, r.GetEpoch())
		if r.GetEpoch() == 3 && slices.Contains(got[:len(got)-1], 3) {
			t.Errorf("epoch 3 came twice: %v", got)
		}
		if len(got) == 1 {
			waitFor(t, "c0's watch to reach c1", func() bool { return c1.watchers.watched(path) })
			sendEpoch(t, c1, path, 4)
		}
	}
	if got[0] != 3 || slices.Contains(got, 1) || slices.Contains(got, 2) {
		t.Errorf("watch since epoch 3's computation gave epochs %v, want 3 first, then 4, and neither 1 nor 2", got)
	}
}

// watchOn opens a watch on the collector at addr, for the test's length.
func watchOn(t *testing.T, addr string, req *owlv1.WatchPathStatsRequest) owlv1.QueryService_WatchPathStatsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	watch, err := owlv1.NewQueryServiceClient(conn).WatchPathStats(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return watch
}
