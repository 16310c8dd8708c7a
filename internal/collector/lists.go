package collector

import (
	"context"
	"fmt"
	"math"

	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/exact"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// A report may carry its epoch's exact list of packets in place of its
// synopses (a probe sends it where it is the smaller). The collector
// rebuilds from the list the synopses the probe would have sent — the
// same inserts, so the same bytes — and answers the repairs of that side
// from the list instead of the probe's cache: the rest of reconciliation
// is the same whatever each side shipped.

// decodeList checks a report's exact list and builds from it the side's
// LDA, packet sample (all of it) and LDS parameters, as decodeSide does from
// synopses; the RDA and LDS are built when the epoch is reconciled.
func decodeList(s *side, prm params.Params) error {
	r := s.Report
	if len(r.GetLda())+len(r.GetRda())+len(r.GetLds())+len(r.GetSample()) > 0 {
		return fmt.Errorf("%w: a report with an exact list carries no other synopsis", synopsis.ErrFormat)
	}
	l, err := exact.Decode(r.GetList())
	if err != nil {
		return err
	}
	if s.lda, err = lda.New(prm.LDA); err != nil {
		return err
	}
	for _, p := range l.Packets {
		s.lda.Insert(p.ID, p.OffsetNS)
	}
	// The list is the sample at rate 1: joined with the other side's
	// list, every delay is known; with its sample, the collector narrows
	// it to that sample's rate.
	if prm.Sample.Target > 0 {
		if s.sample, err = sample.New(sample.Config{Seed: prm.Sample.Seed, Threshold: math.MaxUint64}); err != nil {
			return err
		}
		for _, p := range l.Packets {
			s.sample.InsertFlow(p.ID, p.Flow, p.OffsetNS)
		}
	}
	cfg := prm.LDS
	s.ldsCfg, s.listed = &cfg, true
	return nil
}

// listedEpoch holds, for each side of an epoch that sent an exact list,
// its packets, and the RDAs and LDSs the worker uses for the epoch.
type listedEpoch struct {
	listed [2]bool
	local  reconcile.Local
	rdas   [2]*rda.RDA
	ldss   [2][]byte // LDS wire forms
	// ldas are the sides' LDAs: a listed side's at the rows of the
	// other side's, when that one sent synopses.
	ldas [2]*lda.LDA
}

// listsOf decodes the epoch's exact lists (none: nil) and builds each
// listed side's RDA and LDS — at the size of the other side's, or the
// path's when both sides listed.
func (wk *worker) listsOf(w *epochWork) (*listedEpoch, error) {
	sides := [2]*side{w.pr.up, w.pr.down}
	if !sides[0].listed && !sides[1].listed {
		return nil, nil
	}
	prm := wk.cfg.Params
	le := &listedEpoch{local: reconcile.Local{RDA: prm.RDA}}
	ldsCfg := prm.LDS
	w.ps.mu.Lock()
	buckets := w.ps.rdaBuckets
	ldsCfg.Cols = w.ps.ldsCols
	rows := w.ps.ldsRows
	w.ps.mu.Unlock()
	if sel, err := ldsCfg.Select(rows); err == nil {
		ldsCfg = sel
	}
	for _, s := range sides {
		if !s.listed && s.ldsCfg != nil {
			ldsCfg = *s.ldsCfg
		}
	}
	for i, s := range sides {
		le.rdas[i], le.ldss[i], le.ldas[i] = s.rda, s.Report.GetLds(), s.lda
		if !s.listed {
			if s.rda != nil {
				buckets = s.rda.Config().Buckets
			}
			continue
		}
		l, err := exact.Decode(s.Report.GetList())
		if err != nil { // checked when it came
			return nil, err
		}
		le.listed[i] = true
		ps := make([]reconcile.Packet, len(l.Packets))
		sk, err := lds.New(ldsCfg)
		if err != nil {
			return nil, err
		}
		_ = sk.SetDigestBytes(wk.cfg.Flows.LDSDigestBytes) // validated; stored at the width the probes send
		for j, p := range l.Packets {
			ps[j] = reconcile.Packet{ID: p.ID, Entry: reconcile.Entry{OffsetNS: p.OffsetNS, Flow: p.Flow, Weight: p.Weight}}
			sk.Insert(p.Flow, p.ID, p.OffsetNS, p.Weight)
		}
		le.local.Packets[i] = ps
		if le.ldss[i], err = sk.MarshalBinary(); err != nil {
			return nil, err
		}
		if le.ldas[i], err = listedLDA(s.lda, sides[1-i], l); err != nil {
			return nil, err
		}
	}
	for i := range sides {
		if le.listed[i] {
			var err error
			if le.rdas[i], err = le.local.Rebuild(context.Background(), reconcile.Side(i), buckets); err != nil {
				return nil, err
			}
		}
	}
	return le, nil
}

// listedLDA is the LDA of a listed side, l, at the rows of the other
// side's when that one sent synopses (the collector sized it), rebuilt
// from the list l holds.
func listedLDA(l *lda.LDA, other *side, list *exact.List) (*lda.LDA, error) {
	if other.listed || other.lda.Config().Rows == l.Config().Rows {
		return l, nil
	}
	n, err := lda.New(other.lda.Config())
	if err != nil {
		return nil, err
	}
	for _, p := range list.Packets {
		n.Insert(p.ID, p.OffsetNS)
	}
	return n, nil
}
