package collector

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/DataDog/sketches-go/ddsketch"
	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/delays"
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
	cfg       sample.Config    // the rate of delays and up
	downCfg   sample.Config    // the rate of down (cfg's, unless narrowed since)
	delays    []int64          // sorted, ns
	keys      []uint64         // the key (sample.Config.Key) of each delay (nil: not kept)
	up, down  map[uint64]int64 // unmatched keys → absolute time, ns
	ambiguous int              // entries of keys seen more than once, left out
	narrowed  narrowing        // why the sample was narrowed, if it was
	// keyBits is the width of its keys (0: sample.KeyBits): the narrower
	// of the two sides' (sample.Joined.KeyBits).
	keyBits int
	// sketch is the sketch of delays last put in a result (apply), kept
	// for the metrics (nil: none).
	sketch *ddsketch.DDSketch
}

// width is the width of sj's keys.
func (sj *sampleJoin) width() int { return cmp.Or(sj.keyBits, sample.KeyBits) }

// keyMask keeps the high bits bits of a key.
func keyMask(bits int) uint64 { return ^uint64(0) << (64 - bits) }

// narrowKeys narrows sj's keys (of its delays and unmatched upstream
// entries) to bits, fewer than its own: to match them with a neighbour
// whose keys are narrower.
func (sj *sampleJoin) narrowKeys(bits int) {
	m := keyMask(bits)
	for i := range sj.keys {
		sj.keys[i] &= m
	}
	up := make(map[uint64]int64, len(sj.up))
	for k, at := range sj.up {
		if prev, dup := up[k&m]; !dup || at < prev {
			up[k&m] = at
		}
	}
	sj.up, sj.keyBits = up, bits
}

// narrowing says why a sample is kept at a lower rate than its reports'.
type narrowing byte

const (
	// narrowedSides: the two sides sampled at different rates.
	narrowedSides narrowing = 1 << iota
	// narrowedNext: the next epoch sampled at a lower rate, and the
	// packets crossing into it are matched at that rate.
	narrowedNext
)

// estimateSample joins the epoch's two samples and writes the delay
// quantiles into the result; the join is kept with the epoch's boundary
// record, made for it when RDA made none.
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
	sj := newSampleJoin(cfg, j, wk.cfg.Params.Epoch.StartNS(w.epoch))
	if u != up || down != w.pr.down.sample {
		sj.narrowed = narrowedSides
	}
	if w.pr.up.namesFlows || w.pr.down.namesFlows {
		w.sampled = flowDelays(j, sj)
	}
	sj.apply(res)
	if w.bd == nil {
		// RDA left no record (not sent, or not reconciled exactly); the
		// sample's crossers still need theirs. Its loss is counted
		// when the result is published, so nothing waits to settle.
		w.bd = &boundary{epoch: w.epoch, lost: map[uint64]int64{}, extra: map[uint64]int64{}, res: res, at: wk.now(), settled: true}
	}
	w.bd.sample = sj
}

// newSampleJoin keeps a join of an epoch's samples (at cfg) that starts at
// start (ns), its entries left over at absolute times.
func newSampleJoin(cfg sample.Config, j sample.Joined, start int64) *sampleJoin {
	sj := &sampleJoin{cfg: cfg, downCfg: cfg, delays: j.Delays, keys: j.Keys, ambiguous: j.Ambiguous, keyBits: j.KeyBits,
		up: make(map[uint64]int64, len(j.UpLeft)), down: make(map[uint64]int64, len(j.DownLeft))}
	for _, e := range j.UpLeft {
		sj.up[e.Key] = start + e.OffsetNS
	}
	for _, e := range j.DownLeft {
		// A packet seen twice downstream counts by its earlier copy, as
		// RDA's policy and the join within an epoch count it.
		if at, seen := sj.down[e.Key]; !seen || start+e.OffsetNS < at {
			sj.down[e.Key] = start + e.OffsetNS
		}
	}
	return sj
}

