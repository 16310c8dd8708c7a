package sample

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/owl-latency/owl/internal/synopsis"
)

// Joined is what two sides' samples of a path say together.
type Joined struct {
	// Delays are the one-way delays (ns) of the sampled packets both
	// sides saw, sorted; Keys the key (Config.Key) of each, in the same
	// order (a sample narrowed later drops delays by key).
	Delays []int64
	Keys   []uint64
	// Flows is the flow hash of each delay's packet (Entry.Flow of its
	// upstream entry, else of its downstream one; 0: neither said), in
	// the same order; nil when no entry of either side names a flow.
	Flows []uint64
	// UpLeft are the upstream entries with no downstream match (lost, or
	// arriving in a later epoch); DownLeft the downstream ones with no
	// upstream match (sent in an earlier epoch).
	UpLeft, DownLeft []Entry
	// Ambiguous counts the entries left out because an key came more
	// than once and which copy arrived when cannot be told; Duplicates the
	// extra downstream copies of a packet sent once.
	Ambiguous, Duplicates int
	// KeyBits is the width of the keys: the narrower of the two sides'
	// (the wider side's keys are narrowed to it).
	KeyBits int
}

// Join matches an upstream sample with a downstream one. downShiftNS is
// added to the downstream offsets: 0 for the same epoch, the epoch length
// for the next epoch's sample (packets that crossed the boundary). An
// key seen once on each side gives a delay; copies of one key
// are matched as RDA's policy matches them (see pair), and left out and
// counted where it does not guess.
func Join(up, down *Sample, downShiftNS int64) (Joined, error) {
	if up.cfg != down.cfg {
		return Joined{}, fmt.Errorf("%w: sampling seed or threshold differ (%x/%x and %x/%x)", synopsis.ErrMismatch,
			up.cfg.Seed, up.cfg.Threshold, down.cfg.Seed, down.cfg.Threshold)
	}
	var j Joined
	j.KeyBits = min(up.KeyBits(), down.KeyBits())
	up, down = up.withKeyBits(j.KeyBits), down.withKeyBits(j.KeyBits)
	u, d := up.Entries(), down.Entries()
	j.Delays = make([]int64, 0, min(len(u), len(d)))
	j.Keys = make([]uint64, 0, cap(j.Delays))
	if named := func(e Entry) bool { return e.Flow != 0 }; slices.ContainsFunc(u, named) || slices.ContainsFunc(d, named) {
		j.Flows = make([]uint64, 0, cap(j.Delays))
	}
	for len(u) > 0 || len(d) > 0 {
		switch {
		case len(d) == 0 || len(u) > 0 && u[0].Key < d[0].Key:
			n := run(u)
			j.UpLeft = append(j.UpLeft, u[:n]...)
			u = u[n:]
		case len(u) == 0 || d[0].Key < u[0].Key:
			n := run(d)
			j.DownLeft = append(j.DownLeft, d[:n]...)
			d = d[n:]
		case (len(u) == 1 || u[1].Key != u[0].Key) && (len(d) == 1 || d[1].Key != d[0].Key):
			// One copy each side, nearly every key: pair's first case.
			if at := d[0].OffsetNS + downShiftNS; at >= u[0].OffsetNS {
				j.add(at-u[0].OffsetNS, u[0], d[0])
			} else {
				j.Ambiguous += 2
			}
			u, d = u[1:], d[1:]
		default:
			nu, nd := run(u), run(d)
			j.pair(u[:nu], d[:nd], downShiftNS)
			u, d = u[nu:], d[nd:]
		}
	}
	SortDelays(j.Delays, j.Keys, j.Flows)
	return j, nil
}

// withKeyBits is s, or a copy of it, with keys of width b (at most its
// own).
func (s *Sample) withKeyBits(b int) *Sample {
	if s.KeyBits() == b {
		return s
	}
	n := &Sample{cfg: s.cfg, entries: slices.Clone(s.entries), keyBits: s.keyBits}
	_ = n.SetKeyBits(b) // b is the narrower of two valid widths
	return n
}

