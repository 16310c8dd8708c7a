package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// boundaryKeep is how many epochs of boundary records a path keeps.
const boundaryKeep = 16

// enqueue schedules an epoch of a path whose two sides are in. ps.mu is held.
func (ps *pathState) enqueue(epoch int64) {
	ps.queue = append(ps.queue, epoch)
	select {
	case ps.wake <- struct{}{}:
	default:
	}
}

// work runs a path's reconciliations one after the other until ctx ends.
// One worker per path keeps a path's epochs in order and lets paths
// proceed in parallel.
func (c *Collector) work(ctx context.Context, ps *pathState) {
	for {
		ps.mu.Lock()
		var e int64
		have := len(ps.queue) > 0
		if have {
			e = ps.queue[0]
			ps.queue = ps.queue[1:]
		}
		ps.mu.Unlock()
		if !have {
			select {
			case <-ctx.Done():
				return
			case <-ps.wake:
			}
			continue
		}
		if err := c.reconcileEpoch(ctx, ps, e); err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Error("reconciling epoch", "path", ps.path.Name, "epoch", e, "err", err)
		}
	}
}

// reconcileEpoch turns both sides of one epoch into a stored result.
func (c *Collector) reconcileEpoch(ctx context.Context, ps *pathState, epoch int64) error {
	ps.mu.Lock()
	pr := ps.pending[epoch]
	ps.mu.Unlock()
	if pr == nil || pr.up == nil || pr.down == nil {
		return nil // done already
	}
	res := c.baseResult(ps.path.Name, epoch, pr.up, pr.down)
	c.estimateLDA(res, pr.up, pr.down)
	var bd *boundary
	var rep repairs
	if pr.up.rda != nil && pr.down.rda != nil {
		var err error
		bd, err = c.estimateRDA(ctx, ps, epoch, pr, res, &rep)
		if err != nil {
			c.log.Warn("RDA reconciliation failed; keeping the LDA estimate", "path", ps.path.Name, "epoch", epoch, "err", err)
		}
	}
	if res.Status == owlv1.ResultStatus_RESULT_STATUS_UNSPECIFIED {
		res.Status = owlv1.ResultStatus_RESULT_STATUS_NO_SAMPLES
	}

	w := store.Write{Results: []*owlv1.PathStats{res}, Done: []store.EpochRef{{Path: ps.path.Name, Epoch: epoch}}}
	flows := c.topFlows(ps.path.Name, epoch, pr.up, pr.down, rep, &w)
	var updated []*owlv1.PathStats
	if bd != nil {
		// Match across both neighbouring epochs, whichever came first.
		if prev := c.boundaryOf(ps, epoch-1); prev != nil && prev.match(bd) {
			updated = append(updated, prev.res)
			w.Boundaries = append(w.Boundaries, store.Boundary{EpochRef: store.EpochRef{Path: ps.path.Name, Epoch: epoch - 1}, Data: prev.encode()})
		}
		if next := c.boundaryOf(ps, epoch+1); next != nil && bd.match(next) {
			updated = append(updated, next.res)
			w.Boundaries = append(w.Boundaries, store.Boundary{EpochRef: store.EpochRef{Path: ps.path.Name, Epoch: epoch + 1}, Data: next.encode()})
		}
		w.Boundaries = append(w.Boundaries, store.Boundary{EpochRef: store.EpochRef{Path: ps.path.Name, Epoch: epoch}, Data: bd.encode()})
		w.DropBoundaries = append(w.DropBoundaries, store.EpochRef{Path: ps.path.Name, Epoch: epoch - boundaryKeep})
		w.Results = append(w.Results, updated...)
	}
	for _, r := range w.Results {
		judgeClocks(r, c.cfg.ClockUncertaintyShare)
	}
	if err := c.store.Apply(w); err != nil {
		return fmt.Errorf("storing result: %w", err)
	}
	ps.mu.Lock()
	if ps.pending[epoch] == pr {
		delete(ps.pending, epoch)
	}
	if !ps.seen || epoch > ps.newest {
		ps.newest, ps.seen = epoch, true
	}
	if bd != nil {
		ps.boundaries[epoch] = bd
		for e := range ps.boundaries {
			if e <= epoch-boundaryKeep {
				delete(ps.boundaries, e)
			}
		}
	}
	ps.mu.Unlock()
	c.publish(res, pr)
	c.m.flows(ps.path.Name, flows, c.cfg.Flows.MetricsTop)
	for _, u := range updated {
		c.publishUpdate(u)
	}
	c.settle(ps, epoch)
	c.release(ps.path.Upstream, ps.path.Name, epoch)
	c.release(ps.path.Downstream, ps.path.Name, epoch)
	return nil
}

