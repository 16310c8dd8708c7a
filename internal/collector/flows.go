package collector

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/lds"
)

// estimateFlow estimates one flow from an epoch's two sketches.
func (wk *worker) estimateFlow(path string, epoch int64, up, down *lds.LDS, f capture.FlowKey) *owlv1.FlowStats {
	return wk.estimateFlowAt(wk.flowStats(path, epoch, netpath.FlowToProto(f), nil), up, down, f)
}

// flowStats is a flow's result before its estimates: key is its API key,
// start its epoch's start (nil: made here); results of one epoch share
// them, as results do once stored.
func (wk *worker) flowStats(path string, epoch int64, key *owlv1.FlowKey, start *timestamppb.Timestamp) *owlv1.FlowStats {
	if start == nil {
		start = timestamppb.New(time.Unix(0, wk.cfg.Params.Epoch.StartNS(epoch)))
	}
	return &owlv1.FlowStats{Path: path, Epoch: epoch, Flow: key, Start: start, Epochs: 1}
}

// estimateFlowAt fills in fs, of flow f, from an epoch's sketches.
func (wk *worker) estimateFlowAt(fs *owlv1.FlowStats, up, down *lds.LDS, f capture.FlowKey) *owlv1.FlowStats {
	est, err := lds.EstimateFlow(up, down, f.Hash(wk.cfg.Params.LDS.Seed), wk.weightOf(f), lds.DefaultOptions())
	fs.Packets, fs.Lost = est.UpPackets, est.Lost
	if err == nil {
		fs.Estimated = true
		fs.MeanNs, fs.StddevNs, fs.Samples, fs.Observed = est.MeanNS, est.StddevNS, est.Samples, est.Observed
		if est.Observed > 0 {
			// The mean is of the packets in the cells: a row that
			// samples 1/8 of them stands for 8 times as many, but its
			// mean is no better for it.
			fs.StderrNs = est.StddevNS / math.Sqrt(est.Observed)
		}
	}
	return fs
}

// epochSketches decodes an epoch's two sketches into upL and downL, and
// says whether per-flow estimates can use them: both decode, and have the
// same shape (the path's LDS was not resized between the two sides'
// epochs; the result's flows_note says when it was). An epoch whose
// sketches differ in shape still sizes the path's next epochs
// (noteLDSLoad) by its upstream sketch; one whose sketches agree does so
// in topFlows, after its repairs.
func (wk *worker) epochSketches(ew *epochWork, ldss [2][]byte, upL, downL *lds.LDS) bool {
	err1 := upL.UnmarshalBinary(ldss[0])
	err2 := downL.UnmarshalBinary(ldss[1])
	if err := errors.Join(err1, err2); err != nil { // their shapes were checked when they came, not their cells
		ew.res.FlowsNote = fmt.Sprintf("no per-flow results: an LDS did not decode: %v", err)
		wk.log.Error("decoding the epoch's sketches", "path", ew.ps.path.Name, "epoch", ew.epoch, "err", err)
		return false
	}
	if err := upL.Config().Compatible(downL.Config()); err != nil {
		wk.noteLDSLoad(ew.ps, wk.ldsLoad(ew, upL, nil))
		ew.res.FlowsNote = fmt.Sprintf("no per-flow results: the sides' LDS differ (%d and %d cells per row)", upL.Config().Cols, downL.Config().Cols)
		wk.log.Warn("skipping per-flow results", "path", ew.ps.path.Name, "epoch", ew.epoch, "err", err)
		return false
	}
	return true
}

