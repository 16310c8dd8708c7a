package collector

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// pathState is the pairing table of one path: the epochs whose sides are
// coming in, the queue of its epoch worker, and what reconciliation keeps
// between epochs. Whoever holds mu decides; store writes and stream sends
// happen after it is released.
type pathState struct {
	path netpath.Path
	// probeAt are the indexes of its upstream and downstream probes in
	// Collector.probeNames.
	probeAt [2]int
	wake    chan struct{} // signals the path's worker

	// ingestMu orders the store's pending rows of the path: it is held
	// across a side's check, store write and placement, and across a lone
	// side's removal, so that a copy of a side cannot slip between them.
	// It is taken before mu, never across a stream send.
	ingestMu sync.Mutex

	// flowKeys are the API keys of the path's recent top flows: the same
	// flows come back epoch after epoch, and their addresses' text was
	// a twentieth of the objects a collector allocated. Only the path's
	// worker goroutine uses it (flowKey).
	flowKeys map[capture.FlowKey]*owlv1.FlowKey

	mu      sync.Mutex // guards every field below
	pending map[int64]*pairing
	// held is the memory of the sides in pending (side.bytes as each
	// was placed), upstream's and downstream's: kept as sides come and
	// go, so that measuring the backlog costs a look per path, not per
	// side; paired is the part of it in complete pairings: epochs
	// waiting for the worker, or being reconciled. Changed under mu,
	// read without it.
	held       [2]atomic.Int64
	paired     atomic.Int64
	queue      []int64 // epochs with both sides in, for the worker
	boundaries map[int64]*boundary
	recentDiff []int // set difference sizes of recent epochs
	rdaBuckets int   // RDA size the probes were told to use
	ldaRows    int   // LDA rows per bank the probes were told to use
	// recentPackets are the upstream packet counts of recent epochs;
	// sampleShift the sampling rate the probes were told to use, 2^-shift.
	recentPackets []uint64
	sampleShift   int
	// sampleCost is what recent upstream reports' samples and LDS took
	// (noteSampleCost).
	sampleCost SampleCost
	// recentLDS are what recent epochs' sketches showed (LDS sizing);
	// ldsCols and ldsRows the LDS cells per row and the mask of
	// params.lds's rows the probes were told to use (rows 0: all).
	recentLDS []ldsLoad
	ldsCols   int
	ldsRows   uint32
	// ldsOff says the probes were told to send no LDS (Config.SamplingFor).
	ldsOff bool
	// sizesVersion counts the changes of the sizes above (resized),
	// sizesStored is the version stored (sizes.go).
	sizesVersion, sizesStored int
	// sized says the member holds sizes of the path beyond the
	// configured defaults: its epochs changed them, or they were restored,
	// copied from the owner, or taken at a takeover (sizes.go).
	sized bool
	// newest is the newest epoch a side came for: a size change names an
	// epoch ahead of it.
	newest int64
	// flowAges says when the epochs' per-flow data were stored, for
	// pruning by flows.retention.
	flowAges flowAges
}

// pairing is one epoch of a path whose sides have not both been combined.
type pairing struct {
	up, down *side
	first    time.Time
	timedOut bool // a missing-side result was written
	// timingOut is set while the missing-side result is being written:
	// a side that comes meanwhile is queued once that write is done, so
	// that the complete result is stored last.
	timingOut bool
	// In a cluster, at the pair timeout the owner first asks the other
	// members for the missing side (handOver): asking while it runs,
	// asked once it is done.
	asking, asked bool
	// releaseAt is when a timed-out side's cache is released if its
	// partner is still not connected then (zero: no release waits).
	releaseAt time.Time
	// conflicts counts reports of a side held that came again with other
	// content; the epoch's result counts them.
	conflicts uint32
}

// side is one probe's report of an epoch, decoded.
type side struct {
	store.Pending
	lda *lda.LDA
	rda *rda.RDA // nil when the report has none
	// ldsCfg is the parameters of the report's LDS (nil: it has none),
	// checked when it came; the worker decodes it.
	ldsCfg *lds.Config
	digest uint64 // of its content (reportDigest)
	// sample is the report's packet sample (nil: it has none).
	sample *sample.Sample
	// namesFlows says entries of sample name their flows
	// (nameSampleFlows), for the top flows' sampled delays.
	namesFlows bool
	// listed says the report sent its exact list in place of synopses:
	// lda, sample and ldsCfg were built from it, the RDA and LDS are
	// built when the epoch is reconciled.
	listed bool
	// size is side.bytes when the side was placed (pathState.held).
	size int64
	// unsaved is set on a side placed without a pending row of its own:
	// its probe is acknowledged once the epoch's result is stored, or
	// the side is (unsaved.done). Nil: the side was stored when it came.
	unsaved *saveWait
}

