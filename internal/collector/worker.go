package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/DataDog/sketches-go/ddsketch"
	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// boundaryKeep is how many epochs of boundary records a path keeps.
const boundaryKeep = 16

// boundaryInMemory is how many epochs of settled boundary records a path
// keeps in memory as well; older ones, matched with both neighbours in
// the usual order, are read back from the store when a late epoch needs
// them. With the packet sample a record holds the epoch's joined delays:
// kept for boundaryKeep epochs, the records were about 0.3 MB of heap
// per path.
const boundaryInMemory = 4

// worker reconciles, stores and publishes the epochs whose two sides are
// in: one goroutine per path (work) takes its path's epochs in order from
// the pairing table's queue, so that paths proceed in parallel.
type worker struct {
	cfg      Config
	log      *slog.Logger
	store    *store.Store
	m        *metrics
	now      func() time.Time
	opts     lda.Options
	weightOf func(capture.FlowKey) uint64 // LDS flow weights
	paths    map[string]*pathState
	probes   *registry
	watchers *hub
	repl     *replicator // copies what is stored to the paths' replicas
	// sizesSetting fingerprints the configuration sizes are chosen
	// under (sizes.go).
	sizesSetting uint64
}

// work runs a path's reconciliations one after the other until ctx ends.
// One worker per path keeps a path's epochs in order and lets paths
// proceed in parallel.
func (wk *worker) work(ctx context.Context, ps *pathState) {
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
		if err := wk.reconcileSafely(ctx, ps, e); err != nil {
			if ctx.Err() != nil {
				return
			}
			wk.log.Error("reconciling epoch", "path", ps.path.Name, "epoch", e, "err", err)
			saveUnsaved(wk.store, wk.repl, ps, e, false)
		}
	}
}

// reconcileSafely reconciles an epoch; a panic (a damaged store) fails
// that epoch alone.
func (wk *worker) reconcileSafely(ctx context.Context, ps *pathState, epoch int64) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return wk.reconcileEpoch(ctx, ps, epoch)
}

// epochWork is one epoch on its way from two sides to a stored result.
type epochWork struct {
	ps      *pathState
	epoch   int64
	pr      *pairing
	res     *owlv1.PathStats
	bd      *boundary // set when RDA reconciliation was complete enough
	remove  [2][]reconcile.Packet
	updated []*owlv1.PathStats // neighbours changed by boundary matching
	flows   bool               // per-flow data stored with the result
	sampled flowSamples        // the top flows' sampled delays (estimateSample)
	lists   *listedEpoch       // the sides' exact lists (nil: none sent one)
}