// SortDelays sorts delays and, along with them, their keys and flows
// (nil: none; equal delays by key). Each delay less the least is packed
// with its index into one word, and the words go through a
// least-significant-digit radix sort over only the bits the delays'
// range has, in as few passes of up to 11 bits as it takes (two for
// delays within 4 ms of each other, three within 8 s), the bits shared
// evenly among them: a pass clears and sums a count per digit value, and
// 2,049 of them cost more than the ~1,250 delays of an epoch's sample
// (25 bits take three passes of 9 bits, 513 counts each). Equal delays,
// rare, are then put in key order, and the keys and flows follow their
// indexes. A sample's delays are skewed (a long tail), which scattering
// by their top bits sorts poorly. Delays too far apart to share a word
// with an index (2⁵⁰ ns, 13 days, for the largest samples) are sorted by
// comparison.
func SortDelays(delays []int64, ids, flows []uint64) {
	n := len(delays)
	if n < 2 {
		return
	}
	lo := slices.Min(delays)
	var top uint64
	for _, d := range delays {
		top = max(top, uint64(d)-uint64(lo)) // d - lo, without overflow
	}
	ib := bits.Len(uint(n - 1)) // bits of an index
	scratch := sortScratch.Get().(*sortWork)
	defer sortScratch.Put(scratch)
	if cap(scratch.words) < 4*n {
		scratch.words = make([]uint64, 4*n)
	}
	ps, tmp := scratch.words[:n], scratch.words[n:2*n]
	keys, fl := scratch.words[2*n:3*n], scratch.words[3*n:4*n]
	copy(keys, ids)
	if flows != nil {
		copy(fl, flows)
	}
	for i := range ps {
		ps[i] = uint64(i)
	}
	if bits.Len64(top)+ib > 64 {
		slices.SortFunc(ps, func(a, b uint64) int {
			return cmp.Or(cmp.Compare(delays[a], delays[b]), cmp.Compare(keys[a], keys[b]))
		})
		for k, i := range ps {
			tmp[k] = uint64(delays[i])
		}
		for k, i := range ps {
			delays[k] = int64(tmp[k])
			ids[k] = keys[i]
			if flows != nil {
				flows[k] = fl[i]
			}
		}
		return
	}
	for i, d := range delays {
		ps[i] |= (uint64(d) - uint64(lo)) << ib
	}
	ps = radixSort(ps, tmp, ib, bits.Len64(top), &scratch.at)
	mask := uint64(1)<<ib - 1
	for i := 0; i < n; {
		j := i + 1
		for j < n && ps[j]>>ib == ps[i]>>ib {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(ps[i:j], func(a, b uint64) int { return cmp.Compare(keys[a&mask], keys[b&mask]) })
		}
		i = j
	}
	for k, p := range ps {
		i := p & mask
		delays[k] = int64(p>>ib + uint64(lo))
		ids[k] = keys[i]
		if flows != nil {
			flows[k] = fl[i]
		}
	}
}

// radixSort sorts words by their bits from low to low+span (ps, with tmp
// of the same length for the passes), in as few passes of up to
// radixBits bits as it takes, the bits shared evenly among them, and
// returns the one of ps and tmp that holds the sorted words.
func radixSort(ps, tmp []uint64, low, span int, at *[1<<radixBits + 1]int) []uint64 {
	passes := (span + radixBits - 1) / radixBits
	digit := 0 // bits a pass: as few as the passes allow
	if passes > 0 {
		digit = (span + passes - 1) / passes
	}
	dm := uint64(1)<<digit - 1
	for shift := low; shift < low+span; shift += digit {
		count := at[:dm+2]
		clear(count)
		for _, p := range ps {
			count[(p>>shift)&dm+1]++
		}
		for i := 1; i < len(count); i++ {
			count[i] += count[i-1]
		}
		for _, p := range ps {
			b := (p >> shift) & dm
			tmp[count[b]] = p
			count[b]++
		}
		ps, tmp = tmp, ps
	}
	return ps
}

// radixBits is the most bits SortDelays sorts by in one pass.
const radixBits = 11

// sortScratch holds SortDelays' working arrays between calls: they were
// a seventh of the bytes a collector under load allocated.
var sortScratch = sync.Pool{New: func() any { return new(sortWork) }}

// sortWork is SortDelays' working memory: the words it sorts, and a
// pass's digit counts, kept off the stack (16 KiB there made the stack of
// each collector worker that sorted grow, by copying, after the garbage
// collector had shrunk it while the worker waited).
type sortWork struct {
	words []uint64
	at    [1<<radixBits + 1]int
}

// run is the number of leading entries with the first one's key.
func run(es []Entry) int {
	n := 1
	for n < len(es) && es[n].Key == es[0].Key {
		n++
	}
	return n
}

