package collector

import (
	"cmp"
	"errors"
	"math"
	"slices"
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
	est, err := lds.EstimateFlow(up, down, f.Hash(wk.cfg.Params.LDS.Seed), wk.weightOf(f), lds.DefaultOptions())
	fs := &owlv1.FlowStats{
		Path: path, Epoch: epoch, Flow: netpath.FlowToProto(f),
		Start:   timestamppb.New(time.Unix(0, wk.cfg.Params.Epoch.StartNS(epoch))),
		Packets: est.UpPackets, Lost: est.Lost, Epochs: 1,
	}
	if err == nil {
		fs.Estimated = true
		fs.MeanNs, fs.StddevNs, fs.Samples = est.MeanNS, est.StddevNS, est.Samples
		if est.Samples > 0 {
			fs.StderrNs = est.StddevNS / math.Sqrt(est.Samples)
		}
	}
	return fs
}

// topFlows repairs the epoch's sketches with what RDA reconciliation found,
// estimates the flows the two sides' RAP tables name, and adds them and the
// repaired sketches to w. It returns the results, heaviest first.
func (wk *worker) topFlows(path string, epoch int64, up, down *side, remove [2][]reconcile.Packet, w *store.Write) []*owlv1.FlowStats {
	if up.ldsCfg == nil || down.ldsCfg == nil {
		return nil
	}
	upL0, err1 := lds.Decode(up.Report.GetLds())
	downL0, err2 := lds.Decode(down.Report.GetLds())
	if err := errors.Join(err1, err2); err != nil { // checked when they came
		wk.log.Error("decoding the epoch's sketches", "path", path, "epoch", epoch, "err", err)
		return nil
	}
	upL, downL := repairLDS(upL0, downL0, remove)
	seen := map[uint64]bool{}
	var out []*owlv1.FlowStats
	for _, s := range []*side{up, down} {
		for _, tf := range s.Report.GetTopFlows() {
			f, err := netpath.FlowFromProto(tf.GetFlow())
			if err != nil {
				continue
			}
			h := f.Hash(wk.cfg.Params.LDS.Seed)
			if seen[h] {
				continue
			}
			seen[h] = true
			fs := wk.estimateFlow(path, epoch, upL, downL, f)
			fs.Top = true
			// The count-min estimate is an upper bound like the RAP
			// counter; the smaller of the two is the better.
			if p := float64(tf.GetPackets()); p > 0 && p < fs.Packets {
				fs.Packets = p
			}
			out = append(out, fs)
			w.Flows = append(w.Flows, store.FlowResult{Hash: h, Stats: fs})
		}
	}
	slices.SortFunc(out, func(a, b *owlv1.FlowStats) int { return cmp.Compare(b.GetPackets(), a.GetPackets()) })
	ub, db := up.Report.GetLds(), down.Report.GetLds()
	if upL != upL0 {
		ub, _ = upL.MarshalBinary()
		db, _ = downL.MarshalBinary()
	}
	w.LDS = append(w.LDS, store.LDSPair{EpochRef: store.EpochRef{Path: path, Epoch: epoch}, Up: ub, Down: db})
	return out
}

// pruneFlows drops the sketches and per-flow results that are older than
// the flow retention, counted back from each path's newest epoch (so that
// replays of old captures keep theirs).
func (wk *worker) pruneFlows() {
	keep := int64(wk.cfg.Flows.Retention / wk.cfg.Params.Epoch.Length)
	for name, ps := range wk.paths {
		ps.mu.Lock()
		newest, ok := ps.newest, ps.seen
		ps.mu.Unlock()
		if !ok {
			continue
		}
		if _, err := wk.store.PruneFlows(name, newest-keep); err != nil {
			wk.log.Error("pruning per-flow data", "path", name, "err", err)
		}
	}
}

// repairLDS returns copies of the two sketches without the packets RDA
// reconciliation took out of each side. Packets whose flow the probe did
// not say are left in: their cells stay unusable, as the digest shows.
func repairLDS(up, down *lds.LDS, remove [2][]reconcile.Packet) (*lds.LDS, *lds.LDS) {
	if len(remove[0])+len(remove[1]) == 0 {
		return up, down
	}
	out := [2]*lds.LDS{up.Clone(), down.Clone()}
	for i, l := range out {
		for _, x := range remove[i] {
			if x.Weight > 0 {
				l.Remove(x.Flow, x.ID, x.OffsetNS, x.Weight)
			}
		}
	}
	return out[0], out[1]
}