// reconcileEpoch turns both sides of one epoch into a stored result:
// estimate (LDA, then RDA where both sides sent one), per-flow results,
// boundary matching, one store transaction, then publish and release.
func (wk *worker) reconcileEpoch(ctx context.Context, ps *pathState, epoch int64) error {
	ps.mu.Lock()
	pr := ps.pending[epoch]
	var conflicts uint32
	if pr != nil {
		conflicts = pr.conflicts
	}
	ps.mu.Unlock()
	if pr == nil || !pr.complete() {
		return nil // done already
	}
	w := &epochWork{ps: ps, epoch: epoch, pr: pr, res: wk.baseResult(ps.path.Name, epoch, pr.up, pr.down)}
	w.res.ConflictingReports = conflicts
	upRDA, downRDA, ldss := pr.up.rda, pr.down.rda, [2][]byte{pr.up.Report.GetLds(), pr.down.Report.GetLds()}
	lists, err := wk.listsOf(w)
	if err != nil {
		return fmt.Errorf("rebuilding synopses from an exact list: %w", err)
	}
	if lists != nil {
		w.lists, upRDA, downRDA, ldss = lists, lists.rdas[0], lists.rdas[1], lists.ldss
		w.res.Bytes += uint64(len(pr.up.Report.GetList()) + len(pr.down.Report.GetList()))
		w.res.ExchangedBytes += uint64(len(pr.up.Report.GetList()) + len(pr.down.Report.GetList()))
	}
	upLDA, downLDA := pr.up.lda, pr.down.lda
	if lists != nil {
		upLDA, downLDA = lists.ldas[0], lists.ldas[1]
	}
	wk.estimateLDA(w.res, upLDA, downLDA)
	if upRDA != nil && downRDA != nil {
		wk.estimateRDA(ctx, w, upRDA, downRDA)
	}
	wk.estimateSample(w)
	noteSampleCost(ps, pr.up)
	wk.noteSampleRate(ps, pr.up.Report.GetCounters().GetPackets(), flowsSampled(pr))
	if w.res.Status == owlv1.ResultStatus_RESULT_STATUS_UNSPECIFIED {
		w.res.Status = owlv1.ResultStatus_RESULT_STATUS_NO_SAMPLES
	}
	markPartial(w.res, pr.up, pr.down)
	sw := store.Write{Results: []*owlv1.PathStats{w.res}, Done: []store.EpochRef{{Path: ps.path.Name, Epoch: epoch}}}
	flows := wk.topFlows(w, ldss, &sw)
	w.flows = len(sw.LDS)+len(sw.Flows) > 0
	if w.bd != nil {
		wk.matchBoundaries(w, &sw)
	}
	for _, r := range sw.Results {
		judgeClocks(r, wk.cfg.ClockUncertaintyShare)
	}
	var sizes int
	sw.Sizes, sizes = wk.sizesToStore(ps)
	shown, err := wk.storeEpoch(w, &sw)
	if err != nil {
		return err
	}
	if sw.Sizes != nil {
		ps.sizesStoredAt(sizes)
	}
	sent := wk.repl.enqueueWrite(sw)
	for _, s := range []*side{pr.up, pr.down} {
		if s.unsaved != nil {
			s.unsaved.finishAfter(sent)
		}
	}
	if late := wk.finish(w); late > 0 {
		wk.addConflicts(ps.path.Name, epoch, late)
	}
	var sketch *ddsketch.DDSketch // the one shown's sketch was made of, if it is at hand
	if w.bd != nil && w.bd.sample != nil && shown == w.res {
		sketch = w.bd.sample.sketch
	}
	wk.publish(shown, pr, sketch)
	wk.m.flowSeries.set(ps.path.Name, flows, wk.cfg.Flows.MetricsTop)
	for _, u := range w.updated {
		wk.publishUpdate(u)
	}
	wk.settle(ps, epoch)
	wk.probes.release(ps.path.Upstream, ps.path.Name, epoch)
	wk.probes.release(ps.path.Downstream, ps.path.Name, epoch)
	recycleSynopses(pr)
	return nil
}

// storeEpoch writes an epoch's result and what goes with it in one
// transaction. A result of the epoch stored already whose estimate is
// nearer to exact stays (estimatorRank): another member reconciled the
// epoch while its path changed owner and its repairs used up the probes'
// caches, so that this one could only estimate. The kept result then
// stands for this one in what is replicated and published: storeEpoch
// returns the result stored.
func (wk *worker) storeEpoch(w *epochWork, sw *store.Write) (*owlv1.PathStats, error) {
	var kept *owlv1.PathStats
	sw.Keep = func(stored, incoming *owlv1.PathStats) bool {
		if incoming != w.res || missingSide(stored) || estimatorRank(stored) <= estimatorRank(incoming) {
			return false
		}
		kept = stored
		return true
	}
	if err := wk.store.Apply(*sw); err != nil {
		return nil, fmt.Errorf("storing result: %w", err)
	}
	if kept == nil {
		return w.res, nil
	}
	wk.log.Info("a result of the epoch nearer to exact was stored already; keeping it", "path", w.ps.path.Name, "epoch", w.epoch,
		"stored", kept.GetEstimator(), "computed", w.res.GetEstimator(), "detail", w.res.GetDetail())
	for i, r := range sw.Results {
		if r == w.res {
			sw.Results[i] = kept
		}
	}
	w.bd = nil
	return kept, nil
}