// saveWait is the acknowledgement a side kept in memory only waits for:
// done is closed once the epoch's result is stored and sent to the
// path's replica (err nil), or once the side was written as a pending
// report after all (err nil) or could not be (err set).
type saveWait struct {
	once sync.Once
	done chan struct{}
	err  error
}

func newSaveWait() *saveWait { return &saveWait{done: make(chan struct{})} }

// waiting says the wait is set and has not ended.
func (w *saveWait) waiting() bool {
	if w == nil {
		return false
	}
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

// finish ends the wait with err (the first call counts).
func (w *saveWait) finish(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.done)
	})
}

// finishAfter ends the wait once sent is closed.
func (w *saveWait) finishAfter(sent <-chan struct{}) {
	select {
	case <-sent:
		w.finish(nil)
	default:
		go func() {
			<-sent
			w.finish(nil)
		}()
	}
}

func newPathState(p netpath.Path, rdaBuckets, ldaRows, ldsCols int) *pathState {
	return &pathState{path: p, pending: map[int64]*pairing{}, wake: make(chan struct{}, 1),
		boundaries: map[int64]*boundary{}, rdaBuckets: rdaBuckets, ldaRows: ldaRows, ldsCols: ldsCols}
}

// decodeSide decodes a report's synopses.
func decodeSide(p store.Pending, prm params.Params) (*side, error) {
	if len(p.Report.GetList()) > 0 {
		s := &side{Pending: p, digest: reportDigest(p.Report)}
		if err := decodeList(s, prm); err != nil {
			return nil, err
		}
		var err error
		if s.namesFlows, err = nameSampleFlows(s, prm.LDS.Seed); err != nil {
			return nil, err
		}
		return s, nil
	}
	l := decodedLDAs.Get().(*lda.LDA)
	if err := l.UnmarshalBinary(p.Report.GetLda()); err != nil {
		return nil, err
	}
	s := &side{Pending: p, lda: l, digest: reportDigest(p.Report)}
	var err error
	if b := p.Report.GetRda(); len(b) > 0 {
		r := decodedRDAs.Get().(*rda.RDA)
		if err := r.UnmarshalBinary(b); err != nil {
			return nil, err
		}
		s.rda = r
	}
	if b := p.Report.GetSample(); len(b) > 0 {
		smp := decodedSamples.Get().(*sample.Sample)
		if err := smp.UnmarshalBinary(b); err != nil {
			return nil, err
		}
		s.sample = smp
	}
	if b := p.Report.GetLds(); len(b) > 0 {
		// Its shape checked now, its cells read when used: a decoded
		// sketch is three to ten times its wire form, and sides may
		// wait long. Cells that do not decode then cost the epoch its
		// per-flow results only (flows_note says so).
		cfg, err := lds.Shape(b)
		if err != nil {
			return nil, err
		}
		s.ldsCfg = &cfg
	}
	if s.namesFlows, err = nameSampleFlows(s, prm.LDS.Seed); err != nil {
		return nil, err
	}
	return s, nil
}

// decodedRDAs, decodedLDAs and decodedSamples are what reports are
// decoded into, used again once their epoch is stored (recycleSynopses):
// they were a ninth, a twentieth and an eighth of the bytes a collector
// under load allocated.
var (
	decodedRDAs    = sync.Pool{New: func() any { return &rda.RDA{} }}
	decodedLDAs    = sync.Pool{New: func() any { return &lda.LDA{} }}
	decodedSamples = sync.Pool{New: func() any { return &sample.Sample{} }}
)

// recycleSynopses hands the decoded RDAs, LDAs and samples of a pairing
// that has left its path's table, its epoch stored, back for other
// reports. Nothing made from them keeps their storage: a join copies
// what it keeps.
func recycleSynopses(pr *pairing) {
	for _, s := range []*side{pr.up, pr.down} {
		if s == nil {
			continue
		}
		if s.rda != nil {
			decodedRDAs.Put(s.rda)
			s.rda = nil
		}
		if s.lda != nil {
			decodedLDAs.Put(s.lda)
			s.lda = nil
		}
		if s.sample != nil {
			decodedSamples.Put(s.sample)
			s.sample = nil
		}
	}
}

