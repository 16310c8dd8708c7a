package collector

import (
	"fmt"
	"math"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// A report's top flows say which of its sampled packets are theirs
// (TopFlow.sample_positions); a listed side's rebuilt sample knows every
// packet's flow. Joined, they give each top flow the exact delays of its
// sampled packets: a mean, a standard deviation and delay quantiles of
// the flow itself, with no other flow's packets mixed in as in an LDS
// cell, and per-flow results for an epoch whose probes sent no LDS.

// sampleFlows maps the keys of a side's sampled packets to their flows'
// hashes (under seed, the LDS's): every entry of a listed side's sample,
// the entries its top flows name of a sample sent. It refuses positions
// out of order or past the sample.
func sampleFlows(s *side, seed uint64) (map[uint64]uint64, error) {
	if s.sample == nil {
		for _, tf := range s.Report.GetTopFlows() {
			if len(tf.GetSamplePositions()) > 0 {
				return nil, fmt.Errorf("%w: top flows name sample entries of a report with no sample", synopsis.ErrFormat)
			}
		}
		return nil, nil
	}
	es := s.sample.Entries()
	var out map[uint64]uint64
	if s.listed {
		out = make(map[uint64]uint64, len(es))
		for _, e := range es {
			out[e.Key] = e.Flow
		}
		return out, nil
	}
	named := 0 // entries named, at most (positions are checked below)
	for _, tf := range s.Report.GetTopFlows() {
		named += len(tf.GetSamplePositions())
	}
	for i, tf := range s.Report.GetTopFlows() {
		gaps := tf.GetSamplePositions()
		if len(gaps) == 0 {
			continue
		}
		pos, err := sample.Positions(gaps, len(es))
		if err != nil {
			return nil, fmt.Errorf("%w: top flow %d: %v", synopsis.ErrFormat, i, err)
		}
		f, err := netpath.TopFlowKey(tf)
		if err != nil {
			continue // such a flow is left out of the per-flow results
		}
		if out == nil {
			out = make(map[uint64]uint64, min(named, len(es)))
		}
		h := f.Hash(seed)
		for _, p := range pos {
			out[es[p].Key] = h
		}
	}
	return out, nil
}

// flowSamples is each flow's sampled delays in an epoch (sorted), by flow
// hash, and the rate they were sampled at.
type flowSamples struct {
	delays map[uint64][]int64
	rate   float64
	exact  bool // every packet of the epoch sampled, none ambiguous
}

// flowDelays splits the epoch's joined sample by flow: the flows the
// upstream side names, then those only the downstream side does. It is
// empty when the epoch has no join with keys or no side named flows.
func flowDelays(ew *epochWork) flowSamples {
	var fs flowSamples
	if ew.bd == nil || ew.bd.sample == nil || ew.bd.sample.keys == nil {
		return fs
	}
	sj := ew.bd.sample
	up, down := flowsAt(ew.pr.up, sj.width()), flowsAt(ew.pr.down, sj.width())
	if len(up)+len(down) == 0 {
		return fs
	}
	fs.delays, fs.rate, fs.exact = map[uint64][]int64{}, sj.cfg.Rate(), sj.cfg.Rate() == 1 && sj.ambiguous == 0
	for i, k := range sj.keys {
		h, ok := up[k]
		if !ok {
			if h, ok = down[k]; !ok {
				continue
			}
		}
		fs.delays[h] = append(fs.delays[h], sj.delays[i]) // sj.delays are sorted
	}
	return fs
}

// flowsAt is a side's flowOf with its keys at width bits, at most its
// sample's (the join narrows the wider side's keys to the other's).
func flowsAt(s *side, bits int) map[uint64]uint64 {
	if s.sample == nil || s.sample.KeyBits() <= bits {
		return s.flowOf
	}
	m := keyMask(bits)
	out := make(map[uint64]uint64, len(s.flowOf))
	for k, h := range s.flowOf {
		out[k&m] = h
	}
	return out
}

// applyFlowSample writes a flow's sampled delays into its result: their
// count, their quantiles once there are at least minDelays, and the mean
// and standard deviation where the sketches gave none.
func applyFlowSample(fs *owlv1.FlowStats, delays []int64, s flowSamples, minDelays int) {
	if fs.GetEstimated() {
		fs.Estimator = "lds"
	}
	fs.SampleDelays = uint64(len(delays))
	if len(delays) == 0 {
		return
	}
	if !fs.GetEstimated() {
		fs.Estimated, fs.Estimator = true, "sample"
		fs.MeanNs, fs.StddevNs = meanStddev(delays)
		fs.Observed, fs.Samples = float64(len(delays)), float64(len(delays))/s.rate
		fs.StderrNs = fs.StddevNs / math.Sqrt(float64(len(delays)))
	}
	if len(delays) < minDelays {
		return
	}
	qs, err := sample.Quantiles(delays, quantilesAsked, quantileConfidence, s.exact)
	if err != nil { // the quantiles and confidence are constants in range
		return
	}
	for _, q := range qs {
		fs.Quantiles = append(fs.Quantiles, quantileProto(q))
	}
}
