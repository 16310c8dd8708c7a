package collector

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/lds"
)

// The replica's side of replication: it stores the copies the owner
// sends (and those catch-up fetches), and once it owns a path, it makes
// the copies of the path's lone sides its own (promote).

// Replicate stores the copies another member sends.
func (s clusterService) Replicate(_ context.Context, req *owlv1.ReplicateRequest) (*owlv1.ReplicateResponse, error) {
	if _, err := s.c.storeCopies(req.GetEpochs()); err != nil {
		s.c.log.Error("replication: storing copies", "from", req.GetFrom(), "err", err)
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &owlv1.ReplicateResponse{}, nil
}

// storeCopies stores, in one transaction, copies of what other members
// stored, and returns how many results it wrote. Results, per-flow
// results, sketches and boundary records go where this member's own go,
// as they came; a result missing a side never replaces a stored one, nor
// does one the stored one is preferred to (preferred).
// Lone sides go to replica-pending, and an epoch done takes its copies of
// lone sides out. Copies of paths not configured here, whose parts name
// another path or epoch, or that hold what no member stores (a sketch
// that does not decode, a lone side of no probe id), are left out.
func (c *Collector) storeCopies(copies []*owlv1.EpochCopy) (int, error) {
	kept := 0
	w := store.Write{Keep: func(stored, incoming *owlv1.PathStats) bool {
		keep := missingSide(incoming) || preferred(stored, incoming)
		if keep {
			kept++
		}
		return keep
	}}
	var flows []store.EpochRef
	for _, ec := range copies {
		if err := c.checkCopy(ec); err != nil {
			c.log.Warn("replication: leaving out a copy", "path", ec.GetPath(), "epoch", ec.GetEpoch(), "err", err)
			continue
		}
		addCopy(&w, ec)
		if ec.GetSizes() != nil && ec.GetSizesSetting() == c.worker.sizesSetting {
			w.Sizes = append(w.Sizes, store.PathSizes{Path: ec.GetPath(), Setting: ec.GetSizesSetting(), Sizes: ec.GetSizes()})
		}
		if len(ec.GetFlows()) > 0 || len(ec.GetLdsPair())+len(ec.GetLdsUp())+len(ec.GetLdsDown()) > 0 {
			flows = append(flows, store.EpochRef{Path: ec.GetPath(), Epoch: ec.GetEpoch()})
		}
	}
	if err := c.store.Apply(w); err != nil {
		return 0, err
	}
	now := c.now()
	for _, f := range flows {
		ps := c.paths[f.Path]
		ps.mu.Lock()
		ps.flowAges.note(f.Epoch, now)
		ps.mu.Unlock()
	}
	for _, s := range w.Sizes {
		// Kept for a takeover: the owner's own sizes are its to change.
		if _, self := c.owner(s.Path); !self {
			c.paths[s.Path].setSizes(s.Sizes)
		}
	}
	return len(w.Results) - kept, nil
}

// checkCopy checks that a copy's path is configured, that its parts are
// of its path and epoch, and that its sketches and lone sides can be
// stored and read back.
func (c *Collector) checkCopy(ec *owlv1.EpochCopy) error {
	path, epoch := ec.GetPath(), ec.GetEpoch()
	if c.paths[path] == nil {
		return fmt.Errorf("path %q is not configured here", path)
	}
	if r := ec.GetResult(); r != nil && (r.GetPath() != path || r.GetEpoch() != epoch) {
		return fmt.Errorf("its result is of %q epoch %d", r.GetPath(), r.GetEpoch())
	}
	for _, f := range ec.GetFlows() {
		if f.GetStats().GetPath() != path || f.GetStats().GetEpoch() != epoch {
			return fmt.Errorf("a per-flow result is of %q epoch %d", f.GetStats().GetPath(), f.GetStats().GetEpoch())
		}
	}
	if p := ec.GetLdsPair(); len(p) > 0 {
		// Stored, sketches that do not decode would fail every
		// GetFlowStats over their epoch.
		if err := lds.CheckPair(p); err != nil {
			return fmt.Errorf("its sketches: %w", err)
		}
	}
	if up, down := ec.GetLdsUp(), ec.GetLdsDown(); len(up)+len(down) > 0 {
		if _, err := lds.Check(up); err != nil {
			return fmt.Errorf("its upstream sketch: %w", err)
		}
		if _, err := lds.Check(down); err != nil {
			return fmt.Errorf("its downstream sketch: %w", err)
		}
	}
	if a := ec.GetSizes(); a != nil && ec.GetSizesSetting() == c.worker.sizesSetting {
		if err := c.cfg.checkSizes(a); err != nil {
			return fmt.Errorf("its synopsis sizes: %w", err)
		}
	}
	for _, l := range ec.GetLone() {
		r := l.GetReport()
		if r.GetPath() != path || r.GetEpoch() != epoch || r.GetRole() != owlv1.Role_ROLE_UPSTREAM && r.GetRole() != owlv1.Role_ROLE_DOWNSTREAM {
			return fmt.Errorf("a lone side is of %q epoch %d role %v", r.GetPath(), r.GetEpoch(), r.GetRole())
		}
		if !netpath.ValidName(l.GetProbe()) {
			// Stored, it would fail the whole batch.
			return fmt.Errorf("a lone side's probe %q is no probe id", l.GetProbe())
		}
	}
	return nil
}

// addCopy adds what a checked copy holds to w.
func addCopy(w *store.Write, ec *owlv1.EpochCopy) {
	ref := store.EpochRef{Path: ec.GetPath(), Epoch: ec.GetEpoch()}
	if r := ec.GetResult(); r != nil {
		w.Results = append(w.Results, r)
	}
	for _, f := range ec.GetFlows() {
		w.Flows = append(w.Flows, store.FlowResult{Hash: f.GetHash(), Stats: f.GetStats()})
	}
	switch {
	case len(ec.GetLdsPair()) > 0:
		w.LDS = append(w.LDS, store.LDSPair{EpochRef: ref, Pair: ec.GetLdsPair()})
	case len(ec.GetLdsUp())+len(ec.GetLdsDown()) > 0:
		w.LDS = append(w.LDS, store.LDSPair{EpochRef: ref, Up: ec.GetLdsUp(), Down: ec.GetLdsDown()})
	}
	if ec.GetBoundary() != nil {
		w.Boundaries = append(w.Boundaries, store.Boundary{EpochRef: ref, Data: ec.GetBoundary()})
		w.DropBoundaries = append(w.DropBoundaries, store.EpochRef{Path: ref.Path, Epoch: ref.Epoch - boundaryKeep})
	}
	if ec.GetDone() {
		// Deletions go first in the transaction: the copies of this
		// epoch's sides queued before it must not be added after.
		w.ReplicaDone = append(w.ReplicaDone, ref)
		w.ReplicaPending = slices.DeleteFunc(w.ReplicaPending, func(p store.Pending) bool {
			return p.Report.GetPath() == ref.Path && p.Report.GetEpoch() == ref.Epoch
		})
	}
	for _, l := range ec.GetLone() {
		w.ReplicaPending = append(w.ReplicaPending, store.Pending{Probe: l.GetProbe(), Received: l.GetReceived().AsTime(), Report: l.GetReport()})
	}
}

// promote makes the copies of lone sides of the paths this member owns
// its own: each is taken like a report just received (its pair timeout
// counts from now: the other side's probe may just have learnt of the
// new owner), then the copy goes. Copies of paths no longer configured,
// or unreadable, go too.
func (c *Collector) promote() {
	copies, bad, err := c.store.AllReplicaPending()
	if err != nil {
		c.log.Error("replication: reading the copies of lone sides", "err", err)
		return
	}
	for _, e := range bad {
		c.log.Error("replication: dropping an unreadable copy of a lone side", "err", e)
	}
	n := 0
	for _, p := range copies {
		r := p.Report
		ps := c.paths[r.GetPath()]
		if ps != nil {
			if _, self := c.owner(r.GetPath()); !self {
				continue
			}
		}
		taken, err := c.promoteSide(ps, p)
		if err != nil {
			c.log.Error("replication: taking a copy of a lone side", "path", r.GetPath(), "epoch", r.GetEpoch(), "err", err)
		}
		if taken {
			n++
		}
	}
	if n > 0 {
		c.m.promoted.Add(float64(n))
		c.log.Info("replication: took the copies of lone sides of paths this member owns now", "sides", n)
	}
}

// promoteSide takes one copy of a lone side (ps nil: its path is not
// configured) and deletes the copy; taken says it went into the pairing
// table (or was there already).
func (c *Collector) promoteSide(ps *pathState, p store.Pending) (taken bool, err error) {
	r := p.Report
	if ps != nil {
		s, err := decodeSide(p, c.cfg.Params)
		if err == nil {
			s.Received = c.now()
			if _, _, err := c.pairSide(ps, s, false); err != nil {
				return false, err // the copy stays for the next try
			}
			taken = true
		}
	}
	return taken, c.store.DeleteReplicaSide(r.GetPath(), r.GetEpoch(), r.GetRole())
}

// pruneReplicaPending drops the copies of lone sides whose owner has
// dropped them for certain (twice its pair timeout and retention after
// they came): the word that they are gone may have been lost.
func (c *Collector) pruneReplicaPending() {
	if _, err := c.store.PruneReplicaPending(c.now().Add(-2 * (c.cfg.PairTimeout + c.cfg.PairRetention))); err != nil {
		c.log.Error("replication: pruning copies of lone sides", "err", err)
	}
}
