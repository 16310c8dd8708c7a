package collector

import (
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/cluster"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/reconcile"
)

// assignedSizes is what a connecting probe a is told of path p's sizes.
func assignedSizes(t *testing.T, c *Collector) *owlv1.PathAssignment {
	t.Helper()
	for _, a := range c.pathConfig("a").GetPaths() {
		if a.GetPath().GetName() == "p" {
			return &owlv1.PathAssignment{RdaBuckets: a.GetRdaBuckets(), SampleShift: a.GetSampleShift(), LdsCols: a.GetLdsCols(),
				LdsRows: a.GetLdsRows(), LdsOff: a.GetLdsOff(), LdaRows: a.GetLdaRows()}
		}
	}
	t.Fatal("path p not assigned to probe a")
	return nil
}

// A path's sizes (here its RDA grown for a large set difference and its
// sampling rate set from a busy epoch) are stored with the epoch that
// follows the change, and a collector restarted on the same data tells
// a connecting probe those sizes rather than its defaults; restarted
// with other sizing settings, the defaults.
func TestSizesSurviveRestart(t *testing.T) {
	cfg := testConfig(t)
	cfg.Params.RDA.Buckets = 256
	c := newTest(t, cfg)
	defaults := assignedSizes(t, c)
	ps := c.paths["p"]
	c.worker.noteSetDifference(ps, reconcile.Difference{Lost: make([]uint64, 400)})
	up, down := ldaPair(t, cfg.Params.LDA, 500, 777, 3)
	for _, r := range []*owlv1.EpochReport{report("p", 7, owlv1.Role_ROLE_UPSTREAM, up), report("p", 7, owlv1.Role_ROLE_DOWNSTREAM, down)} {
		r.Counters.Packets = 100_000
		probe := "a"
		if r.Role == owlv1.Role_ROLE_DOWNSTREAM {
			probe = "b"
		}
		if err := c.report(probe, r); err != nil {
			t.Fatal(err)
		}
	}
	waitResult(t, c, "p", 7, anyResult)
	resized := assignedSizes(t, c)
	if resized.GetRdaBuckets() != 1000 || resized.GetSampleShift() == 0 {
		t.Fatalf("sizes after the changes: %v (want 1000 buckets and a sampling shift)", resized)
	}
	// Noted as stored once the store's write returns, just after the
	// result can be read.
	waitFor(t, "the changed sizes to be noted stored with the epoch", func() bool {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		return ps.sizesStored == ps.sizesVersion
	})
	if got := storedSizes(t, c, "p"); !proto.Equal(got, resized) {
		t.Fatalf("stored sizes %v, want %v", got, resized)
	}
	c.Close()

	c2 := newTest(t, cfg)
	if got := assignedSizes(t, c2); !proto.Equal(got, resized) {
		t.Errorf("after a restart: %v, want %v", got, resized)
	}
	c2.Close()

	other := cfg
	other.RDA.MinBuckets = 32
	c3 := newTest(t, other)
	defer c3.Close()
	if got := assignedSizes(t, c3); !proto.Equal(got, defaults) {
		t.Errorf("restarted with another rda.min_buckets: %v, want the defaults %v", got, defaults)
	}
}

// Stored sizes this configuration cannot use are not taken.
func TestCheckSizes(t *testing.T) {
	cfg := testConfig(t)
	good := &owlv1.PathAssignment{RdaBuckets: 64, LdaRows: 32, LdsCols: 16, LdsRows: 1, SampleShift: 3}
	if err := cfg.checkSizes(good); err != nil {
		t.Fatalf("good sizes: %v", err)
	}
	for name, change := range map[string]func(*owlv1.PathAssignment){
		"no buckets":       func(a *owlv1.PathAssignment) { a.RdaBuckets = 0 },
		"too many buckets": func(a *owlv1.PathAssignment) { a.RdaBuckets = 1 << 30 },
		"too many rows":    func(a *owlv1.PathAssignment) { a.LdaRows = uint32(cfg.Params.LDA.Rows) + 1 },
		"too many cells":   func(a *owlv1.PathAssignment) { a.LdsCols = uint32(cfg.Params.LDS.Cols) * 2 },
		"unknown LDS row":  func(a *owlv1.PathAssignment) { a.LdsRows = 1 << cfg.Params.LDS.Rows },
		"shift":            func(a *owlv1.PathAssignment) { a.SampleShift = 99 },
	} {
		a := proto.CloneOf(good)
		change(a)
		if err := cfg.checkSizes(a); err == nil {
			t.Errorf("%s: %v taken", name, a)
		}
	}
}

// sizesOf is the path's sizes as c holds them.
func sizesOf(c *Collector, path string) *owlv1.PathAssignment {
	ps := c.paths[path]
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.sizes()
}