// pair matches the copies of one key on both sides (each side's in
// time order) where the matching is forced, so that each delay is that
// of one packet:
//   - as many copies on each side: in order, when each arrived at or
//     after its own sending and before the next copy was sent;
//   - one copy fewer downstream: RDA's rule tells the lost copy (the one
//     whose loss leaves every arrival after its sending, when only one
//     does; it is left upstream, lost or arriving later), and the others
//     pair as above;
//   - one copy upstream and more downstream: the earliest arrival at or
//     after the sending, the others duplicates.
//
// Otherwise which copy arrived when cannot be told (RDA's mean needs only
// the sums; a delay does not): the copies are counted in Ambiguous.
func (j *Joined) pair(u, d []Entry, shift int64) {
	at := func(e Entry) int64 { return e.OffsetNS + shift }
	switch {
	case len(u) == len(d):
		if j.inOrder(u, d, shift) {
			return
		}
	case len(d) == len(u)-1:
		if lost, ok := lostCopy(u, d, shift); ok {
			rest := append(slices.Clone(u[:lost]), u[lost+1:]...)
			if j.inOrder(rest, d, shift) {
				j.UpLeft = append(j.UpLeft, u[lost])
				return
			}
		}
	case len(u) == 1 && len(d) > 1:
		for k, e := range d {
			if at(e) >= u[0].OffsetNS {
				j.add(at(e)-u[0].OffsetNS, u[0], e)
				j.Duplicates += len(d) - 1 - k
				// Copies seen before the sending belong to no one here.
				j.Ambiguous += k
				return
			}
		}
	}
	j.Ambiguous += len(u) + len(d)
}

// inOrder pairs u and d (as many of each) in order and adds their delays
// when each arrival came at or after its sending and before the next
// sending, and says whether it did.
func (j *Joined) inOrder(u, d []Entry, shift int64) bool {
	for i := range u {
		a := d[i].OffsetNS + shift
		if a < u[i].OffsetNS || i+1 < len(u) && a >= u[i+1].OffsetNS {
			return false
		}
	}
	for i := range u {
		j.add(d[i].OffsetNS+shift-u[i].OffsetNS, u[i], d[i])
	}
	return true
}

// add adds the delay of a packet sent as u and received as d.
func (j *Joined) add(delay int64, u, d Entry) {
	j.Delays, j.Keys = append(j.Delays, delay), append(j.Keys, u.Key)
	if j.Flows != nil {
		j.Flows = append(j.Flows, cmp.Or(u.Flow, d.Flow))
	}
}

// lostCopy applies synopsis.LostCopy, RDA's rule, to copies in time
// order, the downstream ones shifted by shift.
func lostCopy(u, d []Entry, shift int64) (int, bool) {
	sent, arrived := make([]int64, len(u)), make([]int64, len(d))
	for i, e := range u {
		sent[i] = e.OffsetNS
	}
	for i, e := range d {
		arrived[i] = e.OffsetNS + shift
	}
	return synopsis.LostCopy(sent, arrived)
}

// Remainder is a sample of the entries left over by a join j, for joining
// with a neighbouring epoch's sample.
func Remainder(cfg Config, j Joined, entries []Entry) *Sample {
	return &Sample{cfg: cfg, entries: slices.Clone(entries), sorted: false, keyBits: j.KeyBits}
}

// Quantile is a quantile of a sample of delays and its confidence
// interval.
type Quantile struct {
	Q      float64
	Value  int64 // the sample quantile
	Lo, Hi int64 // the interval's ends (order statistics)
	// Exact is true when the sample is the whole population (rate 1):
	// Value is the quantile itself, and Lo = Hi = Value.
	Exact bool
	// Confidence is the chance that [Lo, Hi] holds the population's
	// quantile: at least the confidence asked for where the sample is
	// large enough, less where an end had to be the sample's extreme
	// (a 95% interval of p99 needs about 370 delays, of p99.9 about
	// 3,700); 1 when Exact.
	Confidence float64
}