// topFlows repairs the epoch's sketches with what RDA reconciliation found,
// estimates the flows the two sides' RAP tables name, from the sketches
// and from the flows' sampled delays, and adds them and the repaired
// sketches to w. It returns the results, heaviest first.
func (wk *worker) topFlows(ew *epochWork, ldss [2][]byte, w *store.Write) []*owlv1.FlowStats {
	up, down, path, epoch := ew.pr.up, ew.pr.down, ew.ps.path.Name, ew.epoch
	var upL, downL *lds.LDS
	if up.ldsCfg != nil && down.ldsCfg != nil {
		upL, downL = sketches.Get().(*lds.LDS), sketches.Get().(*lds.LDS)
		defer sketches.Put(upL)
		defer sketches.Put(downL)
		if !wk.epochSketches(ew, ldss, upL, downL) {
			upL, downL = nil, nil
		}
	}
	sampled := ew.sampled
	if upL == nil && sampled.delays == nil {
		return nil
	}
	remove := ew.remove
	repaired := len(remove[0])+len(remove[1]) > 0
	if upL != nil {
		removeFromLDS(upL, downL, remove)
		wk.noteLDSLoad(ew.ps, wk.ldsLoad(ew, upL, downL))
	}
	// The repaired sketches hold only the delivered packets: a flow's
	// loss is the packets of it that reconciliation found upstream only.
	// Without sketches, that is the loss where reconciliation was exact.
	var lost map[uint64]float64
	if repaired || upL == nil && ew.res.GetDecoded() {
		lost = lostByFlow(remove[reconcile.Upstream])
	}
	seen := map[uint64]bool{}
	var out []*owlv1.FlowStats
	start := timestamppb.New(time.Unix(0, wk.cfg.Params.Epoch.StartNS(epoch)))
	for _, s := range []*side{up, down} {
		for _, tf := range s.Report.GetTopFlows() {
			f, err := netpath.TopFlowKey(tf)
			if err != nil {
				continue
			}
			h := f.Hash(wk.cfg.Params.LDS.Seed)
			if seen[h] {
				continue
			}
			seen[h] = true
			fs := wk.flowStats(path, epoch, ew.ps.flowKey(f), start)
			if upL != nil {
				wk.estimateFlowAt(fs, upL, downL, f)
			}
			fs.Top = true
			if lost != nil {
				fs.Lost = lost[h]
				fs.Packets += fs.Lost
			}
			// The count-min estimate is an upper bound like the RAP
			// counter; the smaller of the two is the better.
			if p := float64(tf.GetPackets()); p > 0 && (p < fs.Packets || upL == nil) {
				fs.Packets = p
			}
			applyFlowSample(fs, sampled.delays[h], sampled, wk.cfg.Flows.SampleMinDelays)
			out = append(out, fs)
			w.Flows = append(w.Flows, store.FlowResult{Hash: h, Stats: fs})
		}
	}
	slices.SortFunc(out, func(a, b *owlv1.FlowStats) int { return cmp.Compare(b.GetPackets(), a.GetPackets()) })
	if upL != nil {
		// Kept in the pair form, a fifth to a quarter of the two wire
		// forms (compatible: checked in epochSketches).
		pb, _ := lds.AppendPair(nil, upL, downL)
		w.LDS = append(w.LDS, store.LDSPair{EpochRef: store.EpochRef{Path: path, Epoch: epoch}, Pair: pb})
	}
	return out
}

// flowKey is f as the API gives it, kept for the path's next epochs (at
// most flowKeysKept flows). Only the path's worker goroutine calls it.
func (ps *pathState) flowKey(f capture.FlowKey) *owlv1.FlowKey {
	if k, ok := ps.flowKeys[f]; ok {
		return k
	}
	if ps.flowKeys == nil || len(ps.flowKeys) >= flowKeysKept {
		ps.flowKeys = make(map[capture.FlowKey]*owlv1.FlowKey)
	}
	k := netpath.FlowToProto(f)
	ps.flowKeys[f] = k
	return k
}

// flowKeysKept bounds a path's kept flow keys: a few epochs' top flows.
const flowKeysKept = 256

// decodeLDSPair decodes a stored pair of sketches, of either form.
func decodeLDSPair(p store.LDSPair) (up, down *lds.LDS, err error) {
	if p.Pair != nil {
		return lds.DecodePair(p.Pair)
	}
	up, err1 := lds.Decode(p.Up)
	down, err2 := lds.Decode(p.Down)
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, err
	}
	return up, down, nil
}

// pruneFlows drops the sketches and per-flow results that were stored
// longer than the flow retention ago, by the collector's clock: replays
// of old captures keep theirs for the retention after they came, and an
// epoch far ahead (a probe's clock gone wrong) takes no other's with it.
func (wk *worker) pruneFlows() {
	cutoff := wk.now().Add(-wk.cfg.Flows.Retention)
	for name, ps := range wk.paths {
		ps.mu.Lock()
		drop := ps.flowAges.expire(cutoff)
		ps.mu.Unlock()
		if len(drop) == 0 {
			continue
		}
		if _, err := wk.store.DeleteFlows(name, drop); err != nil {
			wk.log.Error("pruning per-flow data", "path", name, "err", err)
		}
	}
}

// flowAges says when the per-flow data of a path's epochs were stored, in
// runs of nearby epochs stored within a slot of time of each other: a
// path measured live, or a replay, makes about one run per slot, so that
// 1000 paths keep a few tens of thousands of runs whatever their epochs.
// Data are dropped up to a slot after their retention.
type flowAges struct {
	runs []flowRun // oldest first (by first)
}

// flowRun is epochs lo..hi whose per-flow data were stored between first
// and last (the epochs between that are not of the run, if any, are
// another run's or none's).
type flowRun struct {
	lo, hi      int64
	first, last time.Time
}

const (
	// flowSlot is how long a run takes more epochs.
	flowSlot = time.Minute
	// flowGap is how far from a run an epoch may be and join it.
	flowGap = 64
	// flowJoin is how many of the newest runs an epoch may join: a few
	// streams of epochs stored at once (live, and a replay) each keep
	// their run.
	flowJoin = 4
)

// note records that an epoch's per-flow data were stored at t.
func (a *flowAges) note(epoch int64, t time.Time) {
	for i := len(a.runs) - 1; i >= max(0, len(a.runs)-flowJoin); i-- {
		r := &a.runs[i]
		if t.Sub(r.first) < flowSlot && epoch >= r.lo-flowGap && epoch <= r.hi+flowGap {
			r.lo, r.hi = min(r.lo, epoch), max(r.hi, epoch)
			if t.After(r.last) {
				r.last = t
			}
			return
		}
	}
	a.runs = append(a.runs, flowRun{lo: epoch, hi: epoch, first: t, last: t})
}