// storedSizes is the path's sizes in c's store (nil: none).
func storedSizes(t *testing.T, c *Collector, path string) *owlv1.PathAssignment {
	t.Helper()
	all, _, err := c.store.AllPathSizes()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Path == path {
			return s.Sizes
		}
	}
	return nil
}

// A path's sizes go to its replica with the copy of the epoch that
// changed them; the replica, once the owner is gone for good, tells the
// probes those sizes, and a member that then becomes the path's replica
// gets them with what it catches up.
func TestReplicaTakesOverSizes(t *testing.T) {
	path := heldBy(t, []string{"c0", "c1", "c2"}, "c0", "c1")
	cfg := replicaConfig(t, path)
	cfg.Params.RDA.Buckets = 256
	dir0 := cfg.DataDir
	c0, a0, stop0 := startMember(t, cfg, "c0", "")
	cfg.DataDir = t.TempDir()
	c1, a1 := runMember(t, cfg, "c1", a0.Gossip)
	waitMembers(t, 2, c0, c1)
	// Probe a connects to both: only the owner's assignment gives sizes.
	if a := assignmentOf(t, c1, "a", path); !a.GetNotOwner() {
		t.Errorf("c1, not the owner, gives probe a sizes: %v", a)
	}
	if a := assignmentOf(t, c0, "a", path); a.GetNotOwner() {
		t.Errorf("c0, the owner, says it is not: %v", a)
	}
	defaults := sizesOf(c1, path)
	c0.worker.noteSetDifference(c0.paths[path], reconcile.Difference{Lost: make([]uint64, 400)})
	want := pairEpochs(t, c0, path, 1)
	owners := sizesOf(c0, path)
	if proto.Equal(owners, defaults) {
		t.Fatalf("the owner's sizes did not change: %v", owners)
	}
	waitFor(t, "the replica's result", func() bool { return sameResults(c1.store, want) })
	if got := storedSizes(t, c1, path); !proto.Equal(got, owners) {
		t.Errorf("the replica stored sizes %v, want the owner's %v", got, owners)
	}
	// Taken right after the copy is stored.
	waitFor(t, "the replica to hold the owner's sizes", func() bool { return proto.Equal(sizesOf(c1, path), owners) })

	stop0()
	if err := os.RemoveAll(dir0); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, 1, c1)
	if a := assignmentOf(t, c1, "a", path); a.GetNotOwner() || a.GetRdaBuckets() != owners.GetRdaBuckets() {
		t.Errorf("the new owner tells probe a %d RDA buckets (not_owner %t), want the old owner's %d", a.GetRdaBuckets(), a.GetNotOwner(), owners.GetRdaBuckets())
	}

	cfg.DataDir = t.TempDir()
	c2, _ := runMember(t, cfg, "c2", a1.Gossip)
	waitMembers(t, 2, c1, c2)
	// The sizes come with the results it catches up, and are taken once
	// they are stored.
	waitFor(t, "c2, the new replica, to catch up", func() bool { return sameResults(c2.store, want) })
	waitFor(t, "c2 to hold the owner's sizes", func() bool { return proto.Equal(sizesOf(c2, path), owners) })
}

// A copy's sizes are stored where they were chosen under this member's
// setting and fit its configuration; sizes under another setting are
// left out, and a copy whose sizes do not fit is left out whole. The
// owner's own sizes are not changed by a copy.
func TestStoreCopiesSizes(t *testing.T) {
	c := newTest(t, testConfig(t))
	defer c.Close()
	result := func(e int64) *owlv1.PathStats {
		return &owlv1.PathStats{Path: "p", Epoch: e, Status: owlv1.ResultStatus_RESULT_STATUS_OK, MeanNs: 7}
	}
	good := &owlv1.PathAssignment{RdaBuckets: 64, LdaRows: 32, LdsCols: 16, SampleShift: 2}
	bad := &owlv1.PathAssignment{RdaBuckets: 0, LdaRows: 32, LdsCols: 16}
	mine, other := c.worker.sizesSetting, c.worker.sizesSetting+1
	held := sizesOf(c, "p")
	n, err := c.storeCopies([]*owlv1.EpochCopy{
		{Path: "p", Epoch: 1, Result: result(1), Done: true, Sizes: bad, SizesSetting: mine},
		{Path: "p", Epoch: 2, Result: result(2), Done: true, Sizes: good, SizesSetting: other},
	})
	if err != nil || n != 1 {
		t.Fatalf("stored %d results (%v), want the second's only", n, err)
	}
	if r, _ := c.store.Result("p", 1); r != nil {
		t.Errorf("the copy with sizes out of range was stored: %v", r)
	}
	if got := storedSizes(t, c, "p"); got != nil {
		t.Errorf("sizes stored from a copy under another setting: %v", got)
	}
	if _, err := c.storeCopies([]*owlv1.EpochCopy{{Path: "p", Epoch: 3, Result: result(3), Done: true, Sizes: good, SizesSetting: mine}}); err != nil {
		t.Fatal(err)
	}
	if got := storedSizes(t, c, "p"); !proto.Equal(got, good) {
		t.Errorf("stored sizes %v, want %v", got, good)
	}
	if got := sizesOf(c, "p"); !proto.Equal(got, held) {
		t.Errorf("the owner's sizes became %v, want its own %v", got, held)
	}
}

