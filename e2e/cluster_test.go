package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/cluster"
	"github.com/owl-latency/owl/internal/sim"
)

// TestCluster runs three collectors as one cluster (memberlist gossip on
// loopback) with six paths between two probes, the probes configured with
// one collector only. Each path is paired by its owner and stored by its
// owner and its replica (the next by rendezvous hashing), by no third
// member; any collector answers for every path, every epoch against the
// ground truth. Then one collector leaves: its paths move to the others,
// every result is still answered, and the probes, run again, send those
// paths' reports to the new owners.
func TestCluster(t *testing.T) {
	env, out, truths := setupWith(t, lossOnly)
	names, paths := clusterPaths(6)
	var procs []*harness.Proc
	var addrs []harness.Addrs
	for i := range 3 {
		join := ""
		if i > 0 {
			join = ", join: [" + addrs[0].Gossip + "]"
		}
		cfg := collectorYAML(filepath.Join(env.Dir, fmt.Sprintf("data-c%d", i)), "127.0.0.1:0", paths) +
			fmt.Sprintf("cluster: {bind: 127.0.0.1:0, name: c%d%s}\n", i, join)
		p, a, err := env.StartCollector(fmt.Sprintf("c%d", i), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if a.Gossip == "" {
			t.Fatalf("c%d: no gossip address in %+v", i, a)
		}
		procs, addrs = append(procs, p), append(addrs, a)
	}
	logs := func() string {
		var b strings.Builder
		for _, p := range procs {
			fmt.Fprintf(&b, "--- %s\n%s\n", p.Name, tail(p.Log()))
		}
		return b.String()
	}
	qs := []owlv1.QueryServiceClient{query(t, addrs[0].GRPC), query(t, addrs[1].GRPC), query(t, addrs[2].GRPC)}

	owners := waitCluster(t, qs, 3, logs)
	byOwner := map[string][]string{}
	for _, n := range names {
		byOwner[owners[n]] = append(byOwner[owners[n]], n)
	}
	t.Logf("owners: %v", byOwner)
	if len(byOwner) < 2 {
		t.Fatalf("six paths, one owner: %v", byOwner)
	}

	runProbes(t, env, addrs[0].GRPC, out)
	for i, n := range names {
		// Any collector answers for any path (here each in turn).
		checkClusterPath(t, qs[i%3], n, truths, logs)
	}
	// Each path's results are on its owner and its replica (whose copies
	// come a moment after the owner's), then on no third member.
	local := metadata.AppendToOutgoingContext(context.Background(), "owl-forwarded-by", "test")
	members := []cluster.Member{{Name: "c0"}, {Name: "c1"}, {Name: "c2"}}
	for _, holder := range []bool{true, false} {
		for _, n := range names {
			holders := cluster.Holders(members, n, 2)
			if holders[0].Name != owners[n] {
				t.Fatalf("%s: owner %s, first holder %s", n, owners[n], holders[0].Name)
			}
			for i, q := range qs {
				name := fmt.Sprintf("c%d", i)
				if slices.ContainsFunc(holders, func(m cluster.Member) bool { return m.Name == name }) != holder {
					continue
				}
				want := 0
				if holder {
					want = len(truths)
				}
				if got := waitHeld(t, local, q, n, want); got != want {
					t.Errorf("%s holds %d results of %s (holders %s, %s), want %d", name, got, n, holders[0].Name, holders[1].Name, want)
				}
			}
		}
	}
	// Per-flow queries go to the owner; probes are merged.
	for _, n := range names {
		top, err := qs[0].TopFlows(context.Background(), &owlv1.TopFlowsRequest{Path: n, Limit: 3})
		if err != nil || len(top.GetFlows()) == 0 {
			t.Errorf("TopFlows %s via c0 (owner %s): %v, %v", n, owners[n], top, err)
		}
	}
	probes, err := qs[2].ListProbes(context.Background(), &owlv1.ListProbesRequest{})
	if err != nil || len(probes.GetProbes()) != 2 || probes.GetNote() != "" {
		t.Errorf("ListProbes: %v, %v", probes, err)
	}
	for _, p := range probes.GetProbes() {
		// Each probe sent every path's report once, through whichever
		// collector owned it (the sum over collectors).
		if p.GetReports() < uint64(len(names)*len(truths)) {
			t.Errorf("probe %s: %d reports over the cluster, want ≥ %d", p.GetProbeId(), p.GetReports(), len(names)*len(truths))
		}
	}

	// A collector other than the probes' leaves.
	gone := 1
	if len(byOwner["c1"]) == 0 {
		gone = 2
	}
	moved := byOwner[fmt.Sprintf("c%d", gone)]
	if len(moved) == 0 {
		t.Fatalf("neither c1 nor c2 owns a path: %v", byOwner)
	}
	if err := procs[gone].Signal(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("c%d: %v\n%s", gone, err, procs[gone].Log())
	}
	rest := []owlv1.QueryServiceClient{qs[0], qs[3-gone]}
	after := waitCluster(t, rest, 2, logs)
	for _, n := range names {
		if after[n] == fmt.Sprintf("c%d", gone) || !slices.Contains(moved, n) && after[n] != owners[n] {
			t.Errorf("%s: owner %s before c%d left, %s after", n, owners[n], gone, after[n])
		}
	}
	// Its results stay with the other holders of its paths (the moved
	// paths' new owners among them): every epoch is answered before the
	// probes send again.
	for _, n := range names {
		checkClusterPath(t, rest[1], n, truths, logs)
	}
	runProbes(t, env, addrs[0].GRPC, out)
	for _, n := range names {
		checkClusterPath(t, rest[1], n, truths, logs)
	}
	if m := httpGet(t, "http://"+addrs[0].HTTP+"/metrics"); !strings.Contains(m, "owl_collector_cluster_members 2") {
		t.Errorf("c0's metrics do not show 2 members")
	}
}

// waitHeld waits, up to 10 s, for a collector to hold want results of a
// path in its own store, and returns how many it holds.
func waitHeld(t *testing.T, local context.Context, q owlv1.QueryServiceClient, path string, want int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := q.GetPathStats(local, &owlv1.GetPathStatsRequest{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(r.GetStats()); n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterPaths names n paths from op-a to op-b and returns their names
// and the collector configuration's paths section.
func clusterPaths(n int) ([]string, string) {
	var names []string
	var paths strings.Builder
	for i := range n {
		name := fmt.Sprintf("path-%d", i)
		names = append(names, name)
		fmt.Fprintf(&paths, "  - name: %s\n    upstream: op-a\n    downstream: op-b\n", name)
	}
	return names, paths.String()
}

// waitCluster waits until every collector lists n members and they agree
// on the paths' owners; it returns path → owner name.
func waitCluster(t *testing.T, qs []owlv1.QueryServiceClient, n int, logs func() string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var views []map[string]string
		ok := true
		for _, q := range qs {
			r, err := q.ListCollectors(context.Background(), &owlv1.ListCollectorsRequest{})
			if err != nil || len(r.GetCollectors()) != n {
				ok = false
				break
			}
			v := map[string]string{}
			selves := 0
			for _, c := range r.GetCollectors() {
				for _, p := range c.GetPaths() {
					v[p] = c.GetName()
				}
				if c.GetSelf() {
					selves++
				}
			}
			if selves != 1 {
				t.Fatalf("ListCollectors marks %d members as self: %v", selves, r)
			}
			views = append(views, v)
		}
		if ok {
			same := true
			for _, v := range views[1:] {
				if fmt.Sprint(v) != fmt.Sprint(views[0]) {
					same = false
				}
			}
			if same {
				return views[0]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collectors do not agree on %d members\n%s", n, logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkClusterPath checks one path's results, asked of one collector,
// against the ground truth (loss only: RDA exact, loss exact but in the
// last epoch).
func checkClusterPath(t *testing.T, q owlv1.QueryServiceClient, path string, truths []sim.EpochTruth, logs func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stats, err := harness.WaitStats(ctx, q, path, len(truths))
	if err != nil {
		t.Fatalf("%s: %v\n%s", path, err, logs())
	}
	by := map[int64]*owlv1.PathStats{}
	for _, s := range stats {
		by[s.GetEpoch()] = s
	}
	last := truths[len(truths)-1].Epoch
	for _, tr := range truths {
		s := by[tr.Epoch]
		if s == nil || s.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
			t.Errorf("%s epoch %d: %v", path, tr.Epoch, s)
			continue
		}
		if rel := math.Abs(s.GetMeanNs()-tr.AllMeanNS) / tr.AllMeanNS; s.GetUnusableBuckets() == 0 && rel > 1e-9 || rel > 0.01 {
			t.Errorf("%s epoch %d: mean %.3f ns, truth %.3f ns", path, tr.Epoch, s.GetMeanNs(), tr.AllMeanNS)
		}
		if tr.Epoch != last && s.GetLost() != float64(tr.Lost) {
			t.Errorf("%s epoch %d: lost %.0f, truth %d", path, tr.Epoch, s.GetLost(), tr.Lost)
		}
	}
}

// TestClusterFailover kills a collector of two (SIGKILL, as a crash) while
// the probes replay the trace in real time: memberlist declares it dead,
// its paths move to the other, the probes send their unacknowledged
// reports there; restarted on its data, it takes its paths back, pairs
// the epochs whose sides went to different owners (taking the other side
// from the member that has it), and its earlier results are found again.
// Every epoch of every path is measured, exactly.
func TestClusterFailover(t *testing.T) {
	env, out, truths := setupWith(t, lossOnly)
	names, paths := clusterPaths(6)
	config := func(i int, bind, join string) string {
		if join != "" {
			join = ", join: [" + join + "]"
		}
		return collectorYAML(filepath.Join(env.Dir, fmt.Sprintf("data-c%d", i)), "127.0.0.1:0", paths) +
			fmt.Sprintf("cluster: {bind: %q, name: c%d%s}\n", bind, i, join)
	}
	c0, a0, err := env.StartCollector("c0", config(0, "127.0.0.1:0", ""))
	if err != nil {
		t.Fatal(err)
	}
	gossip1, err := cli.FreePort() // c1 comes back on it
	if err != nil {
		t.Fatal(err)
	}
	c1, a1, err := env.StartCollector("c1", config(1, gossip1, a0.Gossip))
	if err != nil {
		t.Fatal(err)
	}
	procs := []*harness.Proc{c0, c1}
	logs := func() string {
		var b strings.Builder
		for _, p := range procs {
			fmt.Fprintf(&b, "--- %s\n%s\n", p.Name, tail(p.Log()))
		}
		return b.String()
	}
	q0 := query(t, a0.GRPC)
	owners := waitCluster(t, []owlv1.QueryServiceClient{q0, query(t, a1.GRPC)}, 2, logs)
	var moved []string
	for _, n := range names {
		if owners[n] == "c1" {
			moved = append(moved, n)
		}
	}
	if len(moved) == 0 || len(moved) == len(names) {
		t.Fatalf("owners %v: want paths on both", owners)
	}

	// The probes replay the 5 s trace in real time; c1 crashes once it
	// has a result of its own.
	run := fmt.Sprintf("-%d", time.Now().UnixNano())
	var probes []*harness.Proc
	for _, p := range []struct{ id, file string }{{"op-a", out.Up}, {"op-b", out.Down}} {
		pr, err := env.Start(p.id+run, "probe", "-id", p.id, "-collector", a0.GRPC, "-file", p.file, "-replay-speed", "1", "-reconnect-max", "200ms",
			// Epochs c1 reconciled just before the crash are never
			// released by it.
			"-release-timeout", "15s")
		if err != nil {
			t.Fatal(err)
		}
		probes = append(probes, pr)
	}
	local := metadata.AppendToOutgoingContext(context.Background(), "owl-forwarded-by", "test")
	q1 := query(t, a1.GRPC)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := q1.GetPathStats(local, &owlv1.GetPathStatsRequest{Path: moved[0]})
		if err == nil && len(r.GetStats()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c1 has no result of %s: %v\n%s", moved[0], err, logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	c1.Kill()
	crash := time.Now()
	// c0 declares c1 dead (memberlist's failure detection) and takes its
	// paths; the probes send their unacknowledged reports there.
	deadline = time.Now().Add(30 * time.Second)
	for {
		r, err := q0.ListCollectors(context.Background(), &owlv1.ListCollectorsRequest{})
		if err == nil && len(r.GetCollectors()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c0 still lists %v (%v) 30 s after the crash\n%s", r, err, logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("c1 declared dead %v after the crash", time.Since(crash).Round(10*time.Millisecond))

	// c1 comes back on its data (same gossip address and name) while the
	// probes still run or wait for their last releases.
	c1b, a1b, err := env.StartCollector("c1-restarted", config(1, a1.Gossip, a0.Gossip))
	if err != nil {
		t.Fatal(err)
	}
	procs = append(procs, c1b)
	if again := waitCluster(t, []owlv1.QueryServiceClient{q0, query(t, a1b.GRPC)}, 2, logs); fmt.Sprint(again) != fmt.Sprint(owners) {
		t.Errorf("owners %v before the crash, %v after the restart", owners, again)
	}
	for _, p := range probes {
		if err := p.Wait(60 * time.Second); err != nil {
			t.Fatalf("%s: %v\n%s\n%s", p.Name, err, tail(p.Log()), logs())
		}
	}

	// Every epoch of every path is measured, and exact: an epoch whose
	// sides went to different owners is paired by the owner, which takes
	// the other side from the member that has it. One thing is not
	// carried across owners: packets crossing from an epoch reconciled
	// by one member into the next, reconciled by another, are not
	// matched; the earlier epoch counts them lost and measures without
	// them. That may happen at the crash and at the restart: at most two
	// epochs per moved path.
	last := truths[len(truths)-1].Epoch
	deadline = time.Now().Add(30 * time.Second)
	for _, n := range names {
		by := waitAnswered(q0, n, truths, deadline)
		unmatched := 0
		for _, tr := range truths {
			s := by[tr.Epoch]
			if s == nil || s.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
				t.Errorf("%s epoch %d: %v", n, tr.Epoch, s)
				continue
			}
			if slices.Contains(moved, n) && tr.Crossed > 0 && s.GetBoundaryMatched() == 0 && s.GetLost() == float64(tr.Lost+tr.Crossed) {
				// Its crossers went on to an epoch another member reconciled.
				unmatched++
				if rel := math.Abs(s.GetMeanNs()-tr.MeanNS) / tr.MeanNS; s.GetUnusableBuckets() == 0 && rel > 1e-9 || rel > 0.01 {
					t.Errorf("%s epoch %d (crossers unmatched): mean %.3f ns, truth of the packets delivered within it %.3f ns", n, tr.Epoch, s.GetMeanNs(), tr.MeanNS)
				}
				continue
			}
			if rel := math.Abs(s.GetMeanNs()-tr.AllMeanNS) / tr.AllMeanNS; s.GetUnusableBuckets() == 0 && rel > 1e-9 || rel > 0.01 {
				t.Errorf("%s epoch %d: mean %.3f ns, truth %.3f ns", n, tr.Epoch, s.GetMeanNs(), tr.AllMeanNS)
			}
			if tr.Epoch != last && s.GetLost() != float64(tr.Lost) {
				t.Errorf("%s epoch %d: lost %.0f, truth %d", n, tr.Epoch, s.GetLost(), tr.Lost)
			}
		}
		if unmatched > 0 {
			t.Logf("%s: %d epochs with their crossers unmatched", n, unmatched)
		}
		if unmatched > 2 {
			t.Errorf("%s: %d epochs with their crossers unmatched, want at most 2 (the crash and the restart)", n, unmatched)
		}
	}
	if t.Failed() {
		t.Log(logs())
	}
	for _, a := range []harness.Addrs{a0, a1b} {
		m := httpGet(t, "http://"+a.HTTP+"/metrics")
		for _, l := range strings.Split(m, "\n") {
			if strings.HasPrefix(l, "owl_collector_sides_handed_over_total ") {
				t.Logf("%s: %s", a.GRPC, l)
			}
		}
	}
}
