package colate

import (
	"cmp"
	"math"
	"slices"
)

// The paper's estimate (Theorem 2) takes the other flows' part of a flow's
// counters to be their average share, m/n of the vector's sum. Its error
// is heavy-tailed: a packet seen at one point only (traffic to or from a
// third point, or a packet that crossed an epoch boundary on its way)
// adds its whole timestamp, up to the epoch's length, to one counter. Most
// flows get none of these packets in their m counters and are then pushed
// off by the m/n share of them that Eq. 4 takes out; the few that do get
// one are off by far more. On the pair difference D = R − S of two
// vectors with one start, such counters stand out: a counter holding only
// packets that crossed both points holds the sum of their delays, a few
// microseconds to milliseconds, against up to a second for a one-sided
// packet. The robust estimate leaves them out, both from the other flows'
// share and from the flow's own counters, and scales the flow's remaining
// counters up to all m.

// outlierFactor is how many robust scales from the flow's line a counter
// may lie before it is taken for holding a one-sided packet.
const outlierFactor = 8

// massFactor is how many robust scales above the flow's median upstream
// counter a counter may hold before it is taken for one shared with
// another flow.
const massFactor = 5

// massMinPackets is the fewest packets per counter (p/m) a flow needs for
// the mass test.
const massMinPackets = 8

// reverseFactor: a counter below the flow's line whose R mass lies this
// many standard deviations (of a binomial share) above the median R holds
// packets of a flow going the other way.
const reverseFactor = 2.5

// lightFactor times the typical non-zero counter difference bounds the
// counters that make the other flows' share.
const lightFactor = 8

// shareCut is the largest |R − S| of a counter, as a share of the epoch,
// that counts towards the other flows' share: a counter holding only
// packets that crossed both points holds the sum of their delays, far
// below it; one-sided packets mostly lie above.
const shareCut = 1.0 / 64

// lightOffLineFactor: for a light flow (below massMinPackets per
// counter), a counter lies off the line only when it is more than this
// many times the flow's typical |D_j| away from it. (At 8 times, a counter
// of eight packets with one 40 ms delay among 1–3 ms ones was still taken
// for a one-sided packet.)
const lightOffLineFactor = 16

// robustSample bounds the counters typicalDiff looks at.
const robustSample = 4096