// match pairs sj's unmatched upstream entries (sent in its epoch) with
// next's unmatched downstream ones (seen in the following epoch), and
// Samples of one seed are nested, so they are
// matched at the lower of the two rates: when next sampled at a lower
// rate, sj is narrowed to it first (a crosser next did not keep would
// otherwise go missing from an epoch that claims every packet of its
// rate); when at a higher one, next's entries sj would not keep are passed
// over. It says whether sj changed.
func (sj *sampleJoin) match(next *sampleJoin) bool {
	if sj == nil || next == nil || sj.cfg.Seed != next.downCfg.Seed {
		return false
	}
	narrowed := false
	if next.downCfg.Threshold < sj.cfg.Threshold {
		if !sj.narrow(next.downCfg) {
			return false
		}
		narrowed = true
	}
	// Keys are matched at the narrower width of the two.
	if next.width() < sj.width() {
		if sj.keys == nil && len(sj.delays) > 0 {
			return narrowed
		}
		sj.narrowKeys(next.width())
		narrowed = true
	}
	down := next.down // by key at sj's width → the key next.down has
	var orig map[uint64]uint64
	if next.width() > sj.width() {
		m := keyMask(sj.width())
		down, orig = make(map[uint64]int64, len(next.down)), make(map[uint64]uint64, len(next.down))
		for k, at := range next.down {
			if prev, dup := down[k&m]; !dup || at < prev {
				down[k&m], orig[k&m] = at, k
			}
		}
	}
	matched := 0
	for id, upNS := range sj.up {
		downNS, ok := down[id]
		if !ok || downNS < upNS {
			continue
		}
		sj.delays = append(sj.delays, downNS-upNS)
		if sj.keys != nil {
			sj.keys = append(sj.keys, id)
		}
		delete(sj.up, id)
		if orig != nil {
			delete(next.down, orig[id])
		} else {
			delete(next.down, id)
		}
		matched++
	}
	if matched > 0 {
		sj.sortDelays()
	}
	return matched > 0 || narrowed
}

// narrow keeps only the delays and upstream entries of packets cfg (of
// sj's seed, at a lower rate) keeps, and says whether it could: a record
// stored without identities cannot be narrowed. sj's downstream entries
// stay at their rate, for the previous epoch's crossers.
func (sj *sampleJoin) narrow(cfg sample.Config) bool {
	if sj.keys == nil && len(sj.delays) > 0 {
		return false
	}
	k := 0
	for i, id := range sj.keys {
		if cfg.KeepsKey(id) {
			sj.delays[k], sj.keys[k] = sj.delays[i], id
			k++
		}
	}
	sj.delays, sj.keys = sj.delays[:k], sj.keys[:k]
	for id := range sj.up {
		if !cfg.KeepsKey(id) {
			delete(sj.up, id)
		}
	}
	sj.cfg = cfg
	sj.narrowed |= narrowedNext
	return true
}

// sortDelays sorts the delays, with their identities when kept.
func (sj *sampleJoin) sortDelays() {
	if sj.keys == nil {
		slices.Sort(sj.delays)
		return
	}
	sample.SortDelays(sj.delays, sj.keys, nil)
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
	res.Quantiles, res.DelayMinNs, res.DelayMaxNs, res.DelaySketch, sj.sketch = nil, 0, 0, nil, nil
	res.SampleMeanNs, res.SampleStddevNs, res.StddevExact, res.StddevFromSample = 0, 0, false, false
	var notes []string
	if sj.narrowed&narrowedSides != 0 {
		notes = append(notes, fmt.Sprintf("the sides sampled at different rates; joined at the lower, 1/%.0f", 1/res.SampleRate))
	}
	if sj.narrowed&narrowedNext != 0 {
		notes = append(notes, fmt.Sprintf("the next epoch sampled at a lower rate; narrowed to it, 1/%.0f, so that the packets crossing into it count", 1/res.SampleRate))
	}
	if sj.ambiguous > 0 {
		notes = append(notes, fmt.Sprintf("%d sampled entries whose keys came more than once left out (copies of a packet, or packets whose keys agree: which arrived when cannot be told)", sj.ambiguous))
	}
	res.SampleNote = strings.Join(notes, "; ")
	if len(sj.delays) == 0 {
		return
	}
	res.DelayMinNs, res.DelayMaxNs = float64(sj.delays[0]), float64(sj.delays[len(sj.delays)-1])
	sj.sketch = delays.Sketch(sj.delays, 1/sj.cfg.Rate())
	res.DelaySketch = delays.Encode(sj.sketch)
	exact := sj.cfg.Rate() == 1 && sj.ambiguous == 0
	res.SampleMeanNs, res.SampleStddevNs = meanStddev(sj.delays)
	exactMean := res.GetEstimator() == "rda" && res.GetDecoded() && res.GetUnusableBuckets() == 0
	switch {
	case exactMean && exact && res.GetSamples() == uint64(len(sj.delays)):
		res.StddevNs, res.StddevExact, res.StddevFromSample = res.SampleStddevNs, true, true
	case exactMean && len(sj.delays) >= int(res.GetRdaBuckets()):
		// The sampled delays' spread around the exact mean: one degree
		// of freedom a delay, where RDA's estimate has about one a
		// bucket (on the real link, 1.5% off on average against 3.2%
		// for RDA at 256 buckets, at most 6.6% against 24%).
		d := res.SampleMeanNs - res.GetMeanNs()
		res.StddevNs, res.StddevFromSample = math.Sqrt(res.SampleStddevNs*res.SampleStddevNs+d*d), true
	}
	qs, err := sample.Quantiles(sj.delays, quantilesAsked, quantileConfidence, exact)
	if err != nil { // the quantiles and confidence are constants in range
		res.SampleNote = strings.Join(append(notes, err.Error()), "; ")
		return
	}
	res.Quantiles = append(res.Quantiles, quantileProtos(qs)...)
}