func isUpstream(s *side) bool { return s.Report.GetRole() == owlv1.Role_ROLE_UPSTREAM }

// pairingFor returns the epoch's pairing, made if needed. ps.mu is held.
func (ps *pathState) pairingFor(epoch int64, at time.Time) *pairing {
	pr := ps.pending[epoch]
	if pr == nil {
		pr = &pairing{first: at}
		ps.pending[epoch] = pr
	}
	ps.newest = max(ps.newest, epoch)
	return pr
}

// has says whether the pairing holds a side of the role of s.
func (pr *pairing) has(s *side) bool { return pr.held(s) != nil }

// held returns the side of the role of s the pairing holds, or nil.
func (pr *pairing) held(s *side) *side {
	if pr == nil {
		return nil
	}
	if isUpstream(s) {
		return pr.up
	}
	return pr.down
}

// unsaved says a side of the pairing is kept in memory only.
func (pr *pairing) unsaved() bool {
	return (pr.up != nil && pr.up.unsaved.waiting()) || (pr.down != nil && pr.down.unsaved.waiting())
}

// unset takes the side of the role of s out.
func (pr *pairing) unset(s *side) {
	if isUpstream(s) {
		pr.up = nil
	} else {
		pr.down = nil
	}
}

func (pr *pairing) set(s *side) {
	if isUpstream(s) {
		pr.up = s
	} else {
		pr.down = s
	}
}

func (pr *pairing) complete() bool { return pr.up != nil && pr.down != nil }

// roleIndex is the index of the role of s in pathState.held.
func roleIndex(s *side) int {
	if isUpstream(s) {
		return 0
	}
	return 1
}

// hold puts s into pr, in place of any side of its role, and counts its
// memory. ps.mu is held.
func (ps *pathState) hold(pr *pairing, s *side) {
	ps.uncount(pr)
	s.size = int64(s.bytes())
	pr.set(s)
	ps.count(pr)
}

// unhold takes s out of pr if pr holds it. ps.mu is held.
func (ps *pathState) unhold(pr *pairing, s *side) {
	if pr.held(s) == s {
		ps.uncount(pr)
		pr.unset(s)
		ps.count(pr)
	}
}

// dropPairing takes the epoch's pairing, if it is pr, out of the table
// with its sides. ps.mu is held.
func (ps *pathState) dropPairing(epoch int64, pr *pairing) {
	if pr == nil || ps.pending[epoch] != pr {
		return
	}
	delete(ps.pending, epoch)
	ps.uncount(pr)
}

// putPairing puts back a pairing dropPairing took out, unless the epoch
// has another one since. ps.mu is held.
func (ps *pathState) putPairing(epoch int64, pr *pairing) {
	if ps.pending[epoch] != nil {
		return
	}
	ps.pending[epoch] = pr
	ps.count(pr)
}

// count adds the memory of pr's sides to held, and to paired when pr is
// complete; uncount takes it away. ps.mu is held.
func (ps *pathState) count(pr *pairing)   { ps.addHeld(pr, 1) }
func (ps *pathState) uncount(pr *pairing) { ps.addHeld(pr, -1) }

func (ps *pathState) addHeld(pr *pairing, sign int64) {
	for _, s := range []*side{pr.up, pr.down} {
		if s != nil {
			ps.held[roleIndex(s)].Add(sign * s.size)
		}
	}
	if pr.complete() {
		ps.paired.Add(sign * (pr.up.size + pr.down.size))
	}
}

// enqueue schedules an epoch of a path whose two sides are in. ps.mu is held.
func (ps *pathState) enqueue(epoch int64) {
	ps.queue = append(ps.queue, epoch)
	select {
	case ps.wake <- struct{}{}:
	default:
	}
}

// place puts a side into the table, queueing the epoch when both are in.
// It reports false when that side is there already (a copy).
func (ps *pathState) place(s *side) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pr := ps.pairingFor(s.Report.GetEpoch(), s.Received)
	if pr.has(s) {
		return false
	}
	ps.hold(pr, s)
	if pr.complete() && !pr.timingOut {
		ps.enqueue(s.Report.GetEpoch())
	}
	return true
}

