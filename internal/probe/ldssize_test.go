package probe

import (
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lds"
)

// TestLDSSizeFromNextEpoch: a path starts at the LDS size its assignment
// names, and a new size from the collector applies from the next epoch
// the pipeline opens, never to one already open.
func TestLDSSizeFromNextEpoch(t *testing.T) {
	p := params.Default()
	first := int64(1_800_000_000)
	var reports []*owlv1.EpochReport
	clock := func(int64, int64) *owlv1.ClockStatus { return &owlv1.ClockStatus{} }
	rep := &reporter{caches: newCacheStore(4, 1<<20), topFlows: 5, clock: clock, grid: p.Epoch,
		emit: func(r *owlv1.EpochReport) { reports = append(reports, r) }}
	var stats counters
	pl, err := newPipeline(p, 1<<16, 5, rep.report, &stats)
	if err != nil {
		t.Fatal(err)
	}
	set, err := newPathSet(&owlv1.PathConfig{Paths: []*owlv1.PathAssignment{{Path: &owlv1.Path{Name: "all", Upstream: "a", Downstream: "b"},
		Role: owlv1.Role_ROLE_UPSTREAM, RdaBuckets: 256, LdsCols: 256}}})
	if err != nil {
		t.Fatal(err)
	}
	pl.setPaths(set)
	for e := first; e < first+3; e++ {
		link, frames, err := sim.Synthesize(sim.SynthConfig{Flows: 50, ParetoShape: 1.1, MaxPackets: 1000,
			Start: time.Unix(0, p.Epoch.StartNS(e)), Span: p.Epoch.Length / 2, Seed: uint64(e)})
		if err != nil {
			t.Fatal(err)
		}
		_ = pl.setLink(link)
		for i, f := range frames {
			pl.frame(f.Data, f.TimeNS)
			if e == first+1 && i == len(frames)/2 {
				// Mid-epoch: for the epochs opened from now on.
				if err := pl.setLDSCols("all", 1024); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	pl.flush()
	if len(reports) != 3 {
		t.Fatalf("%d reports", len(reports))
	}
	for i, want := range []int{256, 256, 1024} {
		cfg, err := lds.Check(reports[i].GetLds())
		if err != nil || cfg.Cols != want {
			t.Errorf("epoch %d: LDS of %d cells per row (%v), want %d", reports[i].GetEpoch(), cfg.Cols, err, want)
		}
	}
	for _, cols := range []int{0, p.LDS.Cols * 2, p.LDS.K - 1} {
		if pl.setLDSCols("all", cols) == nil {
			t.Errorf("%d cells per row accepted", cols)
		}
	}
}