// quantileProtos are sampled quantiles as the API gives them, in one
// allocation (a path-epoch makes a few for each of its top flows).
func quantileProtos(qs []sample.Quantile) []*owlv1.DelayQuantile {
	ms := make([]owlv1.DelayQuantile, len(qs))
	out := make([]*owlv1.DelayQuantile, len(qs))
	for i, q := range qs {
		m := &ms[i]
		m.Q, m.ValueNs, m.LoNs, m.HiNs, m.Exact, m.Confidence = q.Q, float64(q.Value), float64(q.Lo), float64(q.Hi), q.Exact, q.Confidence
		out[i] = m
	}
	return out
}

// sampleRecord is the version byte of a boundary record's sample part;
// versions 1 (no downstream threshold, no identities) and 2 (packet IDs
// where 3 has keys) are still read, their IDs turned into keys.
const (
	sampleRecordV1   = 1
	sampleRecordIDs  = 2
	sampleRecordKeys = 3 // keys of sample.KeyBits
	sampleRecordWide = 4 // keys of a width the record names, delays and keys of 8 bytes
	sampleRecord     = 5 // delays as differences (varints), keys in the bytes of their width
)

// encode appends the join to a boundary record: version, seed, threshold,
// downstream threshold, flags, the keys' width, ambiguous, the delays with
// their identities, then the unmatched entries. The delays go as the
// first (varint) and the differences of the next (uvarint), each key in
// the bytes its width takes (the record a third to a half of 16 bytes a
// delay), unless a key has bits below its width (version 4).
func (sj *sampleJoin) encode(out []byte) []byte {
	m := keyMask(sj.width())
	if !slices.ContainsFunc(sj.keys, func(k uint64) bool { return k&^m != 0 }) {
		return sj.encodePacked(out)
	}
	return sj.encodeWide(out)
}

// encodeWide is encode's version 4.
func (sj *sampleJoin) encodeWide(out []byte) []byte {
	out = sj.appendHeader(out, sampleRecordWide)
	for i, d := range sj.delays {
		out = binary.LittleEndian.AppendUint64(out, uint64(d))
		if sj.keys != nil {
			out = binary.LittleEndian.AppendUint64(out, sj.keys[i])
		}
	}
	return appendEntries(appendEntries(out, sj.up), sj.down)
}

// appendHeader appends what comes before the delays in versions 4 and 5:
// version, seed, threshold, downstream threshold, flags, the keys' width,
// ambiguous and the number of delays.
func (sj *sampleJoin) appendHeader(out []byte, version byte) []byte {
	out = append(out, version)
	out = binary.LittleEndian.AppendUint64(out, sj.cfg.Seed)
	out = binary.LittleEndian.AppendUint64(out, sj.cfg.Threshold)
	out = binary.LittleEndian.AppendUint64(out, sj.downCfg.Threshold)
	flags := byte(sj.narrowed)
	if sj.keys != nil {
		flags |= 0x80
	}
	out = append(out, flags, byte(sj.width()))
	out = binary.LittleEndian.AppendUint32(out, uint32(sj.ambiguous))
	return binary.LittleEndian.AppendUint32(out, uint32(len(sj.delays)))
}

// sizeHint is about what encode appends: a header, each delay's varint
// (a few bytes) and key, and each unmatched entry's 16 bytes.
func (sj *sampleJoin) sizeHint() int {
	return 64 + len(sj.delays)*(4+(sj.width()+7)/8) + 16*(len(sj.up)+len(sj.down))
}

// encodePacked is encode's version 5.
func (sj *sampleJoin) encodePacked(out []byte) []byte {
	out = sj.appendHeader(out, sampleRecord)
	width := sj.width()
	kb := (width + 7) / 8
	var key [8]byte
	for i, d := range sj.delays {
		if i == 0 {
			out = binary.AppendVarint(out, d)
		} else {
			out = binary.AppendUvarint(out, uint64(d-sj.delays[i-1]))
		}
		if sj.keys != nil {
			binary.LittleEndian.PutUint64(key[:], sj.keys[i]>>(64-width))
			out = append(out, key[:kb]...)
		}
	}
	return appendEntries(appendEntries(out, sj.up), sj.down)
}

