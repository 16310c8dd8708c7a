package collector

import (
	"fmt"
	"math"
	"slices"

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

// nameSampleFlows writes the flows' hashes (under seed, the LDS's) into
// the entries of a side's sample that name one (sample.Entry.Flow): every
// entry of a listed side's sample has its flow already, a sample sent
// has those its top flows name. It says whether any entry names a flow,
// and refuses positions out of order or past the sample.
func nameSampleFlows(s *side, seed uint64) (bool, error) {
	if s.sample == nil {
		for _, tf := range s.Report.GetTopFlows() {
			if len(tf.GetSamplePositions()) > 0 {
				return false, fmt.Errorf("%w: top flows name sample entries of a report with no sample", synopsis.ErrFormat)
			}
		}
		return false, nil
	}
	es := s.sample.Entries()
	if s.listed {
		return slices.ContainsFunc(es, func(e sample.Entry) bool { return e.Flow != 0 }), nil
	}
	named := false
	most := 0
	for _, tf := range s.Report.GetTopFlows() {
		most = max(most, len(tf.GetSamplePositions()))
	}
	pos := make([]int, 0, min(most, len(es))) // each flow's positions in turn
	for i, tf := range s.Report.GetTopFlows() {
		gaps := tf.GetSamplePositions()
		if len(gaps) == 0 {
			continue
		}
		var err error
		pos, err = sample.AppendPositions(pos[:0], gaps, len(es))
		if err != nil {
			return false, fmt.Errorf("%w: top flow %d: %v", synopsis.ErrFormat, i, err)
		}
		f, err := netpath.TopFlowKey(tf)
		if err != nil {
			continue // such a flow is left out of the per-flow results
		}
		h := f.Hash(seed)
		for _, p := range pos {
			es[p].Flow = h
		}
		named = named || len(pos) > 0
	}
	return named, nil
}

// flowSamples is each flow's sampled delays in an epoch (sorted), by flow
// hash, and the rate they were sampled at.
type flowSamples struct {
	delays map[uint64][]int64
	rate   float64
	exact  bool // every packet of the epoch sampled, none ambiguous
}

// flowDelays splits an epoch's joined sample j (kept as sj) by flow, the
// flow of each delay the one its upstream entry names, else its
// downstream one (sample.Joined.Flows). Each flow's delays are a part of
// one array, counted before they are copied: appended flow by flow, they
// grew each flow's slice a few times over (8% of the bytes a collector
// allocated).
func flowDelays(j sample.Joined, sj *sampleJoin) flowSamples {
	fs := flowSamples{rate: sj.cfg.Rate(), exact: sj.cfg.Rate() == 1 && sj.ambiguous == 0}
	index := synopsis.NewIndex(64) // flow → its number, in order of first delay
	var hashes []uint64            // by number
	var counts []int
	of := make([]int32, len(j.Flows)) // each delay's flow number, -1: none
	named := 0
	for i, h := range j.Flows {
		if h == 0 {
			of[i] = -1
			continue
		}
		n, added := index.Add(h)
		if added {
			hashes, counts = append(hashes, h), append(counts, 0)
		}
		of[i] = n
		counts[n]++
		named++
	}
	all := make([]int64, named)
	next := make([]int, len(counts)) // where each flow's next delay goes
	fs.delays = make(map[uint64][]int64, len(counts))
	at := 0
	for n, h := range hashes {
		next[n] = at
		fs.delays[h] = all[at : at+counts[n] : at+counts[n]]
		at += counts[n]
	}
	for i, n := range of {
		if n >= 0 {
			all[next[n]] = j.Delays[i] // j.Delays are sorted, and so each flow's
			next[n]++
		}
	}
	return fs
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
	fs.Quantiles = append(fs.Quantiles, quantileProtos(qs)...)
}