// boundaryOf returns an epoch's boundary record from memory or the store.
func (c *Collector) boundaryOf(ps *pathState, epoch int64) *boundary {
	ps.mu.Lock()
	b := ps.boundaries[epoch]
	ps.mu.Unlock()
	if b != nil {
		return b
	}
	data, err := c.store.BoundaryData(ps.path.Name, epoch)
	if err != nil || data == nil {
		return nil
	}
	res, err := c.store.Result(ps.path.Name, epoch)
	if err != nil || res == nil {
		return nil
	}
	b, err = decodeBoundary(epoch, data, res)
	if err != nil {
		c.log.Error("dropping unreadable boundary record", "path", ps.path.Name, "epoch", epoch, "err", err)
		return nil
	}
	ps.mu.Lock()
	ps.boundaries[epoch] = b
	ps.mu.Unlock()
	return b
}

// settle counts into the metrics the loss of epochs whose boundary matching
// is over: the epoch before one just reconciled, and the epoch itself once
// its successor is reconciled too. sweep settles the rest after a timeout.
func (c *Collector) settle(ps *pathState, epoch int64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, e := range []int64{epoch - 1, epoch} {
		b := ps.boundaries[e]
		if b == nil || b.settled {
			continue
		}
		if e == epoch && ps.boundaries[epoch+1] == nil {
			continue
		}
		b.settled = true
		c.m.settled(b.res)
	}
}

// baseResult fills what every result of a pair has.
func (c *Collector) baseResult(path string, epoch int64, up, down *side) *owlv1.PathStats {
	ep := c.cfg.Params.Epoch
	res := &owlv1.PathStats{
		Path: path, Epoch: epoch,
		Start:    timestamppb.New(time.Unix(0, ep.StartNS(epoch))),
		Length:   durationpb.New(ep.Length),
		Computed: timestamppb.New(c.now()),
	}
	for _, s := range []*side{up, down} {
		if s == nil {
			continue
		}
		n := uint64(len(s.Report.GetLda()) + len(s.Report.GetRda()))
		res.Bytes += n
		res.ExchangedBytes += n
	}
	if up != nil {
		res.UpstreamClock, res.UpstreamCounters = up.Report.GetClock(), up.Report.GetCounters()
	}
	if down != nil {
		res.DownstreamClock, res.DownstreamCounters = down.Report.GetClock(), down.Report.GetCounters()
	}
	return res
}

// estimateLDA sets the LDA's estimate, as the result's estimate and in the
// LDA fields.
func (c *Collector) estimateLDA(res *owlv1.PathStats, up, down *side) {
	est, err := lda.EstimatePair(up.lda, down.lda, c.opts)
	res.UpstreamPackets, res.DownstreamPackets, res.Lost = est.UpPackets, est.DownPackets, est.LostPackets
	res.Estimator = "lda"
	switch {
	case errors.Is(err, lda.ErrNoSamples):
		res.Status = owlv1.ResultStatus_RESULT_STATUS_NO_SAMPLES
		res.Detail = fmt.Sprintf("no usable LDA row (%d upstream, %d downstream packets)", est.UpPackets, est.DownPackets)
	case err != nil:
		res.Status = owlv1.ResultStatus_RESULT_STATUS_MISMATCH
		res.Detail = err.Error()
	default:
		res.Status = owlv1.ResultStatus_RESULT_STATUS_OK
		res.MeanNs, res.StddevNs, res.Samples = est.MeanNS, est.StddevNS, est.Samples
		res.LdaMeanNs, res.LdaStddevNs, res.LdaSamples = est.MeanNS, est.StddevNS, est.Samples
	}
}