// readPackedDelays reads version 5's n delays (and their keys of width
// bits, withKeys) from b into sj and returns the rest; the delays come
// out sorted.
func (sj *sampleJoin) readPackedDelays(b []byte, n, width int, withKeys bool) ([]byte, error) {
	kb := 0
	if withKeys {
		kb = (width + 7) / 8
	}
	if n > len(b)/(1+kb) { // a delay takes a byte at least
		return nil, errBoundary
	}
	sj.delays = make([]int64, n)
	if withKeys {
		sj.keys = make([]uint64, n)
	}
	var key [8]byte
	for i := range n {
		if i == 0 {
			d, k := binary.Varint(b)
			if k <= 0 {
				return nil, errBoundary
			}
			sj.delays[0], b = d, b[k:]
		} else {
			diff, k := binary.Uvarint(b)
			prev := sj.delays[i-1]
			if k <= 0 || diff > uint64(math.MaxInt64-prev) {
				return nil, errBoundary
			}
			sj.delays[i], b = prev+int64(diff), b[k:]
		}
		if withKeys {
			if len(b) < kb {
				return nil, errBoundary
			}
			copy(key[:], b[:kb])
			clear(key[kb:])
			v := binary.LittleEndian.Uint64(key[:])
			if v>>width != 0 {
				return nil, errBoundary // bits past the width: not what encode wrote
			}
			sj.keys[i], b = v<<(64-width), b[kb:]
		}
	}
	return b, nil
}

// decodeSampleJoin reads what encode wrote (or version 1), all of b.
func decodeSampleJoin(b []byte) (*sampleJoin, error) {
	if len(b) < 1+8+8+1+4+4 || b[0] < sampleRecordV1 || b[0] > sampleRecord {
		return nil, errBoundary
	}
	version := b[0]
	sj := &sampleJoin{cfg: sample.Config{Seed: binary.LittleEndian.Uint64(b[1:]), Threshold: binary.LittleEndian.Uint64(b[9:])}}
	sj.downCfg = sj.cfg
	withKeys := false
	if b[0] == sampleRecordV1 {
		if b[17]&1 != 0 {
			sj.narrowed = narrowedSides
		}
		b = b[18:]
	} else {
		if len(b) < 1+8+8+8+1+4+4 || b[25]&^(0x80|byte(narrowedSides|narrowedNext)) != 0 {
			return nil, errBoundary
		}
		sj.downCfg.Threshold = binary.LittleEndian.Uint64(b[17:])
		sj.narrowed, withKeys = narrowing(b[25]&^0x80), b[25]&0x80 != 0
		b = b[26:]
		if version >= sampleRecordWide {
			if len(b) < 1+4+4 || int(b[0]) < sample.MinKeyBits || int(b[0]) > sample.KeyBits {
				return nil, errBoundary
			}
			sj.keyBits = int(b[0])
			b = b[1:]
		}
	}
	sj.ambiguous = int(binary.LittleEndian.Uint32(b))
	n := int(binary.LittleEndian.Uint32(b[4:]))
	b = b[8:]
	if version == sampleRecord {
		var err error
		if b, err = sj.readPackedDelays(b, n, sj.width(), withKeys); err != nil {
			return nil, err
		}
		return sj.readUnmatched(b)
	}
	per := 8
	if withKeys {
		per = 16
	}
	if n > len(b)/per {
		return nil, errBoundary
	}
	sj.delays = make([]int64, n)
	if withKeys {
		sj.keys = make([]uint64, n)
	}
	for i := range sj.delays {
		sj.delays[i] = int64(binary.LittleEndian.Uint64(b[per*i:]))
		if withKeys {
			sj.keys[i] = binary.LittleEndian.Uint64(b[per*i+8:])
		}
	}
	out, err := sj.readUnmatched(b[per*n:])
	if err == nil && version < sampleRecordKeys {
		sj.idsToKeys()
	}
	return out, err
}

// readUnmatched reads a record's unmatched entries, the last of it, and
// checks that the delays read before are sorted.
func (sj *sampleJoin) readUnmatched(b []byte) (*sampleJoin, error) {
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

// idsToKeys turns the packet IDs of a record stored before samples
// carried keys into keys.
func (sj *sampleJoin) idsToKeys() {
	for i, id := range sj.keys {
		sj.keys[i] = sj.cfg.Key(id)
	}
	for _, m := range []map[uint64]int64{sj.up, sj.down} {
		ids := slices.Collect(maps.Keys(m))
		at := make([]int64, len(ids))
		for i, id := range ids {
			at[i] = m[id]
		}
		clear(m)
		for i, id := range ids {
			m[sj.cfg.Key(id)] = at[i]
		}
	}
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