// pairSide puts a checked report into its path's table. With unsaved
// (a report from a probe's stream, which keeps it until acknowledged),
// the side is kept in memory only: the *saveWait returned ends once the
// epoch's result is stored, or once the side, still alone after
// write_lone_after, was stored by the sweep; most sides so never cost a
// store write of their own. Without, the side is stored and its copy
// queued for the path's replica: the channel returned is closed once the
// copy is sent or given up. A report whose side is in already, or whose
// epoch was combined already (sent again after a reconnect), is counted
// and dropped (a side held unsaved: its wait is returned); when its
// content differs from the side held or used, it is a rejection and the
// epoch's result counts it (conflicting_reports).
func (c *Collector) pairSide(ps *pathState, s *side, unsaved bool) (<-chan struct{}, *saveWait, error) {
	path, epoch := ps.path.Name, s.Report.GetEpoch()
	ps.ingestMu.Lock()
	defer ps.ingestMu.Unlock()
	ps.mu.Lock()
	pr := ps.pending[epoch]
	held := pr.held(s)
	conflict := held != nil && held.digest != s.digest
	resultStored := false
	if conflict {
		pr.conflicts++
		// A missing-side result is stored (timeOut counts the
		// conflicts that come while it writes one).
		resultStored = pr.timedOut
	}
	ps.mu.Unlock()
	switch {
	case conflict:
		if resultStored {
			c.worker.addConflicts(path, epoch, 1)
		}
		return nil, nil, c.conflicting(s, held.digest, "held")
	case held != nil:
		c.m.dupReports.Inc()
		return nil, held.unsaved, nil
	case pr == nil:
		res, err := c.store.Result(path, epoch)
		if err != nil {
			return nil, nil, err
		}
		if res != nil && !missingSide(res) {
			c.probes.release(s.Probe, path, epoch)
			return nil, nil, c.usedAlready(s, res)
		}
	}
	if unsaved {
		s.unsaved = newSaveWait()
		ps.place(s)
		return nil, s.unsaved, nil
	}
	if err := c.store.PutPending(s.Pending); err != nil {
		return nil, nil, fmt.Errorf("storing report: %w", err)
	}
	copied := c.repl.enqueueWait(sideCopy(s.Pending))
	if !ps.place(s) {
		c.m.dupReports.Inc() // a copy came in meanwhile
	}
	return copied, nil, nil
}

// saveUnsaved writes as pending reports the sides of an epoch kept in
// memory only, and lets their probes be acknowledged: the worker's after
// the epoch failed to reconcile, the sweep's (lone) for a side alone for
// write_lone_after, unless its other side came meanwhile. A side that
// cannot be written leaves the table (its probe, not acknowledged, sends
// it again).
func saveUnsaved(st *store.Store, repl *replicator, ps *pathState, epoch int64, lone bool) {
	ps.ingestMu.Lock()
	defer ps.ingestMu.Unlock()
	ps.mu.Lock()
	pr := ps.pending[epoch]
	var sides []*side
	if pr != nil && !(lone && pr.complete()) {
		for _, s := range []*side{pr.up, pr.down} {
			if s != nil && s.unsaved.waiting() {
				sides = append(sides, s)
			}
		}
	}
	ps.mu.Unlock()
	for _, s := range sides {
		err := st.PutPending(s.Pending)
		if err != nil {
			ps.mu.Lock()
			ps.unhold(pr, s)
			ps.mu.Unlock()
			s.unsaved.finish(fmt.Errorf("storing report: %w", err))
			continue
		}
		s.unsaved.finishAfter(repl.enqueueWait(sideCopy(s.Pending)))
	}
}

// usedAlready takes a report of an epoch whose result is stored: the same
// content again is a duplicate; other content is a conflict, counted in
// the stored result. A result stored before digests (0) tells nothing.
func (c *Collector) usedAlready(s *side, res *owlv1.PathStats) error {
	used := res.GetUpstreamDigest()
	if !isUpstream(s) {
		used = res.GetDownstreamDigest()
	}
	if used == 0 || used == s.digest {
		c.m.dupReports.Inc()
		return nil
	}
	c.worker.addConflicts(res.GetPath(), res.GetEpoch(), 1)
	return c.conflicting(s, used, "used")
}

