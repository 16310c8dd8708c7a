package probe

import (
	"bytes"
	"context"
	"testing"

	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/synopsis/exact"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// TestExactListRebuildsSynopses: a quiet path's report carries the exact
// list in place of its synopses, and the synopses the collector rebuilds
// from it are, byte for byte, those the probe sends without lists; a busy
// path's report keeps its synopses (at 1,000 packets an epoch already:
// a list of 16 KB against 11 KB of synopses sized to the traffic).
func TestExactListRebuildsSynopses(t *testing.T) {
	prm := params.Default()
	for _, rate := range []int{100, 150} {
		// With an LDS (flows.lds: always), to rebuild it too.
		with, n := oneEpochReports(t, rate, true, lds.Wire{DigestBytes: 4, Packed: true}, 2, false)
		without, _ := oneEpochReports(t, rate, false, lds.Wire{DigestBytes: 4, Packed: true}, 2, false)
		if len(with) != 1 || len(without) != 1 {
			t.Fatalf("%d and %d reports", len(with), len(without))
		}
		w, wo := with[0], without[0]
		if len(w.GetList()) == 0 || len(w.GetLda())+len(w.GetRda())+len(w.GetLds())+len(w.GetSample()) > 0 {
			t.Fatalf("%d packets: the report carries list %d B, lda %d, rda %d, lds %d, sample %d", n,
				len(w.GetList()), len(w.GetLda()), len(w.GetRda()), len(w.GetLds()), len(w.GetSample()))
		}
		synopses := len(wo.GetLda()) + len(wo.GetRda()) + len(wo.GetLds()) + len(wo.GetSample())
		if len(w.GetList()) >= synopses {
			t.Errorf("%d packets: list of %d bytes sent for %d bytes of synopses", n, len(w.GetList()), synopses)
		}
		l, err := exact.Decode(w.GetList())
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Packets) != n {
			t.Errorf("list of %d packets, %d sent", len(l.Packets), n)
		}
		// At the rows the path's LDA has (the collector's size for it).
		lc, err := lda.DecodeConfig(wo.GetLda())
		if err != nil {
			t.Fatal(err)
		}
		la, _ := lda.New(lc)
		// At the shape the path's LDS has (the collector's size for it).
		shape, err := lds.Check(wo.GetLds())
		if err != nil {
			t.Fatal(err)
		}
		ls, _ := lds.New(shape)
		sent, _ := lds.Decode(wo.GetLds())
		_ = ls.SetWire(sent.Wire())
		loc := reconcile.Local{RDA: prm.RDA}
		for _, p := range l.Packets {
			la.Insert(p.ID, p.OffsetNS)
			ls.Insert(p.Flow, p.ID, p.OffsetNS, p.Weight)
			loc.Packets[0] = append(loc.Packets[0], reconcile.Packet{ID: p.ID, Entry: reconcile.Entry{OffsetNS: p.OffsetNS}})
		}
		wantRDA, _ := rda.Decode(wo.GetRda())
		ra, _ := loc.Rebuild(context.Background(), reconcile.Upstream, wantRDA.Config().Buckets)
		lb, _ := la.MarshalBinary()
		sb, _ := ls.MarshalBinary()
		rb, _ := ra.MarshalBinary()
		if !bytes.Equal(lb, wo.GetLda()) || !bytes.Equal(sb, wo.GetLds()) || !bytes.Equal(rb, wo.GetRda()) {
			t.Errorf("%d packets: rebuilt LDA %v, LDS %v, RDA %v equal to the probe's", n,
				bytes.Equal(lb, wo.GetLda()), bytes.Equal(sb, wo.GetLds()), bytes.Equal(rb, wo.GetRda()))
		}
	}
	for _, rate := range []int{1000, 100_000} {
		busy, _ := oneEpochReports(t, rate, true, lds.Wire{DigestBytes: 4, Packed: true}, 2, true)
		if r := busy[0]; len(r.GetList()) > 0 || len(r.GetRda()) == 0 {
			t.Errorf("%d packets: list %d bytes, rda %d", rate, len(r.GetList()), len(r.GetRda()))
		}
	}
}