// Quantiles returns the q-quantiles of sorted delays, with intervals that
// hold the population's quantile with probability at least conf (from the
// binomial distribution of the number of sampled delays below it: the
// sample is a Bernoulli sample of the delivered packets). With exact
// (rate 1), the sample quantiles are the population's.
func Quantiles(sorted []int64, qs []float64, conf float64, exact bool) ([]Quantile, error) {
	if !(conf > 0 && conf < 1) {
		return nil, fmt.Errorf("confidence %v out of (0, 1)", conf)
	}
	n := len(sorted)
	out := make([]Quantile, 0, len(qs))
	for _, q := range qs {
		if !(q > 0 && q < 1) {
			return nil, fmt.Errorf("quantile %v out of (0, 1)", q)
		}
		if n == 0 {
			return nil, fmt.Errorf("no delays to take quantile %v of", q)
		}
		k := int(math.Ceil(q*float64(n))) - 1 // the sample quantile's rank (0-based)
		k = max(0, min(n-1, k))
		r := Quantile{Q: q, Value: sorted[k]}
		if exact {
			r.Lo, r.Hi, r.Exact, r.Confidence = r.Value, r.Value, true, 1
			out = append(out, r)
			continue
		}
		lo, hi, below, upTo := rankInterval(n, q, conf)
		r.Lo, r.Hi = sorted[lo], sorted[hi]
		// X(lo) ≤ ξq ≤ X(hi) ⇔ lo+1 ≤ B ≤ hi, B the values below ξq.
		r.Confidence = upTo - below
		out = append(out, r)
	}
	return out, nil
}

// rankInterval is the narrowest symmetric pair of ranks (0-based) l ≤ h
// with P(X(l) ≤ ξq ≤ X(h)) ≥ conf, where the number of sample values
// below the population quantile ξq is Binomial(n, q), and P(B ≤ l) and
// P(B ≤ h). Ranks are clamped to the sample: with too few values the
// interval runs to the extremes (and then holds with less than conf).
// The distribution is walked outwards from its middle one term at a
// time (each term from the one before), from one evaluation of its
// distribution function; answers are kept for the next call with the
// same arguments (intervals).
func rankInterval(n int, q, conf float64) (lo, hi int, cdfLo, cdfHi float64) {
	slot := &intervals[(uint64(n)*0x9e3779b97f4a7c15^math.Float64bits(q)*0xbf58476d1ce4e5b9^math.Float64bits(conf))>>(64-intervalBits)]
	if iv := slot.Load(); iv != nil && iv.n == n && iv.q == q && iv.conf == conf {
		return iv.lo, iv.hi, iv.cdfLo, iv.cdfHi
	}
	lo, hi, cdfLo, cdfHi = walkInterval(n, q, conf)
	slot.Store(&interval{n: n, q: q, conf: conf, lo: lo, hi: hi, cdfLo: cdfLo, cdfHi: cdfHi})
	return lo, hi, cdfLo, cdfHi
}

// intervals keeps rankInterval's answers, each slot the last whose
// arguments hash to it: the quantiles of paths' and flows' samples ask
// for a few quantiles of about the same sizes again and again.
var intervals [1 << intervalBits]atomic.Pointer[interval]

const intervalBits = 12

type interval struct {
	n            int
	q, conf      float64
	lo, hi       int
	cdfLo, cdfHi float64
}

// walkInterval is rankInterval, computed.
func walkInterval(n int, q, conf float64) (lo, hi int, cdfLo, cdfHi float64) {
	b := distuv.Binomial{N: float64(n), P: q}
	alpha := (1 - conf) / 2
	// X(l) ≤ ξq ⇔ at least l+1 values ≤ ξq ⇔ B ≥ l+1; take the largest l
	// with P(B ≤ l) ≤ alpha, and the smallest h with P(B ≤ h) ≥ 1−alpha.
	mid := max(int(q*float64(n)), 0)
	if mid >= n {
		mid = n - 1
	}
	ratio := q / (1 - q)
	// Down from mid: P(B ≤ l−1) = P(B ≤ l) − P(B = l), and P(B = l−1) =
	// P(B = l) · l / ((n−l+1) · ratio).
	cdfMid, pmfMid := b.CDF(float64(mid)), b.Prob(float64(mid))
	cdf, pmf := cdfMid, pmfMid
	lo, cdfLo = 0, math.Pow(1-q, float64(n))
	for l := mid; l >= 1; l-- {
		cdf -= pmf
		pmf *= float64(l) / (float64(n-l+1) * ratio)
		if cdf <= alpha {
			lo, cdfLo = l-1, max(cdf, 0)
			break
		}
	}
	// Up from mid: P(B ≤ h+1) = P(B ≤ h) + P(B = h+1), and P(B = h+1) =
	// P(B = h) · (n−h) / (h+1) · ratio.
	cdf, pmf = cdfMid, pmfMid
	hi, cdfHi = n-1, 1-math.Pow(q, float64(n))
	for h := mid; h < n; h++ {
		if cdf >= 1-alpha {
			hi, cdfHi = h, min(cdf, 1)
			break
		}
		pmf *= float64(n-h) / float64(h+1) * ratio
		cdf += pmf
	}
	return lo, hi, cdfLo, cdfHi
}