// finish takes a stored epoch out of the pairing table, notes when its
// per-flow data were stored, and keeps its boundary record for its
// neighbours. It returns the conflicting reports that came after the
// result was made (they are counted in it next).
func (wk *worker) finish(w *epochWork) (late uint32) {
	ps, epoch := w.ps, w.epoch
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.dropPairing(epoch, w.pr)
	late = w.pr.conflicts - w.res.GetConflictingReports()
	if w.flows {
		ps.flowAges.note(epoch, wk.now())
	}
	if w.bd != nil {
		ps.boundaries[epoch] = w.bd
		ps.pruneBoundaries()
	}
	return late
}

// pruneBoundaries drops from memory the boundary records older than the
// path's boundaryKeep newest epochs, and the settled ones older than its
// boundaryInMemory newest (a late epoch prunes from the newest, not from
// itself). The caller holds ps.mu.
func (ps *pathState) pruneBoundaries() {
	newest := int64(math.MinInt64)
	for e := range ps.boundaries {
		newest = max(newest, e)
	}
	for e, b := range ps.boundaries {
		if e <= newest-boundaryKeep || e <= newest-boundaryInMemory && b.settled {
			delete(ps.boundaries, e)
		}
	}
}

// addConflicts counts n conflicting reports in the stored result of a
// path's epoch, and hands the result on like one changed by boundary
// matching (replicas, watchers).
func (wk *worker) addConflicts(path string, epoch int64, n uint32) {
	res, err := wk.store.UpdateResult(path, epoch, func(r *owlv1.PathStats) bool {
		r.ConflictingReports += n
		return true
	})
	if err != nil {
		wk.log.Error("counting conflicting reports in a stored result", "path", path, "epoch", epoch, "err", err)
		return
	}
	if res == nil {
		return
	}
	wk.repl.enqueue(&owlv1.EpochCopy{Path: path, Epoch: epoch, Result: res, Done: !missingSide(res)})
	wk.watchers.notify(res)
}

// matchBoundaries matches the epoch's boundary record with both
// neighbouring epochs' (whichever came first) and adds the changed records
// and results to sw.
func (wk *worker) matchBoundaries(w *epochWork, sw *store.Write) {
	path, epoch, bd := w.ps.path.Name, w.epoch, w.bd
	ref := func(e int64) store.EpochRef { return store.EpochRef{Path: path, Epoch: e} }
	if prev := wk.boundaryOf(w.ps, epoch-1); prev != nil && prev.match(bd) {
		w.updated = append(w.updated, prev.res)
		sw.Boundaries = append(sw.Boundaries, store.Boundary{EpochRef: ref(epoch - 1), Data: prev.encode()})
	}
	if next := wk.boundaryOf(w.ps, epoch+1); next != nil && bd.match(next) {
		w.updated = append(w.updated, next.res)
		sw.Boundaries = append(sw.Boundaries, store.Boundary{EpochRef: ref(epoch + 1), Data: next.encode()})
	}
	sw.Boundaries = append(sw.Boundaries, store.Boundary{EpochRef: ref(epoch), Data: bd.encode()})
	sw.DropBoundaries = append(sw.DropBoundaries, ref(epoch-boundaryKeep))
	for _, u := range w.updated {
		u.Computed = timestamppb.New(wk.now()) // changed: a watcher's since finds it
	}
	sw.Results = append(sw.Results, w.updated...)
}

// boundaryOf returns an epoch's boundary record from memory or the store.
func (wk *worker) boundaryOf(ps *pathState, epoch int64) *boundary {
	ps.mu.Lock()
	b := ps.boundaries[epoch]
	ps.mu.Unlock()
	if b != nil {
		return b
	}
	data, err := wk.store.BoundaryData(ps.path.Name, epoch)
	if err != nil || data == nil {
		return nil
	}
	res, err := wk.store.Result(ps.path.Name, epoch)
	if err != nil || res == nil {
		return nil
	}
	b, err = decodeBoundary(epoch, data, res)
	if err != nil {
		wk.log.Error("dropping unreadable boundary record", "path", ps.path.Name, "epoch", epoch, "err", err)
		return nil
	}
	ps.mu.Lock()
	ps.boundaries[epoch] = b
	ps.mu.Unlock()
	return b
}