// assignmentOf is the assignment of path in the configuration c sends
// probe.
func assignmentOf(t *testing.T, c *Collector, probe, path string) *owlv1.PathAssignment {
	t.Helper()
	for _, a := range c.pathConfig(probe).GetPaths() {
		if a.GetPath().GetName() == path {
			return a
		}
	}
	t.Fatalf("%s gives probe %s no path %s", c.cfg.Cluster.Name, probe, path)
	return nil
}

// A member that joins with an empty data directory and takes a path over
// asks the path's owner until then for its sizes before it gives any
// probe its configuration: the probes are told those, not the defaults.
func TestNewOwnerTakesSizes(t *testing.T) {
	path := heldBy(t, []string{"c0", "c1"}, "c1", "c0")
	cfg := replicaConfig(t, path)
	cfg.Params.RDA.Buckets = 256
	c0, a0 := runMember(t, cfg, "c0", "")
	defaults := sizesOf(c0, path)
	c0.worker.noteSetDifference(c0.paths[path], reconcile.Difference{Lost: make([]uint64, 400)})
	pairEpochs(t, c0, path, 1)
	chosen := sizesOf(c0, path)
	if proto.Equal(chosen, defaults) {
		t.Fatalf("c0's sizes did not change: %v", chosen)
	}

	cfg.DataDir = t.TempDir()
	c1, _ := runMember(t, cfg, "c1", a0.Gossip)
	// No wait: the sizes are taken before c1 serves.
	if got := sizesOf(c1, path); !proto.Equal(got, chosen) {
		t.Errorf("c1, the new owner, holds sizes %v, want c0's %v", got, chosen)
	}
	if a := assignmentOf(t, c1, "a", path); a.GetNotOwner() || a.GetRdaBuckets() != chosen.GetRdaBuckets() {
		t.Errorf("c1 tells probe a %d RDA buckets (not_owner %t), want c0's %d", a.GetRdaBuckets(), a.GetNotOwner(), chosen.GetRdaBuckets())
	}
	c1.paths[path].mu.Lock()
	version := c1.paths[path].sizesVersion
	c1.paths[path].mu.Unlock()
	if version == 0 {
		t.Error("c1 took the sizes without noting them to store and copy")
	}
}

// Sizes answers with the sizes of the named paths the member holds any
// of, once each; adoptSizes takes sizes only for a path that holds none;
// of several members' sizes, those of the member ranked highest for the
// path are taken.
func TestSizesHeld(t *testing.T) {
	cfg := testConfig(t)
	cfg.Paths = append(cfg.Paths, netpath.Path{Name: "q", Upstream: "a", Downstream: "b"})
	c := newTest(t, cfg)
	defer c.Close()
	good := &owlv1.PathAssignment{RdaBuckets: 64, LdaRows: 32, LdsCols: 16, SampleShift: 2}
	c.paths["p"].setSizes(good)
	resp, err := clusterService{c: c}.Sizes(t.Context(), &owlv1.SizesRequest{Paths: []string{"p", "q", "nowhere", "p"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []*owlv1.HeldSizes{{Path: "p", Sizes: good, Setting: c.worker.sizesSetting}}
	if len(resp.GetPaths()) != 1 || !proto.Equal(resp.GetPaths()[0], want[0]) {
		t.Errorf("Sizes gave %v, want %v", resp.GetPaths(), want)
	}

	if c.paths["p"].adoptSizes(&owlv1.PathAssignment{RdaBuckets: 32, LdaRows: 16, LdsCols: 8}) {
		t.Error("p, holding sizes, adopted others")
	}
	if !c.paths["q"].adoptSizes(good) || !proto.Equal(sizesOf(c, "q"), good) {
		t.Errorf("q, holding none, has %v, want %v", sizesOf(c, "q"), good)
	}

	path := heldBy(t, []string{"c0", "c1", "c2"}, "c1", "c0", "c2")
	members := []cluster.Member{{Name: "c0"}, {Name: "c1", Self: true}, {Name: "c2"}}
	fromC0 := &owlv1.HeldSizes{Path: path, Sizes: good}
	held := map[string]map[string]*owlv1.HeldSizes{"c0": {path: fromC0}, "c2": {path: {Path: path}}}
	if got := highestHeld(members, path, held); got != fromC0 {
		t.Errorf("took %v, want c0's %v", got, fromC0)
	}
	if got := highestHeld(members, path, map[string]map[string]*owlv1.HeldSizes{"c0": {}}); got != nil {
		t.Errorf("took %v from no member that holds any", got)
	}
}