// ldsRemoval is a packet to take out of one side's LDS.
type ldsRemoval struct {
	id uint64
	e  cached
}

// repairs lists what RDA reconciliation found to take out of each side's LDS.
type repairs struct{ up, down []ldsRemoval }

// apply returns repaired copies of the two sketches. Packets whose flow the
// probe did not say are left in: their cells stay unusable, as the digest
// shows.
func (r repairs) apply(up, down *lds.LDS) (*lds.LDS, *lds.LDS) {
	if len(r.up)+len(r.down) == 0 {
		return up, down
	}
	up, down = up.Clone(), down.Clone()
	for _, x := range r.up {
		if x.e.weight > 0 {
			up.Remove(x.e.flow, x.id, x.e.offsetNS, x.e.weight)
		}
	}
	for _, x := range r.down {
		if x.e.weight > 0 {
			down.Remove(x.e.flow, x.id, x.e.offsetNS, x.e.weight)
		}
	}
	return up, down
}

// estimateRDA reconciles the epoch's RDAs: peel (rebuilding both sides at a
// larger size while peeling fails, up to the configured limit), fetch the
// timestamps of the decoded packets, repair, compute. It overrides the
// result's estimate, fills rep with the packets to take out of the LDSs,
// and returns the epoch's boundary record.
func (c *Collector) estimateRDA(ctx context.Context, ps *pathState, epoch int64, pr *pairing, res *owlv1.PathStats, rep *repairs) (*boundary, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RDA.RequestTimeout)
	defer cancel()
	up, down := pr.up.rda, pr.down.rda
	path := ps.path.Name
	sizeOf := func(r *rda.RDA) int { return r.Config().Buckets }

	// Late binding: both sides at one size, large enough for the count
	// difference, larger again while peeling fails.
	var diff reconcile.Difference
	// Copies of one packet seen only downstream cancel in the ID xor and
	// stop peeling: when peeling stalls, the extra copies are fetched and
	// taken out of the downstream RDA (and any rebuild of it) first.
	var pre []ldsRemoval
	askedRepeated := false
	adjust := func(r *rda.RDA) *rda.RDA {
		if len(pre) == 0 {
			return r
		}
		r = r.Clone()
		for _, x := range pre {
			r.Remove(x.id, x.e.offsetNS)
		}
		return r
	}
	for attempt := 0; ; attempt++ {
		m := max(sizeOf(up), sizeOf(down))
		if dLow := int(absDiff(up.Packets(), down.Packets())); reconcile.Size(dLow, 1, rda.MaxBuckets) > m {
			m = reconcile.Size(dLow, c.cfg.RDA.MinBuckets, c.cfg.RDA.MaxBuckets)
		}
		if m != sizeOf(up) || m != sizeOf(down) {
			if res.Rebuilds >= uint32(c.cfg.RDA.MaxRebuilds) {
				return nil, fmt.Errorf("RDA sizes %d and %d differ and no rebuild is left", sizeOf(up), sizeOf(down))
			}
			var err error
			if up, down, err = c.rebuildBoth(ctx, ps, epoch, up, down, m, res); err != nil {
				return nil, err
			}
		}
		var err error
		if diff, err = reconcile.Peel(up, adjust(down)); err != nil {
			return nil, err
		}
		if !diff.Complete() && !askedRepeated {
			askedRepeated = true
			p, err := c.extraCopies(ctx, ps, epoch, res)
			if err != nil {
				c.log.Warn("cannot fetch repeated packets", "path", path, "epoch", epoch, "err", err)
			} else if len(p) > 0 {
				pre = p
				if diff, err = reconcile.Peel(up, adjust(down)); err != nil {
					return nil, err
				}
			}
		}
		if diff.Complete() || sizeOf(up) >= c.cfg.RDA.MaxBuckets || res.Rebuilds >= uint32(c.cfg.RDA.MaxRebuilds) {
			break
		}
		residual := 0
		for _, r := range diff.Residual {
			residual += len(r)
		}
		next := max(2*sizeOf(up), reconcile.Size(diff.Size()+residual, c.cfg.RDA.MinBuckets, c.cfg.RDA.MaxBuckets))
		next = min(next, c.cfg.RDA.MaxBuckets)
		c.log.Debug("peeling incomplete; rebuilding larger", "path", path, "epoch", epoch, "buckets", sizeOf(up), "next", next, "diff", diff.String())
		if up, down, err = c.rebuildBoth(ctx, ps, epoch, up, down, next, res); err != nil {
			return nil, err
		}
	}
	down = adjust(down)
	res.RdaBuckets = uint32(sizeOf(up))
	res.Decoded = diff.Complete()
	c.m.rdaOutcome(path, diff.Complete(), int(res.Rebuilds))
	c.noteSetDifference(ps, diff)

	// Timestamps of the decoded packets, from the side that saw them.
	u := reconcile.NewUsable(up.Config(), diff)
	var upTS, downTS map[uint64][]cached
	repaired := true
	var fetched atomic.Uint64 // bytes, from two goroutines
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		upTS, err = c.fetch(gctx, ps.path.Upstream, path, epoch, diff.Lost, &fetched)
		return err
	})
	g.Go(func() error {
		var err error
		downTS, err = c.fetch(gctx, ps.path.Downstream, path, epoch, diff.Extra, &fetched)
		return err
	})
	err := g.Wait()
	res.ExchangedBytes += fetched.Load()
	if err == nil {
		// The copies taken out before peeling are not in the RDA any more.
		for _, x := range pre {
			ts := downTS[x.id]
			if i := slices.IndexFunc(ts, func(e cached) bool { return e.offsetNS == x.e.offsetNS }); i >= 0 {
				downTS[x.id] = slices.Delete(ts, i, i+1)
			}
		}
	}
	if err != nil {
		c.log.Warn("cannot fetch timestamps; leaving the decoded packets' buckets out", "path", path, "epoch", epoch, "err", err)
		repaired = false
	}

	upR, downR := up.Clone(), down.Clone()
	ep := c.cfg.Params.Epoch
	start := ep.StartNS(epoch)
	bdLost, bdExtra := map[uint64]int64{}, map[uint64]int64{}
	dups := uint64(len(pre))
	rep.down = append(rep.down, pre...)
	if repaired {
		upOff := map[uint64]int64{}
		for _, id := range diff.Lost {
			// Only an ID the upstream side saw exactly once can be
			// removed: with two copies, which one was lost is unknown.
			if ts := upTS[id]; len(ts) == 1 {
				upOff[id] = ts[0].offsetNS
				bdLost[id] = start + ts[0].offsetNS
				rep.up = append(rep.up, ldsRemoval{id, ts[0]})
			}
		}
		downOff := map[uint64]int64{}
		for _, id := range diff.Extra {
			ts := slices.Clone(downTS[id])
			switch {
			case len(ts) == 1:
				downOff[id] = ts[0].offsetNS
				bdExtra[id] = start + ts[0].offsetNS
				rep.down = append(rep.down, ldsRemoval{id, ts[0]})
			case len(ts) >= 2:
				// A duplicate: the first copy is the delivery, the
				// last one is the extra.
				slices.SortFunc(ts, func(a, b cached) int { return cmp.Compare(a.offsetNS, b.offsetNS) })
				downOff[id] = ts[len(ts)-1].offsetNS
				rep.down = append(rep.down, ldsRemoval{id, ts[len(ts)-1]})
				dups++
			}
		}
		reconcile.Repair(upR, diff.Lost, upOff, u)
		reconcile.Repair(downR, diff.Extra, downOff, u)
		if n := len(diff.Lost) - len(upOff) + len(diff.Extra) - len(downOff); n > 0 {
			c.log.Debug("decoded packets without a usable timestamp", "path", path, "epoch", epoch, "unresolved", n,
				"lost", len(diff.Lost), "lost_resolved", len(upOff), "extra", len(diff.Extra), "extra_resolved", len(downOff))
		}
	} else {
		for _, id := range diff.Lost {
			u.Exclude(upR, id)
		}
		for _, id := range diff.Extra {
			u.Exclude(downR, id)
		}
	}
	est, err := reconcile.Compute(upR, downR, u, reconcile.StddevCentered)
	res.UnusableBuckets = uint32(est.ExcludedBuckets)
	res.Lost = float64(len(diff.Lost))
	res.Duplicates = dups
	// Copies taken out before peeling (pre) are not among the extras:
	// only the duplicates found among them are.
	res.Reordered = uint64(len(diff.Extra)) - (dups - uint64(len(pre)))
	if err != nil {
		return nil, err
	}
	res.Status = owlv1.ResultStatus_RESULT_STATUS_OK
	res.Detail = ""
	res.MeanNs, res.StddevNs, res.Samples = est.MeanNS, est.StddevNS, uint64(est.Count)
	res.Estimator = "rda"
	if !diff.Complete() {
		res.Estimator = "rda-partial"
	}
	if !repaired {
		res.Estimator = "rda-unrepaired"
		return nil, nil
	}
	return &boundary{epoch: epoch, lost: bdLost, extra: bdExtra,
		n: est.Count, sumNS: est.SumNS, sqNS: est.Count * (est.StddevNS*est.StddevNS + est.MeanNS*est.MeanNS),
		res: res, at: c.now()}, nil
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

