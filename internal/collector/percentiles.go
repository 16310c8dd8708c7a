package collector

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// quantilesAsked are the delay quantiles every result gives, with
// intervals of quantileConfidence.
var quantilesAsked = []float64{0.5, 0.9, 0.99, 0.999}

const quantileConfidence = 0.95

// sampleJoin is what the two sides' packet samples of an epoch say: the
// exact delays of the sampled packets delivered, and the entries left over
// for the neighbouring epochs (a packet sent near the end of this epoch
// and seen downstream in the next one is matched there, and counts here,
// as RDA's boundary packets do).
type sampleJoin struct {
	cfg       sample.Config
	delays    []int64          // sorted, ns
	up, down  map[uint64]int64 // unmatched IDs → absolute time, ns
	ambiguous int              // entries of IDs seen more than once, left out
	narrowed  bool             // a side's sample was narrowed to the other's rate
}

// estimateSample joins the epoch's two samples and writes the delay
// quantiles into the result; the join is kept with the boundary record
// when there is one.
func (wk *worker) estimateSample(w *epochWork) {
	up, down, res := w.pr.up.sample, w.pr.down.sample, w.res
	if up == nil || down == nil {
		if up != nil || down != nil {
			res.SampleNote = "only one side sent a sample"
		}
		return
	}
	cfg := up.Config()
	if down.Config().Threshold < cfg.Threshold {
		cfg = down.Config()
	}
	u, err := up.Narrowed(cfg)
	if err == nil {
		down, err = down.Narrowed(cfg)
	}
	if err != nil { // seeds are checked when the reports come
		res.SampleNote = err.Error()
		return
	}
	j, err := sample.Join(u, down, 0)
	if err != nil {
		res.SampleNote = err.Error()
		return
	}
	start := wk.cfg.Params.Epoch.StartNS(w.epoch)
	sj := &sampleJoin{cfg: cfg, delays: j.Delays, ambiguous: j.Ambiguous, narrowed: u != up || down != w.pr.down.sample,
		up: make(map[uint64]int64, len(j.UpLeft)), down: make(map[uint64]int64, len(j.DownLeft))}
	for _, e := range j.UpLeft {
		sj.up[e.ID] = start + e.OffsetNS
	}
	for _, e := range j.DownLeft {
		// A packet seen twice downstream counts by its earlier copy, as
		// RDA's policy and the join within an epoch count it.
		if at, seen := sj.down[e.ID]; !seen || start+e.OffsetNS < at {
			sj.down[e.ID] = start + e.OffsetNS
		}
	}
	sj.apply(res)
	if w.bd != nil {
		w.bd.sample = sj
	}
}

// match pairs sj's unmatched upstream entries (sent in its epoch) with
// next's unmatched downstream ones (seen in the following epoch), when
// both were joined at one rate, and reports how many matched.
func (sj *sampleJoin) match(next *sampleJoin) int {
	if sj == nil || next == nil || sj.cfg != next.cfg {
		return 0
	}
	matched := 0
	for id, upNS := range sj.up {
		downNS, ok := next.down[id]
		if !ok || downNS < upNS {
			continue
		}
		sj.delays = append(sj.delays, downNS-upNS)
		delete(sj.up, id)
		delete(next.down, id)
		matched++
	}
	if matched > 0 {
		slices.Sort(sj.delays)
	}
	return matched
}