// settle counts into the metrics the loss, reordered packets and
// duplicates of the epochs whose boundary matching is over: of epoch, just
// reconciled, and its two neighbours, those whose neighbours on both sides
// have records (two neighbours were matched when the later of them was
// reconciled; epochs can come out of order). sweep settles the rest after
// a timeout.
func (wk *worker) settle(ps *pathState, epoch int64) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for e := epoch - 1; e <= epoch+1; e++ {
		b := ps.boundaries[e]
		if b == nil || b.settled || ps.boundaries[e-1] == nil || ps.boundaries[e+1] == nil {
			continue
		}
		b.settled = true
		wk.m.settled(b.res)
	}
}

// baseResult fills what every result of a pair has.
func (wk *worker) baseResult(path string, epoch int64, up, down *side) *owlv1.PathStats {
	ep := wk.cfg.Params.Epoch
	res := &owlv1.PathStats{
		Path: path, Epoch: epoch,
		Start:    timestamppb.New(time.Unix(0, ep.StartNS(epoch))),
		Length:   durationpb.New(ep.Length),
		Computed: timestamppb.New(wk.now()),
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
		res.UpstreamClock, res.UpstreamCounters, res.UpstreamDigest = up.Report.GetClock(), up.Report.GetCounters(), up.digest
	}
	if down != nil {
		res.DownstreamClock, res.DownstreamCounters, res.DownstreamDigest = down.Report.GetClock(), down.Report.GetCounters(), down.digest
	}
	return res
}

// markPartial turns an OK result into a PARTIAL one when a side saw part
// of the epoch only, saying which and why: its loss counts packets that
// side was not there to see. A side whose capture dropped packets (its
// ring was full) may have missed some of the path's: their count is of
// every packet the capture lost, counted when the epoch closed.
func markPartial(res *owlv1.PathStats, up, down *side) {
	if res.Status != owlv1.ResultStatus_RESULT_STATUS_OK {
		return
	}
	var why []string
	for _, s := range []*side{up, down} {
		who := fmt.Sprintf("%s probe %s", roleName(s.Report.GetRole()), s.Probe)
		if p := s.Report.GetPartial(); p != "" {
			why = append(why, who+": "+p)
		}
		if n := s.Report.GetCounters().GetDropped(); n > 0 {
			why = append(why, fmt.Sprintf("%s: its capture dropped %d packets while the epoch was open (a full ring), of this path or others", who, n))
		}
	}
	if len(why) > 0 {
		res.Status, res.Detail = owlv1.ResultStatus_RESULT_STATUS_PARTIAL, strings.Join(why, "; ")
	}
}

// missingResult is the result of an epoch one side of which never came.
func (wk *worker) missingResult(path string, epoch int64, up, down *side) *owlv1.PathStats {
	res := wk.baseResult(path, epoch, up, down)
	defer judgeClocks(res, wk.cfg.ClockUncertaintyShare)
	if up == nil {
		res.Status = owlv1.ResultStatus_RESULT_STATUS_MISSING_UPSTREAM
		res.Detail = fmt.Sprintf("no report from upstream probe within %v", wk.cfg.PairTimeout)
	} else {
		res.Status = owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM
		res.Detail = fmt.Sprintf("no report from downstream probe within %v", wk.cfg.PairTimeout)
	}
	return res
}