// rebuildBoth asks both probes for the epoch's RDA at m buckets.
func (c *Collector) rebuildBoth(ctx context.Context, ps *pathState, epoch int64, up, down *rda.RDA, m int, res *owlv1.PathStats) (*rda.RDA, *rda.RDA, error) {
	res.Rebuilds++
	c.m.rebuilds.WithLabelValues(ps.path.Name).Inc()
	out := [2]*rda.RDA{up, down}
	var got [2]int // bytes received, per goroutine
	g, gctx := errgroup.WithContext(ctx)
	for i, probe := range []string{ps.path.Upstream, ps.path.Downstream} {
		if out[i].Config().Buckets == m {
			continue
		}
		g.Go(func() error {
			s := c.waitSession(gctx, probe)
			if s == nil {
				return fmt.Errorf("rebuilding at %d buckets: %s is not connected", m, probe)
			}
			b, err := s.rebuild(gctx, ps.path.Name, epoch, m)
			if err != nil {
				return fmt.Errorf("rebuilding at %d buckets: %w", m, err)
			}
			r, err := rda.Decode(b)
			if err != nil {
				return fmt.Errorf("rebuilt RDA from %s: %w", probe, err)
			}
			if err := params.SameRDAHashing(c.cfg.Params.RDA, r.Config()); err != nil || r.Config().Buckets != m {
				return fmt.Errorf("rebuilt RDA from %s has the wrong shape: %v", probe, r.Config())
			}
			out[i] = r
			got[i] = len(b)
			return nil
		})
	}
	err := g.Wait()
	n := got[0] + got[1]
	res.ExchangedBytes += uint64(n)
	c.m.exchanged.WithLabelValues(ps.path.Name).Add(float64(n))
	if err != nil {
		return nil, nil, err
	}
	return out[0], out[1], nil
}