// apply writes the sample's delay statistics into the result (nothing for
// a nil join). Call it after RDA's estimate is in the result: where the
// sample holds every packet RDA counted, its standard deviation is exact
// and replaces RDA's.
func (sj *sampleJoin) apply(res *owlv1.PathStats) {
	if sj == nil {
		return
	}
	res.SampleRate = sj.cfg.Rate()
	res.SampleDelays = uint64(len(sj.delays))
	res.Quantiles, res.DelayMinNs, res.DelayMaxNs, res.DelaySketch = nil, 0, 0, nil
	res.SampleMeanNs, res.SampleStddevNs, res.StddevExact = 0, 0, false
	var notes []string
	if sj.narrowed {
		notes = append(notes, fmt.Sprintf("the sides sampled at different rates; joined at the lower, 1/%.0f", 1/res.SampleRate))
	}
	if sj.ambiguous > 0 {
		notes = append(notes, fmt.Sprintf("%d sampled entries of packets seen more than once left out (which copy arrived when cannot be told)", sj.ambiguous))
	}
	res.SampleNote = strings.Join(notes, "; ")
	if len(sj.delays) == 0 {
		return
	}
	res.DelayMinNs, res.DelayMaxNs = float64(sj.delays[0]), float64(sj.delays[len(sj.delays)-1])
	res.DelaySketch = encodeDelaySketch(sj.delays, 1/sj.cfg.Rate())
	exact := sj.cfg.Rate() == 1 && sj.ambiguous == 0
	res.SampleMeanNs, res.SampleStddevNs = meanStddev(sj.delays)
	if exact && res.GetEstimator() == "rda" && res.GetDecoded() && res.GetUnusableBuckets() == 0 && res.GetSamples() == uint64(len(sj.delays)) {
		res.StddevNs, res.StddevExact = res.SampleStddevNs, true
	}
	qs, err := sample.Quantiles(sj.delays, quantilesAsked, quantileConfidence, exact)
	if err != nil { // the quantiles and confidence are constants in range
		res.SampleNote = strings.Join(append(notes, err.Error()), "; ")
		return
	}
	for _, q := range qs {
		res.Quantiles = append(res.Quantiles, &owlv1.DelayQuantile{Q: q.Q, ValueNs: float64(q.Value), LoNs: float64(q.Lo), HiNs: float64(q.Hi), Exact: q.Exact})
	}
}

// sampleRecord is the version byte of a boundary record's sample part.
const sampleRecord = 1

// encode appends the join to a boundary record: version, seed, threshold,
// flags, ambiguous, the delays, then the unmatched entries.
func (sj *sampleJoin) encode(out []byte) []byte {
	out = append(out, sampleRecord)
	out = binary.LittleEndian.AppendUint64(out, sj.cfg.Seed)
	out = binary.LittleEndian.AppendUint64(out, sj.cfg.Threshold)
	var flags byte
	if sj.narrowed {
		flags = 1
	}
	out = append(out, flags)
	out = binary.LittleEndian.AppendUint32(out, uint32(sj.ambiguous))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(sj.delays)))
	for _, d := range sj.delays {
		out = binary.LittleEndian.AppendUint64(out, uint64(d))
	}
	return appendEntries(appendEntries(out, sj.up), sj.down)
}

// decodeSampleJoin reads what encode wrote, all of b.
func decodeSampleJoin(b []byte) (*sampleJoin, error) {
	if len(b) < 1+8+8+1+4+4 || b[0] != sampleRecord {
		return nil, errBoundary
	}
	sj := &sampleJoin{cfg: sample.Config{Seed: binary.LittleEndian.Uint64(b[1:]), Threshold: binary.LittleEndian.Uint64(b[9:])},
		narrowed: b[17]&1 != 0, ambiguous: int(binary.LittleEndian.Uint32(b[18:]))}
	n := int(binary.LittleEndian.Uint32(b[22:]))
	b = b[26:]
	if n > len(b)/8 {
		return nil, errBoundary
	}
	sj.delays = make([]int64, n)
	for i := range sj.delays {
		sj.delays[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	b = b[8*n:]
	var err error
	if sj.up, b, err = readEntries(b); err != nil {
		return nil, err
	}
	if sj.down, b, err = readEntries(b); err != nil {
		return nil, err
	}
	if len(b) != 0 || !slices.IsSorted(sj.delays) {
		return nil, errBoundary
	}
	return sj, nil
}

// meanStddev is the mean and (population) standard deviation of delays,
// taken about the first one so that nanosecond sums of large delays keep
// their precision.
func meanStddev(delays []int64) (mean, stddev float64) {
	if len(delays) == 0 {
		return 0, 0
	}
	ref := delays[0]
	var sum, sq float64
	for _, d := range delays {
		x := float64(d - ref)
		sum += x
		sq += x * x
	}
	n := float64(len(delays))
	m := sum / n
	return float64(ref) + m, math.Sqrt(math.Max(sq/n-m*m, 0))
}