// conflicting counts a report whose content differs from the side of its
// epoch held or used (whose digest is other), and is the rejection the
// probe gets: it is acknowledged, never used.
func (c *Collector) conflicting(s *side, other uint64, heldOrUsed string) error {
	r := s.Report
	c.m.conflicting.WithLabelValues(s.Probe).Inc()
	c.m.rejected.WithLabelValues("conflicting").Inc()
	return &rejection{fmt.Sprintf("report of path %q epoch %d differs from the one %s: content digest %016x, the %s one's %016x (was the probe restarted with other settings, or did another send as it?); the result keeps the first and counts this one in conflicting_reports",
		r.GetPath(), r.GetEpoch(), heldOrUsed, s.digest, heldOrUsed, other)}
}

// restore reloads the reports still waiting for their other side.
func (c *Collector) restore() error {
	pend, bad, err := c.store.AllPending()
	if err != nil {
		return fmt.Errorf("loading pending reports: %w", err)
	}
	for _, e := range bad {
		c.log.Error("dropping unreadable pending report", "err", e)
	}
	n := 0
	for _, p := range pend {
		ps := c.paths[p.Report.GetPath()]
		if ps == nil {
			c.log.Warn("dropping pending report of a path no longer configured", "path", p.Report.GetPath())
			_ = c.store.DeletePending(p.Report.GetPath(), p.Report.GetEpoch())
			continue
		}
		s, err := decodeSide(p, c.cfg.Params)
		if err != nil {
			continue // it was checked when it came
		}
		// The pair timeout counts from now: the other side's probe has
		// had no chance to send while this collector was down.
		ps.hold(ps.pairingFor(p.Report.GetEpoch(), c.now()), s)
		n++
	}
	if n > 0 {
		c.log.Info("restored pending reports", "reports", n)
	}
	// Pairs whose both sides were stored but not yet combined.
	for _, ps := range c.paths {
		var ready []int64
		for e, pr := range ps.pending {
			if pr.complete() {
				ready = append(ready, e)
			}
		}
		slices.Sort(ready)
		for _, e := range ready {
			ps.enqueue(e)
		}
	}
	return nil
}

// sweepPlan is what a sweep of one path decided under its lock.
type sweepPlan struct {
	save    []int64      // epochs whose lone side to store (saveUnsaved)
	timeOut []int64      // epochs to write a missing-side result for
	drop    []int64      // lone epochs to forget
	ask     []handOverAt // epochs whose missing side to ask the cluster for
	release []int64      // timed-out epochs whose side's cache to release if its partner is still away
}

type handOverAt struct {
	epoch int64
	role  owlv1.Role
}

// sweep writes missing-side results for epochs whose other side did not come
// within PairTimeout, and forgets lone reports after PairRetention, and
// probes no path names gone for limits.forget_probes_after.
func (c *Collector) sweep() {
	now := c.now()
	for _, ps := range c.paths {
		// A side waits for no probe that said its capture files are
		// done (its reports all came).
		done := [2]bool{c.probes.sourcesDone(ps.path.Upstream), c.probes.sourcesDone(ps.path.Downstream)}
		plan := c.planSweep(ps, now, done)
		for _, e := range plan.save {
			saveUnsaved(c.store, c.repl, ps, e, true)
		}
		for _, e := range plan.timeOut {
			c.timeOut(ps, e)
		}
		for _, e := range plan.drop {
			c.forget(ps, e)
		}
		for _, a := range plan.ask {
			go c.handOver(ps, a.epoch, a.role)
		}
		for _, e := range plan.release {
			c.releaseIfPartnerAway(ps, e)
		}
	}
	c.probes.forgetIdle()
}