// fetch asks a probe for the timestamps of ids; it adds the bytes exchanged to n.
func (c *Collector) fetch(ctx context.Context, probe, path string, epoch int64, ids []uint64, n *atomic.Uint64) (map[uint64][]cached, error) {
	if len(ids) == 0 {
		return map[uint64][]cached{}, nil
	}
	s := c.waitSession(ctx, probe)
	if s == nil {
		return nil, fmt.Errorf("%s is not connected", probe)
	}
	out, size, err := s.fetch(ctx, path, epoch, ids)
	n.Add(uint64(size))
	c.m.exchanged.WithLabelValues(path).Add(float64(size))
	return out, err
}

// extraCopies finds the packets a path's downstream probe saw more often in
// the epoch than the upstream one (at least once), and returns the extra
// copies to take out of the downstream RDA: all but the earliest, or all
// but as many as went out upstream. A copy taken out is a duplicate.
func (c *Collector) extraCopies(ctx context.Context, ps *pathState, epoch int64, res *owlv1.PathStats) ([]ldsRemoval, error) {
	up, down := c.waitSession(ctx, ps.path.Upstream), c.waitSession(ctx, ps.path.Downstream)
	if up == nil || down == nil {
		return nil, errors.New("a probe of the path is not connected")
	}
	path := ps.path.Name
	var upRep, downRep map[uint64][]cached
	var n atomic.Uint64
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		r, size, err := up.fetchRepeated(gctx, path, epoch)
		upRep = r
		n.Add(uint64(size))
		return err
	})
	g.Go(func() error {
		r, size, err := down.fetchRepeated(gctx, path, epoch)
		downRep = r
		n.Add(uint64(size))
		return err
	})
	err := g.Wait()
	defer func() {
		res.ExchangedBytes += n.Load()
		c.m.exchanged.WithLabelValues(path).Add(float64(n.Load()))
	}()
	if err != nil {
		return nil, err
	}
	// Only downstream repeats matter; the upstream count of each comes
	// from its repeats or, for an ID sent once or never, a plain fetch.
	var ask []uint64
	for id := range downRep {
		if _, ok := upRep[id]; !ok {
			ask = append(ask, id)
		}
	}
	if len(ask) > 0 {
		once, size, err := up.fetch(ctx, path, epoch, ask)
		n.Add(uint64(size))
		if err != nil {
			return nil, err
		}
		for id, ts := range once {
			upRep[id] = ts
		}
	}
	var out []ldsRemoval
	for id, ts := range downRep {
		keep := max(len(upRep[id]), 1)
		if len(ts) <= keep {
			continue
		}
		ts = slices.Clone(ts)
		slices.SortFunc(ts, func(a, b cached) int { return cmp.Compare(a.offsetNS, b.offsetNS) })
		for _, e := range ts[keep:] {
			out = append(out, ldsRemoval{id, e})
		}
	}
	return out, nil
}