// estimateLDA sets the LDA's estimate, as the result's estimate and in the
// LDA fields.
func (wk *worker) estimateLDA(res *owlv1.PathStats, up, down *lda.LDA) {
	est, err := lda.EstimatePair(up, down, wk.opts)
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

// estimateRDA runs the reconciliation policy (reconcile.Epoch) on the
// epoch's RDAs with the path's probes answering its repairs, and writes
// its outcome into the result. Where it fails, the LDA's estimate stays.
func (wk *worker) estimateRDA(ctx context.Context, w *epochWork, up, down *rda.RDA) {
	ctx, cancel := context.WithTimeout(ctx, wk.cfg.RDA.RequestTimeout)
	defer cancel()
	path := w.ps.path.Name
	rep := &sessionRepairs{wk: wk, ps: w.ps, epoch: w.epoch, lists: w.lists}
	in := reconcile.Input{Up: up, Down: down, StartNS: wk.cfg.Params.Epoch.StartNS(w.epoch),
		DownCopies: w.pr.down.Report.GetBoundaryCopies(), UpCopies: w.pr.up.Report.GetBoundaryCopies(),
		Log: wk.log.With("path", path, "epoch", w.epoch)}
	out, err := reconcile.Epoch(ctx, in, rep, wk.cfg.limits())
	res := w.res
	res.Rebuilds = uint32(out.Rebuilds)
	res.ExchangedBytes += rep.exchanged.Load()
	wk.m.pathSeries.add(path, pmRebuilds, float64(out.Rebuilds))
	if out.Peeled {
		res.RdaBuckets, res.Decoded = uint32(out.Buckets), out.Diff.Complete()
		wk.m.rdaOutcome(path, out.Diff.Complete(), out.Rebuilds)
		wk.noteSetDifference(w.ps, out.Diff)
	}
	if out.Computed {
		res.UnusableBuckets = uint32(out.Estimate.ExcludedBuckets)
		res.Lost, res.Duplicates, res.Reordered = float64(out.Lost), out.Duplicates, out.Reordered
		w.remove = out.Remove
	}
	if errors.Is(err, reconcile.ErrNoSamples) && out.Repaired && out.Diff.Complete() && len(out.BoundaryLost) > 0 {
		// No packet both sides saw within the epoch, yet packets sent
		// in it: those may arrive in the next epoch (sent just before
		// the end, on a slower link). Boundary matching gives the
		// epoch their delays (boundary.apply).
		res.Estimator = "rda"
		res.Detail = fmt.Sprintf("no packet arrived within the epoch: %d sent, lost or still on the way at its end", len(out.BoundaryLost))
		w.bd = &boundary{epoch: w.epoch, lost: out.BoundaryLost, extra: out.BoundaryExtra, copies: out.BoundaryCopies, res: res, at: wk.now()}
		return
	}
	if err != nil {
		wk.log.Warn("RDA reconciliation failed; keeping the LDA estimate", "path", path, "epoch", w.epoch, "err", err)
		if res.Status == owlv1.ResultStatus_RESULT_STATUS_OK {
			res.Detail = "the LDA's estimate: RDA reconciliation failed: " + err.Error()
		}
		return
	}
	est := out.Estimate
	res.Status, res.Detail = owlv1.ResultStatus_RESULT_STATUS_OK, ""
	res.MeanNs, res.StddevNs, res.Samples = est.MeanNS, est.StddevNS, uint64(est.Count)
	switch {
	case !out.Repaired:
		res.Estimator = "rda-unrepaired"
		if out.RepairErr != nil {
			res.Detail = "decoded packets' buckets left out, their timestamps not fetched: " + out.RepairErr.Error()
		}
		return
	case !out.Diff.Complete():
		res.Estimator = "rda-partial"
	default:
		res.Estimator = "rda"
	}
	w.bd = &boundary{epoch: w.epoch, lost: out.BoundaryLost, extra: out.BoundaryExtra, copies: out.BoundaryCopies,
		n: est.Count, sumNS: est.SumNS, sqNS: est.Count * (est.StddevNS*est.StddevNS + est.MeanNS*est.MeanNS),
		res: res, at: wk.now()}
}

// publish updates metrics and hands a new result to watchers; sketch is
// the result's delay sketch decoded, or nil.
func (wk *worker) publish(res *owlv1.PathStats, pr *pairing, sketch *ddsketch.DDSketch) {
	wk.m.observe(res, sketch)
	if pr != nil && pr.complete() {
		closed := max(pr.up.Report.GetClosedUnixNs(), pr.down.Report.GetClosedUnixNs())
		if closed > 0 {
			wk.m.resultDelay.Observe(wk.now().Sub(time.Unix(0, closed)).Seconds())
		}
	}
	wk.watchers.notify(res)
}

// publishUpdate hands watchers a result that changed after it was first
// published (boundary matching with a neighbouring epoch).
func (wk *worker) publishUpdate(res *owlv1.PathStats) {
	wk.m.pathSeries.latest(res)
	wk.watchers.notify(res)
}