// planSweep decides, under the path's lock, what a sweep does to it.
// done says which of the path's probes, upstream and downstream, said
// their capture files are done: a side alone waits for them no more.
func (c *Collector) planSweep(ps *pathState, now time.Time, done [2]bool) sweepPlan {
	var plan sweepPlan
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for e, pr := range ps.pending {
		age := now.Sub(pr.first)
		if pr.complete() || pr.timingOut {
			continue // the worker has it, or a sweep does
		}
		partnerDone := pr.up == nil && done[0] || pr.down == nil && done[1]
		if pr.unsaved() {
			if age >= min(c.cfg.WriteLoneAfter, c.cfg.PairTimeout/2) || partnerDone {
				plan.save = append(plan.save, e)
			}
			continue // stored before anything else is done with it
		}
		due := age >= c.cfg.PairTimeout || partnerDone
		if due && c.cl != nil && !pr.asked {
			if !pr.asking {
				pr.asking = true
				role := owlv1.Role_ROLE_UPSTREAM
				if pr.up != nil {
					role = owlv1.Role_ROLE_DOWNSTREAM
				}
				plan.ask = append(plan.ask, handOverAt{e, role})
			}
			continue
		}
		if !pr.timedOut && due {
			pr.timingOut = true
			plan.timeOut = append(plan.timeOut, e)
		}
		if pr.timedOut && !pr.releaseAt.IsZero() && !now.Before(pr.releaseAt) {
			pr.releaseAt = time.Time{}
			plan.release = append(plan.release, e)
		}
		if pr.timedOut && age >= c.cfg.PairTimeout+c.cfg.PairRetention {
			plan.drop = append(plan.drop, e)
		}
	}
	// Boundary matching waits for the next epoch only so long.
	settled := false
	for _, b := range ps.boundaries {
		if !b.settled && now.Sub(b.at) >= c.cfg.PairTimeout {
			b.settled = true
			c.m.settled(b.res)
			settled = true
		}
	}
	if settled {
		ps.pruneBoundaries()
	}
	return plan
}

// releaseIfPartnerAway releases the cache of a timed-out epoch's lone
// side whose partner is still not connected a pair_timeout after the
// timeout; a side that came since completes the epoch, whose worker
// releases both.
func (c *Collector) releaseIfPartnerAway(ps *pathState, epoch int64) {
	ps.mu.Lock()
	pr := ps.pending[epoch]
	lone := pr != nil && pr.timedOut && !pr.complete()
	var up, down *side
	if lone {
		up, down = pr.up, pr.down
	}
	ps.mu.Unlock()
	for _, s := range []*side{up, down} {
		if s != nil && c.probes.session(ps.path.Other(s.Probe)) == nil {
			c.probes.release(s.Probe, ps.path.Name, epoch)
			c.log.Info("released a lone side's cache: its partner did not come back", "path", ps.path.Name, "epoch", epoch, "probe", s.Probe)
		}
	}
}

// forget drops a lone side kept past its retention, from memory and the
// store, unless a side came for the epoch meanwhile.
func (c *Collector) forget(ps *pathState, epoch int64) {
	ps.ingestMu.Lock()
	defer ps.ingestMu.Unlock()
	ps.mu.Lock()
	pr := ps.pending[epoch]
	lone := pr != nil && pr.timedOut && !pr.complete() && !pr.timingOut && !pr.asking
	if lone {
		ps.dropPairing(epoch, pr)
	}
	ps.mu.Unlock()
	if !lone {
		return
	}
	for _, s := range []*side{pr.up, pr.down} {
		if s != nil {
			c.probes.release(s.Probe, ps.path.Name, epoch) // kept since the timeout, if its partner was connected
		}
	}
	if err := c.store.DeletePending(ps.path.Name, epoch); err != nil {
		c.log.Error("dropping lone report", "path", ps.path.Name, "epoch", epoch, "err", err)
		return
	}
	c.repl.enqueue(&owlv1.EpochCopy{Path: ps.path.Name, Epoch: epoch, Done: true})
}

