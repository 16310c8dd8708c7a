package collector

import (
	"testing"

	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
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
	ps.mu.Lock()
	stored := ps.sizesStored == ps.sizesVersion
	ps.mu.Unlock()
	if !stored {
		t.Fatal("the changed sizes were not stored with the epoch")
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
