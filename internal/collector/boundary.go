package collector

import (
	"encoding/binary"
	"errors"
	"maps"
	"math"
	"slices"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// boundary is what an epoch's reconciliation leaves for its neighbours: a
// packet sent just before the end of epoch e and received after it is lost
// in e and extra in e+1. Matching e's lost IDs with e+1's extra IDs finds
// those packets; they count as delivered in e, with their exact delay.
type boundary struct {
	epoch int64
	lost  map[uint64]int64 // unmatched lost IDs → absolute upstream time, ns
	extra map[uint64]int64 // unmatched extra IDs → absolute downstream time, ns
	// copies are the IDs of extra counted as duplicates: the downstream
	// probe saw their first copies at the end of the epoch before.
	copies map[uint64]bool

	// The epoch's own estimate: packets, delay sum and sum of squares.
	n, sumNS, sqNS float64
	// Delays of the boundary packets matched so far.
	crossN, crossSumNS, crossSqNS float64

	// sample is the epoch's join of packet samples (nil: none).
	sample *sampleJoin

	res     *owlv1.PathStats
	settled bool // its loss went into the metrics
	at      time.Time
}

// match pairs the lost IDs of b (sent in b's epoch) with the extra IDs of
// next (seen downstream in the following epoch), and the two epochs'
// unmatched sampled entries likewise. It updates both results and reports
// whether anything changed.
func (b *boundary) match(next *boundary) bool {
	rda := b.matchRDA(next)
	sampled := b.sample.match(next.sample)
	if rda || sampled {
		// After RDA's: an exact sample's standard deviation replaces
		// RDA's estimate.
		b.sample.apply(b.res)
	}
	return rda || sampled
}

// matchRDA is match for the RDA's lost and extra IDs.
func (b *boundary) matchRDA(next *boundary) bool {
	matched, copies := 0, 0
	for id, upNS := range b.lost {
		downNS, ok := next.extra[id]
		if !ok {
			continue
		}
		d := float64(downNS - upNS)
		b.crossN++
		b.crossSumNS += d
		b.crossSqNS += d * d
		delete(b.lost, id)
		delete(next.extra, id)
		matched++
		if next.copies[id] {
			// Counted as a duplicate: the probe saw a copy before the
			// boundary, and this one, sent before it too, was late.
			delete(next.copies, id)
			copies++
		}
	}
	if matched == 0 {
		return false
	}
	b.res.BoundaryMatched += uint64(matched)
	b.res.Lost -= float64(matched)
	next.res.Reordered -= min(uint64(matched-copies), next.res.Reordered)
	next.res.Duplicates -= min(uint64(copies), next.res.Duplicates)
	b.apply()
	return true
}

// apply writes the combined statistics into the result. An epoch none of
// whose packets arrived within it (NO_SAMPLES, no estimate of its own)
// becomes OK with the first of them matched.
func (b *boundary) apply() {
	n := b.n + b.crossN
	if n > 0 && b.n == 0 && b.res.GetStatus() == owlv1.ResultStatus_RESULT_STATUS_NO_SAMPLES {
		b.res.Status, b.res.Detail = owlv1.ResultStatus_RESULT_STATUS_OK, ""
	}
	if n == 0 || b.res.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
		return
	}
	mean := (b.sumNS + b.crossSumNS) / n
	b.res.MeanNs = mean
	b.res.StddevNs = math.Sqrt(math.Max((b.sqNS+b.crossSqNS)/n-mean*mean, 0))
	b.res.Samples = uint64(math.Round(n))
}

// encode: n, sum, sq, crossN, crossSum, crossSq (float64 each), then lost
// and extra as count + (id, ns) pairs, all little-endian, then, when there
// are any, the copies (copiesTag, count, IDs), then the sample join when
// there is one (see sampleJoin.encode).
func (b *boundary) encode() []byte {
	size := 48 + 8 + 16*(len(b.lost)+len(b.extra)) + 5 + 8*len(b.copies)
	if b.sample != nil {
		size += b.sample.sizeHint()
	}
	out := make([]byte, 0, size)
	for _, f := range []float64{b.n, b.sumNS, b.sqNS, b.crossN, b.crossSumNS, b.crossSqNS} {
		out = binary.LittleEndian.AppendUint64(out, math.Float64bits(f))
	}
	out = appendEntries(appendEntries(out, b.lost), b.extra)
	if len(b.copies) > 0 {
		ids := slices.Sorted(maps.Keys(b.copies))
		out = binary.LittleEndian.AppendUint32(append(out, copiesTag), uint32(len(ids)))
		for _, id := range ids {
			out = binary.LittleEndian.AppendUint64(out, id)
		}
	}
	if b.sample != nil {
		out = b.sample.encode(out)
	}
	return out
}

// appendEntries appends a count and the (id, ns) pairs of m, by id.
func appendEntries(out []byte, m map[uint64]int64) []byte {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids) // deterministic bytes
	out = binary.LittleEndian.AppendUint32(out, uint32(len(ids)))
	for _, id := range ids {
		out = binary.LittleEndian.AppendUint64(out, id)
		out = binary.LittleEndian.AppendUint64(out, uint64(m[id]))
	}
	return out
}

// readEntries reads what appendEntries wrote and returns the rest.
func readEntries(b []byte) (map[uint64]int64, []byte, error) {
	if len(b) < 4 {
		return nil, nil, errBoundary
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > len(b)/16 {
		return nil, nil, errBoundary
	}
	m := make(map[uint64]int64, n)
	for range n {
		m[binary.LittleEndian.Uint64(b)] = int64(binary.LittleEndian.Uint64(b[8:]))
		b = b[16:]
	}
	return m, b, nil
}

var errBoundary = errors.New("malformed boundary record")

// copiesTag starts the copies' part of a boundary record: no sample join
// record starts with it (their first byte is a version, 1 to
// sampleRecord), and records without copies read as before.
const copiesTag = 0xc0

// readCopies reads the copies' part of a boundary record, if b starts
// with one, and returns the rest.
func readCopies(b []byte) (map[uint64]bool, []byte, error) {
	if len(b) == 0 || b[0] != copiesTag {
		return nil, b, nil
	}
	if len(b) < 5 {
		return nil, nil, errBoundary
	}
	n := int(binary.LittleEndian.Uint32(b[1:]))
	b = b[5:]
	if n > len(b)/8 {
		return nil, nil, errBoundary
	}
	m := make(map[uint64]bool, n)
	for range n {
		m[binary.LittleEndian.Uint64(b)] = true
		b = b[8:]
	}
	return m, b, nil
}

func decodeBoundary(epoch int64, b []byte, res *owlv1.PathStats) (*boundary, error) {
	if len(b) < 48+8 {
		return nil, errBoundary
	}
	f := func(i int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])) }
	bd := &boundary{epoch: epoch, n: f(0), sumNS: f(1), sqNS: f(2), crossN: f(3), crossSumNS: f(4), crossSqNS: f(5), res: res, settled: true}
	rest := b[48:]
	var err error
	if bd.lost, rest, err = readEntries(rest); err != nil {
		return nil, err
	}
	if bd.extra, rest, err = readEntries(rest); err != nil {
		return nil, err
	}
	if bd.copies, rest, err = readCopies(rest); err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		if bd.sample, err = decodeSampleJoin(rest); err != nil {
			return nil, err
		}
	}
	return bd, nil
}