// timeOut writes the missing-side result of an epoch, publishes it,
// queues its copy for the path's replica and releases the side that came.
// A side that came meanwhile is queued now. A complete result stored
// already (another member paired the epoch and sent its copy) stays: the
// side is used up.
func (c *Collector) timeOut(ps *pathState, epoch int64) {
	ps.mu.Lock()
	pr := ps.pending[epoch]
	if pr.complete() { // the other side came since the sweep decided
		pr.timingOut = false
		ps.enqueue(epoch)
		ps.mu.Unlock()
		return
	}
	up, down, conflicts := pr.up, pr.down, pr.conflicts
	ps.mu.Unlock()
	res := c.worker.missingResult(ps.path.Name, epoch, up, down)
	res.ConflictingReports = conflicts
	paired := false
	err := c.store.Apply(store.Write{Results: []*owlv1.PathStats{res}, Keep: func(stored, _ *owlv1.PathStats) bool {
		paired = !missingSide(stored)
		return paired
	}})
	ps.mu.Lock()
	pr.timingOut = false
	pr.timedOut = err == nil
	if pr.complete() {
		ps.enqueue(epoch)
	}
	late := pr.conflicts - conflicts // came while the result was written
	ps.mu.Unlock()
	if err != nil {
		c.log.Error("storing missing-side result", "path", ps.path.Name, "epoch", epoch, "err", err)
		return
	}
	if late > 0 && !paired {
		c.worker.addConflicts(ps.path.Name, epoch, late)
	}
	// The side that came keeps its probe's cache while the other probe
	// is connected: that side is then most likely behind (a capture
	// replayed slower, a probe catching up on its spool), and when it
	// comes within pair_retention the epoch needs the repairs (forget
	// releases the cache otherwise). With the other probe gone the cache
	// is released a pair_timeout later unless it is back by then (a
	// probe restarting, which sends the side late), so that a file
	// source is not held back long by a partner that may never come.
	// A partner whose capture files are done sends nothing more: the
	// cache is released at once.
	cache := "kept"
	for _, s := range []*side{up, down} {
		if s == nil {
			continue
		}
		switch other := ps.path.Other(s.Probe); {
		case c.probes.sourcesDone(other):
			c.probes.release(s.Probe, ps.path.Name, epoch)
			cache = "released: the other probe's capture files are done"
		case c.probes.session(other) == nil:
			ps.mu.Lock()
			pr.releaseAt = c.now().Add(c.cfg.PairTimeout)
			ps.mu.Unlock()
			cache = "kept while its partner may come back"
		}
	}
	if !paired {
		c.log.Warn("epoch missing a side", "path", ps.path.Name, "epoch", epoch, "status", res.Status, "repair_cache", cache)
		c.repl.enqueue(&owlv1.EpochCopy{Path: ps.path.Name, Epoch: epoch, Result: res})
		c.worker.publish(res, nil, nil)
	}
}

// takePending gives away the lone side of a path's epoch to the member
// that asks: it holds the other side, so the two make a pair there. (The
// asker thinks it owns the path; this one may not agree yet, just after a
// change of members.) A side is kept while this collector is itself
// asking for the epoch's other side, so that two members never swap
// their sides. Without the side in its table, a member gives away its
// copy of it, kept as the path's replica (the owner may be gone).
func (c *Collector) takePending(path string, epoch int64, role owlv1.Role) (*owlv1.TakePendingResponse, error) {
	ps := c.paths[path]
	if ps == nil {
		return nil, fmt.Errorf("path %q is not configured", path)
	}
	ps.ingestMu.Lock()
	defer ps.ingestMu.Unlock()
	ps.mu.Lock()
	pr := ps.pending[epoch]
	if pr != nil && (pr.complete() || pr.asking || pr.timingOut || pr.unsaved()) {
		ps.mu.Unlock()
		return &owlv1.TakePendingResponse{}, nil // paired here, or busy (a side not yet stored)
	}
	var s *side
	if pr != nil {
		s = pr.up
		if role == owlv1.Role_ROLE_DOWNSTREAM {
			s = pr.down
		}
	}
	if s == nil {
		ps.mu.Unlock()
		return c.takeReplicaSide(path, epoch, role)
	}
	ps.dropPairing(epoch, pr)
	ps.mu.Unlock()
	if err := c.store.DeletePending(path, epoch); err != nil {
		ps.mu.Lock()
		ps.putPairing(epoch, pr) // still here to hand over later
		ps.mu.Unlock()
		return nil, fmt.Errorf("forgetting the side handed over: %w", err)
	}
	return &owlv1.TakePendingResponse{Probe: s.Probe, Report: s.Report}, nil
}

// takeReplicaSide gives away this member's copy of a lone side, if any.
// The caller holds the path's ingestMu.
func (c *Collector) takeReplicaSide(path string, epoch int64, role owlv1.Role) (*owlv1.TakePendingResponse, error) {
	p, err := c.store.TakeReplicaSide(path, epoch, role)
	if err != nil {
		return nil, fmt.Errorf("taking the copy of a side: %w", err)
	}
	if p == nil {
		return &owlv1.TakePendingResponse{}, nil
	}
	return &owlv1.TakePendingResponse{Probe: p.Probe, Report: p.Report}, nil
}