// noteSetDifference remembers the set difference of a path's epoch and, when
// the RDA size the probes use no longer fits, tells them a new one.
func (c *Collector) noteSetDifference(ps *pathState, d reconcile.Difference) {
	size := d.Size()
	for _, r := range d.Residual {
		size += 2 * len(r) // at least two undecoded packets per residual bucket
	}
	ps.mu.Lock()
	ps.recentDiff = append(ps.recentDiff, size)
	if len(ps.recentDiff) > 8 {
		ps.recentDiff = ps.recentDiff[1:]
	}
	want := reconcile.Size(slices.Max(ps.recentDiff), c.cfg.RDA.MinBuckets, c.cfg.RDA.MaxBuckets)
	cur := ps.rdaBuckets
	change := want > cur || want < cur/4
	if change {
		ps.rdaBuckets = want
	}
	ps.mu.Unlock()
	if !change {
		return
	}
	c.log.Info("resizing RDA", "path", ps.path.Name, "buckets", want, "was", cur)
	msg := &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_RdaSize{RdaSize: &owlv1.RDASize{Path: ps.path.Name, Buckets: uint32(want)}}}
	for _, probe := range []string{ps.path.Upstream, ps.path.Downstream} {
		if s := c.session(probe); s != nil {
			_ = s.send(msg)
		}
	}
}