// medMAD returns the median and the median absolute deviation of x
// (which it reorders).
func medMAD(x []float64) (med, mad float64) {
	slices.Sort(x)
	med = median(x)
	for i := range x {
		x[i] = math.Abs(x[i] - med)
	}
	slices.Sort(x)
	return med, median(x)
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// robustPair estimates the sum of a flow's delays in one epoch from the
// flow's counters of two vectors with one start, in units; it says which of
// the flow's m counters it left out, and the variance of a counter's
// difference from the other flows (the noise of one counter).
//
// A counter j of the flow holds, upstream, S_j ≈ N_j·t̄ (N_j of the flow's
// packets, at t̄ on average into the epoch) and, as the difference,
// D_j = R_j − S_j ≈ N_j·μ: D_j ≈ ρ·S_j with one ratio ρ = μ/t̄ for all j,
// whatever N_j. A one-sided packet at t moves S_j or R_j by t and D_j by
// ∓t, far off that line. Counters more than outlierFactor robust scales
// off the line (ρ the median ratio) are left out; the others' sum, less
// the other flows' share, is scaled up to all m counters.
func robustPair(s, r *Vector, flowHash uint64, st *PairStats) (sum float64, left []bool, noise float64) {
	m := s.cfg.Subvector
	up, own, mult := flowCounters(s, r, flowHash)
	epoch := float64(s.cfg.Span) / float64(s.cfg.Unit)
	p := max(s.FlowPackets(flowHash), r.FlowPackets(flowHash))
	perCounter := float64(p) / float64(m)
	light := perCounter < massMinPackets
	foldCrossers(up, own, mult, epoch)
	if light {
		foldEach(own, mult, epoch)
	}
	ln := fitLine(up, own, st.Cut)
	if light {
		// A light flow's counters hold a few packets each: one packet
		// of the delays' tail moves a counter off the line as far as a
		// one-sided packet early in the epoch would. Leaving it out
		// (or recovering it through the ratio) drops the tail, so only
		// what the flow's delays do not reach is taken for a one-sided
		// packet: more than lightOffLineFactor times the flow's typical
		// counter. A one-sided packet earlier in the epoch than that is
		// counted as delay.
		ln.floor = lightOffLineFactor * typicalCounter(up, own)
	}
	// The flow tables say which counters another flow shares, light
	// flows included: a light flow's counter shared with a heavy flow
	// going the same way lies on the light flow's line (both ratios are
	// delay over time into the epoch), so only the tables tell it apart.
	// Without them (a table was full), the mass test does, for flows
	// heavy enough for it.
	shared, known := sharedCounters(s, r, flowHash, p)
	massCut, downCut := math.Inf(1), math.Inf(1)
	if !known {
		massCut, downCut = massCuts(up, own, perCounter)
	}
	left, offLine := ln.classify(up, own, massCut, shared)
	ps := ln.keep(up, own, mult, offLine, massCut, downCut, shared, st)
	if ps.k == 0 || ps.count <= 0 {
		return 0, left, 0
	}
	share := ps.total / ps.count
	// A counter's noise: the other flows' part (the spread of the light
	// counters), and for the counters recovered through the ratio, the
	// spread of the kept ones around the line (MAD × 1.4826 as σ).
	noise = max(ps.total2/ps.count-share*share, 0)
	if ps.k > 0 {
		sd := 1.4826 * ln.oMAD
		noise += float64(ps.recovered) * sd * sd / float64(ps.k)
	}
	return (ps.kept - ps.counters*share) * float64(m) / float64(ps.k), left, noise
}

// collideShare and collideFloor: another flow with at least
// max(collideFloor, collideShare·p) packets in an epoch (p the flow's own)
// puts enough into a counter it shares with the flow to matter; lighter
// ones are the other flows' share, taken out on average.
const (
	collideShare = 0.01
	collideFloor = 4
)

// sharedCounters marks the flow's counters that another flow's subvector
// also holds, for every flow either vector's table counts enough packets
// of (see collideShare). Which counters these are depends on the flows'
// hashes and counts, never on where the flow's own packets fell, so the
// counters kept hold a fair share of the flow's packets and scaling them
// up to m is unbiased; telling a shared counter by its mass is not (a
// counter heavy with the flow's own packets is left out with it, one
// with a light share of another flow's is kept). At most m/2 are marked,
// those with the most packets of other flows. known is false when a
// flow table was full, so that a flow may be missing from it.
func sharedCounters(s, r *Vector, flowHash uint64, p uint32) (shared []bool, known bool) {
	if s.flowsFull || r.flowsFull {
		return nil, false
	}
	m := s.cfg.Subvector
	mine := make([]int, m)
	var filter uint64 // bit i%64 of each of the flow's counters i
	for j := range mine {
		mine[j] = s.index(flowHash, uint64(j))
		filter |= 1 << (mine[j] % 64)
	}
	floor := max(collideFloor, uint32(math.Ceil(collideShare*float64(p))))
	// Each side's load: the packets of other flows that side counted, in
	// each of the flow's counters; a flow seen on one side only (traffic
	// to or from a third point) counts too.
	load := make([]float64, m)
	for _, v := range []*Vector{s, r} {
		side := make([]float64, m)
		v.eachFlow(func(g uint64, n uint32) {
			if g == flowHash || n < floor {
				return
			}
			for j := range uint64(m) {
				i := s.index(g, j)
				if filter>>(i%64)&1 == 0 {
					continue
				}
				for k, c := range mine {
					if c == i {
						side[k] += float64(n)
					}
				}
			}
		})
		for j := range load {
			load[j] = max(load[j], side[j])
		}
	}
	order := make([]int, 0, m)
	for j, l := range load {
		if l > 0 {
			order = append(order, j)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(load[b], load[a]) })
	shared = make([]bool, m)
	for _, j := range order[:min(len(order), m/2)] {
		shared[j] = true
	}
	return shared, true
}

// flowCounters reads the flow's m counters of both vectors: up holds
// S_j and own the difference D_j = R_j − S_j, a counter that c of the
// slots name split evenly between them (mult holds c per slot).
func flowCounters(s, r *Vector, flowHash uint64) (up, own []float64, mult []int) {
	idx, mult := s.slots(flowHash)
	up = make([]float64, len(idx))
	own = make([]float64, len(idx))
	for j, i := range idx {
		c := float64(mult[j])
		up[j] = float64(s.counter(i)) / c
		own[j] = float64(r.counter(i))/c - up[j]
	}
	return up, own, mult
}

// foldCrossers brings the differences own, in place and by whole epochs,
// back up to the flow's line where packets crossing the epoch's end took
// an epoch away.
//
// A slot of a counter that c slots name holds 1/c of it: it folds by
// epoch/c.
func foldCrossers(up, own []float64, mult []int, epoch float64) {
	// A packet that crossed the epoch's end on its way is in S_j of this
	// epoch, near its end, and in R_j of the next one: D_j is short by
	// about an epoch (the rest, its delay, is in the next epoch's D_j).
	// With many packets in flight at the boundary most of a flow's
	// counters may hold one. Each D_j is brought, by whole epochs, to
	// within half an epoch of the flow's line, whose ratio is taken from
	// the differences folded into [−δ/4, 3δ/4) (δ the epoch).
	var raw, folded []float64
	for j := range own {
		if up[j] > 0 {
			raw = append(raw, own[j]/up[j])
			ep := epoch / float64(mult[j])
			f := own[j] - ep*math.Floor((own[j]+ep/4)/ep)
			folded = append(folded, f/up[j])
		}
	}
	// Fold only where the folded ratios agree better than the raw ones
	// (crossers, not one-sided packets, are what folding undoes), or
	// where most counters lost over half their mass on the way (a
	// median ratio below −½: delivered packets' delays are a small part
	// of their times in the epoch, so only crossers do that; when most
	// counters hold nothing but crossers, as at the epoch in which a
	// flow starts, their raw ratios agree best of all). Only upwards: a
	// crosser only ever takes an epoch away.
	rMed, rMAD := medMAD(raw)
	fMed, fMAD := medMAD(folded)
	if len(folded) > 0 && (fMAD*math.Abs(rMed) < rMAD*math.Abs(fMed) || rMed < -0.5) {
		for j := range own {
			ep := epoch / float64(mult[j])
			own[j] += ep * max(0, math.Round((fMed*up[j]-own[j])/ep))
		}
	}
}

// foldEach brings each difference in own that lies over half an epoch
// below zero up by whole epochs: for a light flow, whose counters hold a
// few packets each, the line cannot tell a crosser from the rest, but a
// counter short by about an epoch holds one (its delay's remainder is in
// the next epoch's difference, so that the two add up to it).
func foldEach(own []float64, mult []int, epoch float64) {
	for j, d := range own {
		ep := epoch / float64(mult[j])
		own[j] += ep * max(0, math.Round(-d/ep))
	}
}

// pairLine is the flow's line D ≈ ρ·S and how its counters lie off it.
type pairLine struct {
	rho        float64   // ρ, the ratio D/S of the line
	off        []float64 // D_j − ρ·S_j per counter
	oMed, oMAD float64   // median and MAD of off
	scale      float64   // robust scale of off
	floor      float64   // the least |off − oMed| taken for off the line
}

// fitLine takes the flow's line through the median ratio of its counters
// and measures how far they lie off it.
func fitLine(up, own []float64, cut float64) pairLine {
	m := len(own)
	var ratios []float64
	for j := range own {
		if up[j] > 0 {
			ratios = append(ratios, own[j]/up[j])
		}
	}
	slices.Sort(ratios)
	rho := median(ratios)
	off := make([]float64, m)
	abs := make([]float64, m)
	for j := range own {
		off[j] = own[j] - rho*up[j]
		abs[j] = math.Abs(own[j])
	}
	oMed, oMAD := medMAD(slices.Clone(off))
	slices.Sort(abs)
	scale := max(oMAD, 0.05*median(abs), cut/outlierFactor/8)
	return pairLine{rho: rho, off: off, oMed: oMed, oMAD: oMAD, scale: scale}
}

// massCuts returns the upstream mass (massCut) and downstream mass
// (downCut) above which a counter is taken for one shared with another
// flow, each +Inf when the flow is too light for the test.
func massCuts(up, own []float64, perCounter float64) (massCut, downCut float64) {
	// A counter the flow shares with another flow's subvector holds that
	// flow's share of packets too: its mass stands out from the flow's
	// other counters (N_j ≈ p/m each) while its ratio does not.
	// With N_j ~ Binomial(p, 1/m) of the flow's p packets in counter j,
	// a counter whose mass lies massFactor standard deviations above
	// the median's holds another flow's too.
	uMed := median(sortedCopy(up))
	massCut = math.Inf(1)
	// Below massMinPackets per counter, a counter's mass says more about
	// when its packets came than about how many there were: no test.
	if perCounter >= massMinPackets && uMed > 0 {
		massCut = uMed * (1 + massFactor/math.Sqrt(perCounter))
	}
	// A counter below the line is recovered from its R, which must then
	// be clean. A flow going the other way that shares the counter puts
	// its packets in both vectors, R first (it passes the downstream
	// point first), pushing D below the line and R above the flow's
	// other counters' R: such a counter is left out instead (the mass
	// test on S alone misses it when that flow is lighter).
	downs := make([]float64, 0, len(own))
	for j := range own {
		if up[j] > 0 {
			downs = append(downs, up[j]+own[j])
		}
	}
	downCut = math.Inf(1)
	if dMed := median(sortedCopy(downs)); perCounter >= massMinPackets && dMed > 0 {
		downCut = dMed * (1 + reverseFactor/math.Sqrt(perCounter))
	}
	return massCut, downCut
}

// classify marks the counters off the line and those left out (off the
// line, shared or too heavy), and refits ρ as the ratio of the kept
// counters' sums.
func (ln *pairLine) classify(up, own []float64, massCut float64, shared []bool) (left, offLine []bool) {
	m := len(own)
	left = make([]bool, m)
	offLine = make([]bool, m)
	var sumD, sumS float64
	for j := range own {
		offLine[j] = math.Abs(ln.off[j]-ln.oMed) > max(outlierFactor*ln.scale, ln.floor)
		if ln.floor > 0 && math.Abs(own[j]) <= ln.floor {
			// A light flow's counter whose difference its delays reach is
			// not off the line whatever its ratio: a few packets' times
			// into the epoch vary from counter to counter far more than
			// the line allows (packets bunched early in the epoch and one
			// late: the late one's counter lies far below the line, and
			// recovering it as ρ·R multiplies its time by a ratio made
			// of the early ones').
			offLine[j] = false
		}
		left[j] = offLine[j] || up[j] > massCut || shared != nil && shared[j]
		if !left[j] {
			sumD += own[j]
			sumS += up[j]
		}
	}
	if sumS > 0 {
		// The ratio of the counters kept, a steadier ρ than the median
		// of single counters' ratios.
		ln.rho = sumD / sumS
	}
	return left, offLine
}

// pairSums are the sums robustPair's estimate is made of.
type pairSums struct {
	kept          float64 // the kept counters' differences
	k             int     // slots kept
	counters      float64 // counters kept (a slot of a counter c slots name counts 1/c)
	recovered     int     // kept counters recovered through the ratio
	total, total2 float64 // the light counters' sums, less the flow's own
	count         float64 // the light counters, less the flow's own
}

// keep sums the flow's kept counters, recovering those with a one-sided
// packet through the ratio, and takes them out of st's light counters.
func (ln *pairLine) keep(up, own []float64, mult []int, offLine []bool, massCut, downCut float64, shared []bool, st *PairStats) pairSums {
	ps := pairSums{total: st.LightSum, total2: st.LightSum2, count: float64(st.Counters)}
	cut, rho, off, oMed := st.Cut, ln.rho, ln.off, ln.oMed
	for j, d := range own {
		switch {
		case shared != nil && shared[j]:
			// Another flow's packets, known from the flow tables.
			continue
		case up[j] > massCut:
			// Another flow's packets on both sides: left out.
			continue
		case offLine[j] && off[j] < oMed && up[j]+own[j] > downCut:
			// Below the line with a heavy R: another flow's, going
			// the other way, on both sides; no clean side.
			continue
		case offLine[j]:
			ps.recovered++
			// A one-sided packet on one side: the flow's part comes
			// from the other side through the ratio, D ≈ ρ·S and
			// R ≈ (1 + ρ)·S. Below the line, S got the packet; above
			// it, R did.
			if off[j] < oMed {
				d = rho * (up[j] + own[j]) / (1 + rho)
			} else {
				d = rho * up[j]
			}
		}
		ps.kept += d
		ps.k++
		c := float64(mult[j])
		ps.counters += 1 / c
		if math.Abs(c*d) <= cut {
			// The flow's own counters are not the others' share (a
			// counter of c slots, c·d, taken out once over its slots).
			ps.total -= d
			ps.total2 -= c * d * d
			ps.count -= 1 / c
		}
	}
	return ps
}

// PairStats are what a query needs of two vectors with one start beyond
// one flow's counters: the same for every flow, worth keeping between
// queries (computing them reads every counter of both).
type PairStats struct {
	// Cut bounds |R − S| of the light counters, those that make the
	// other flows' share (robust estimate); LightSum and LightSum2 are
	// the sums of their differences and squared differences, Counters n.
	Cut, LightSum, LightSum2 float64
	Counters                 int
	// Spread is the variance of R − S over all counters (the paper's
	// estimate's noise).
	Spread float64
}

// NewPairStats reads two vectors with one start whole.
func NewPairStats(s, r *Vector) *PairStats {
	s.materialize()
	r.materialize()
	span := float64(s.cfg.Span) / float64(s.cfg.Unit)
	st := &PairStats{Counters: len(s.counters)}
	st.Cut = min(shareCut*span, lightFactor*typicalDiff(s.counters, r.counters))
	for i := range s.counters {
		if d := float64(r.counters[i]) - float64(s.counters[i]); math.Abs(d) <= st.Cut {
			st.LightSum += d
			st.LightSum2 += d * d
		}
	}
	st.Spread = spread(s.counters, r.counters)
	return st
}

// typicalDiff is the median |R − S| of the non-zero counter differences,
// from an even sample of at most robustSample counters.
func typicalDiff(s, r []uint64) float64 {
	step := max(1, len(s)/robustSample)
	d := make([]float64, 0, robustSample+1)
	for i := 0; i < len(s); i += step {
		if x := math.Abs(float64(r[i]) - float64(s[i])); x != 0 {
			d = append(d, x)
		}
	}
	slices.Sort(d)
	return median(d)
}

// typicalCounter is the median |D_j| of the flow's counters that hold
// some of its packets upstream.
func typicalCounter(up, own []float64) float64 {
	var d []float64
	for j, s := range up {
		if s > 0 {
			d = append(d, math.Abs(own[j]))
		}
	}
	slices.Sort(d)
	return median(d)
}

func sortedCopy(x []float64) []float64 {
	y := slices.Clone(x)
	slices.Sort(y)
	return y
}

func countTrue(b []bool) int {
	c := 0
	for _, x := range b {
		if x {
			c++
		}
	}
	return c
}
