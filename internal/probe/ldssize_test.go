package probe

import (
	"errors"
	"slices"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// TestLDSSizeFromNextEpoch: a path starts at the LDS size, LDA rows and
// sampling rate its assignment names; a new size or rate from the
// collector applies
// from the epoch it names (both sides change together), or, when that one
// is open already or none is named, from the next epoch the pipeline
// opens, never to one already open. An LDS turned off is not sent, and
// the top flows name their packets in the sample.
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
		Role: owlv1.Role_ROLE_UPSTREAM, RdaBuckets: 256, LdsCols: 256, LdaRows: 64}}})
	if err != nil {
		t.Fatal(err)
	}
	pl.setPaths(set)
	for e := first; e < first+6; e++ {
		link, frames, err := sim.Synthesize(sim.SynthConfig{Flows: 50, ParetoShape: 1.1, MaxPackets: 1000,
			Start: time.Unix(0, p.Epoch.StartNS(e)), Span: p.Epoch.Length / 2, Seed: uint64(e)})
		if err != nil {
			t.Fatal(err)
		}
		_ = pl.setLink(link)
		for i, f := range frames {
			pl.frame(f.Data, f.TimeNS)
			if i != len(frames)/2 {
				continue
			}
			var err error
			switch e { // mid-epoch
			case first + 1: // from an epoch ahead
				err = errors.Join(pl.setLDSShape("all", 1024, 0b1100, first+3), pl.setSampleShift("all", 2, first+3), pl.setLDARows("all", 32, first+3))
			case first + 3: // from one open: the next
				err = errors.Join(pl.setLDSShape("all", 512, 0, first+2), pl.setSampleShift("all", 3, first+2), pl.setLDARows("all", 128, first+2))
				pl.setLDSOff("all", true, first+5)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	pl.flush()
	if len(reports) != 6 {
		t.Fatalf("%d reports", len(reports))
	}
	for i, want := range []struct{ cols, rows, shift, ldaRows int }{{256, 4, 0, 64}, {256, 4, 0, 64}, {256, 4, 0, 64}, {1024, 2, 2, 32}, {512, 4, 3, 128}, {0, 0, 3, 128}} {
		if lc, err := lda.DecodeConfig(reports[i].GetLda()); err != nil || lc.Rows != want.ldaRows {
			t.Errorf("epoch %d: LDA of %d rows (%v), want %d", reports[i].GetEpoch(), lc.Rows, err, want.ldaRows)
		}
		s, err := sample.Decode(reports[i].GetSample())
		if err != nil || s.Config().Shift() != want.shift {
			t.Errorf("epoch %d: sample (%v) not at shift %d", reports[i].GetEpoch(), err, want.shift)
			continue
		}
		named := 0
		for _, tf := range reports[i].GetTopFlows() {
			pos, err := sample.Positions(tf.GetSamplePositions(), s.Len())
			if err != nil {
				t.Errorf("epoch %d: %v", reports[i].GetEpoch(), err)
			}
			named += len(pos)
		}
		if named == 0 || named > s.Len() {
			t.Errorf("epoch %d: the top flows name %d of the sample's %d packets", reports[i].GetEpoch(), named, s.Len())
		}
		if want.cols == 0 {
			if len(reports[i].GetLds()) != 0 {
				t.Errorf("epoch %d: an LDS turned off sent", reports[i].GetEpoch())
			}
			continue
		}
		cfg, err := lds.Check(reports[i].GetLds())
		if err != nil || cfg.Cols != want.cols || cfg.Rows != want.rows {
			t.Errorf("epoch %d: LDS of %d×%d cells (%v), want %d×%d", reports[i].GetEpoch(), cfg.Rows, cfg.Cols, err, want.rows, want.cols)
		}
		if want.rows == 2 && !slices.Equal(cfg.RowSampleLog2, []uint8{1, 0}) {
			t.Errorf("epoch %d: rows sampling 2^-%v, want the two densest", reports[i].GetEpoch(), cfg.RowSampleLog2)
		}
	}
	for _, cols := range []int{0, p.LDS.Cols * 2, p.LDS.K - 1} {
		if pl.setLDSShape("all", cols, 0, 0) == nil {
			t.Errorf("%d cells per row accepted", cols)
		}
	}
	if pl.setLDSShape("all", 512, 1<<p.LDS.Rows, 0) == nil {
		t.Errorf("row %d of %d accepted", p.LDS.Rows, p.LDS.Rows)
	}
	for _, rows := range []int{0, 33, 2 * p.LDA.Rows} {
		if pl.setLDARows("all", rows, 0) == nil {
			t.Errorf("%d LDA rows accepted", rows)
		}
	}
}