// expire takes out the runs last stored before cutoff and returns their
// epochs, less those of the runs kept (stored again since).
func (a *flowAges) expire(cutoff time.Time) []store.EpochRange {
	var gone []store.EpochRange
	kept := a.runs[:0]
	for _, r := range a.runs {
		if r.last.Before(cutoff) {
			gone = append(gone, store.EpochRange{First: r.lo, Last: r.hi})
		} else {
			kept = append(kept, r)
		}
	}
	clear(a.runs[len(kept):])
	a.runs = kept
	if len(gone) == 0 {
		return nil
	}
	for _, r := range kept {
		gone = cut(gone, r.lo, r.hi)
	}
	return gone
}

// cut takes epochs lo..hi out of the ranges.
func cut(rs []store.EpochRange, lo, hi int64) []store.EpochRange {
	out := rs[:0:0]
	for _, r := range rs {
		if r.Last < lo || r.First > hi {
			out = append(out, r)
			continue
		}
		if r.First < lo {
			out = append(out, store.EpochRange{First: r.First, Last: lo - 1})
		}
		if r.Last > hi {
			out = append(out, store.EpochRange{First: hi + 1, Last: r.Last})
		}
	}
	return out
}

// loadFlowAges rebuilds each path's flowAges from the store at start: the
// epochs with per-flow data, in runs of nearby epochs, each stored when
// the result of its newest epoch was computed (now, for a result without
// that time).
func (c *Collector) loadFlowAges() error {
	now := c.now()
	for name, ps := range c.paths {
		var runs []flowRun
		err := c.store.FlowEpochs(name, func(e int64) bool {
			if n := len(runs); n > 0 && e <= runs[n-1].hi+flowGap {
				runs[n-1].hi = e
			} else {
				runs = append(runs, flowRun{lo: e, hi: e})
			}
			return true
		})
		if err != nil {
			return fmt.Errorf("reading the epochs with per-flow data of %q: %w", name, err)
		}
		for i := range runs {
			t := now
			if res, err := c.store.Result(name, runs[i].hi); err == nil && res.GetComputed() != nil && res.GetComputed().AsTime().Before(now) {
				t = res.GetComputed().AsTime()
			}
			runs[i].first, runs[i].last = t, t
		}
		slices.SortStableFunc(runs, func(a, b flowRun) int { return a.first.Compare(b.first) })
		ps.mu.Lock()
		ps.flowAges.runs = runs
		ps.mu.Unlock()
	}
	return nil
}

// sketches keeps the decoded sketches topFlows repairs and estimates
// from (two per epoch, each ten times its wire form), for the next epoch.
var sketches = sync.Pool{New: func() any { return new(lds.LDS) }}

// repairLDS returns copies of the two sketches without the packets RDA
// reconciliation took out of each side (the sketches themselves when it
// took out none).
func repairLDS(up, down *lds.LDS, remove [2][]reconcile.Packet) (*lds.LDS, *lds.LDS) {
	if len(remove[0])+len(remove[1]) == 0 {
		return up, down
	}
	up, down = up.Clone(), down.Clone()
	removeFromLDS(up, down, remove)
	return up, down
}

// lostByFlow counts the packets lost, by flow hash, of the upstream
// packets reconciliation took out (those with a weight: in the sketch).
func lostByFlow(up []reconcile.Packet) map[uint64]float64 {
	out := map[uint64]float64{}
	for _, x := range up {
		if x.Weight > 0 {
			out[x.Flow]++
		}
	}
	return out
}

// ldsLoad is what an epoch's sketches show for sizing the path's next
// ones: its spoiled share only when down, the downstream sketch
// repaired, is given.
func (wk *worker) ldsLoad(ew *epochWork, up, down *lds.LDS) ldsLoad {
	var l ldsLoad
	l.large, l.packets = up.Load(float64(wk.cfg.Flows.LDSLargePackets))
	for _, tf := range ew.pr.up.Report.GetTopFlows() {
		l.largest = max(l.largest, float64(tf.GetPackets()))
	}
	if down != nil {
		l.spoiled = lds.Spoiled(up, down)
	}
	return l
}

// removeFromLDS takes the packets RDA reconciliation took out of each
// side out of the two sketches, and says whether there were any. Packets
// whose flow the probe did not say are left in: their cells stay
// unusable, as the digest shows.
func removeFromLDS(up, down *lds.LDS, remove [2][]reconcile.Packet) bool {
	for i, l := range [2]*lds.LDS{up, down} {
		for _, x := range remove[i] {
			if x.Weight > 0 {
				l.Remove(x.Flow, x.ID, x.OffsetNS, x.Weight)
			}
		}
	}
	return len(remove[0])+len(remove[1]) > 0
}
