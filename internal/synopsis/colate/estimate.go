package colate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mathext"
)

// FlowEstimate is a flow's delay between two points from their vectors.
type FlowEstimate struct {
	MeanNS   float64
	StddevNS float64
	// SecondMomentNS2 is the estimate of E[D²] behind StddevNS (which
	// is √(E[D²] − μ²), 0 when that is negative).
	SecondMomentNS2 float64
	// Packets is p_f: the flow's packets at the upstream point, from the
	// vectors' flow counts; DownPackets at the downstream one. The
	// estimate assumes none was lost (the paper's assumption): a
	// difference is reported, not corrected.
	Packets, DownPackets uint64
	// Vectors is how many epochs' vectors held the flow.
	Vectors int
	// MeanErrNS is the standard error of MeanNS from the noise the other
	// flows leave in the flow's counters, measured from the spread of the
	// vectors' counters (of R − S where the two share a start).
	MeanErrNS float64
	// StddevEpochs is how many epochs gave StddevNS: those where both
	// points hold the same number of the flow's packets.
	StddevEpochs int
	// Overflow is true when a vector used had a counter outgrow its bits.
	Overflow bool
	// FullTables counts the vectors looked at whose flow table was full:
	// a flow first seen after it filled has no count there.
	FullTables int
	// Heavy is true when a robust query gave the paper's estimate
	// instead: the flow's counters each hold over half an epoch of delay.
	Heavy bool
	// LeftOut counts the flow's counters (over all epochs) the robust
	// estimate left out as holding a one-sided packet; Unpaired the
	// epochs it could not use (the flow in one point's vector only, or a
	// point without a vector).
	LeftOut, Unpaired int
}

// Mean estimates a flow's mean delay from the vectors of the upstream (s)
// and downstream (r) points that cover the flow (Eq. 3): the difference of
// the flows' timestamp sums, each vector's estimate (Theorem 2) moved to
// absolute time with the flow's packet count in that vector, over p_f.
func Mean(s, r []*Vector, flowHash uint64) (FlowEstimate, error) {
	q := NewQuery(flowHash, -1, nil)
	for _, v := range s {
		if err := q.Add(v, nil); err != nil {
			return FlowEstimate{}, err
		}
	}
	for _, v := range r {
		if err := q.Add(nil, v); err != nil {
			return FlowEstimate{}, err
		}
	}
	return q.Estimate()
}

// asymptotic is where Denoise solves Eq. 7 in closed form.
const asymptotic = 1e4

// Denoise estimates, for each of the flow's m counters, the part its own
// packets put there (Theorem 3): the w that maximizes the likelihood of
// the counter's value when the other flows' part is Binomial(τ, 1/n), with
// τ = t_X − t̃_f, which is the root of Eq. 7,
//
//	ψ(τ − S[j] + w + 1) − ψ(S[j] − w + 1) = ln(n − 1).
//
// The left side decreases in the noise ξ = S[j] − w, so the root is found
// by bisection on ξ ∈ [0, min(S[j], τ)].
func (v *Vector) Denoise(flowHash uint64) []float64 {
	tf := max(v.FlowSum(flowHash), 0)
	tau := float64(v.sum) - tf
	n := float64(v.cfg.Counters)
	target := math.Log(n - 1)
	s, mult := v.subvector(flowHash)
	w := make([]float64, len(s))
	for j, c := range s {
		// Denoise the whole counter, then split it back between the
		// slots that name it.
		k := float64(mult[j])
		w[j] = denoiseCounter(c*k, tau, n, target) / k
	}
	return w
}

// denoiseCounter is Denoise for one counter of value c: the root of Eq. 7.
func denoiseCounter(c, tau, n, target float64) float64 {
	f := func(xi float64) float64 {
		return mathext.Digamma(tau-xi+1) - mathext.Digamma(xi+1) - target
	}
	lo, hi := 0.0, math.Min(c, tau)
	switch {
	case hi <= 0 || f(0) <= 0:
		return c // no room for noise
	case f(hi) >= 0:
		return c - hi // the noise takes the whole counter
	}
	// For large arguments ψ(x + 1) = ln(x + ½) + O(1/x²), and the
	// root is ξ = (τ + 1 − n/2)/n, off by far less than a unit once
	// ξ and τ − ξ pass asymptotic; bisection is for small counters.
	if xi := (tau + 1 - n/2) / n; xi > asymptotic && tau-xi > asymptotic && xi < hi {
		return c - xi
	}
	for range 200 {
		mid := (lo + hi) / 2
		if f(mid) > 0 {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo <= 0.5 {
			break
		}
	}
	return c - (lo+hi)/2
}

// Stddev estimates the standard deviation of a flow's delay between two
// points from one vector of each, with the same start, that both hold all
// of the flow's packets (§4.2): the mean from Theorem 2, E[D²] from the
// denoised counters by gamma virtual repetitions (Theorem 4, Eq. 9–10):
// each random pairing Q of the m counters gives Σ_l (v_R[l] − v_S[l])²,
// v_X[l] = w̃_X[Q[2l]] − w̃_X[Q[2l−1]], an unbiased estimate of
// Σ_z (u_R[z] − u_S[z])².
func Stddev(s, r *Vector, flowHash uint64, gamma int, rng *rand.Rand) (FlowEstimate, error) {
	if gamma < 0 {
		return FlowEstimate{}, errors.New("colate: negative virtual repetitions")
	}
	if s.startNS != r.startNS {
		// Counter j's absolute sum is its relative one plus its packet
		// count times the start, and per-counter counts are unknown: only
		// a common start cancels out of the pair differences.
		return FlowEstimate{}, fmt.Errorf("colate: the standard deviation needs vectors with one start (%d and %d)", s.startNS, r.startNS)
	}
	q := NewQuery(flowHash, gamma, rng)
	if err := q.Add(s, r); err != nil {
		return FlowEstimate{}, err
	}
	return q.Estimate()
}

// Query gathers, one epoch's pair of vectors at a time, what a flow's
// estimate between two points needs, so that a long time range never
// holds more than one pair in memory.
type Query struct {
	flow  uint64
	gamma int
	rng   *rand.Rand
	cfg   *Config

	ref        int64 // absolute time the sums count from
	haveRef    bool
	sumS, sumR float64 // ns from ref
	ps, pr     uint64
	vectors    int
	noise      float64 // variance of t̃_R − t̃_S, ns²
	sq         float64 // Σ estimates of Σ_z d_z², ns²
	sqPackets  uint64
	sqEpochs   int
	overflow   bool

	// robust mode (see robust.go): sums over epochs with both vectors.
	robust      bool
	robSum      float64 // ns
	robPackets  float64
	robNoise    float64 // ns²
	robLeft     int     // counters left out
	robUnpaired int     // epochs of the flow without a vector pair
	crossing    bool    // an epoch where the flow's counts differ between the points
	fullTables  int     // vectors whose flow table was full
}

// Robust makes the query use the robust estimate of robust.go instead of
// the paper's Eq. 4: only epochs with a vector of each point count.
func (q *Query) Robust() *Query {
	q.robust = true
	return q
}

// NewQuery starts a query for one flow. The standard deviation comes from
// gamma virtual repetitions per epoch (the paper's §4.2.2), or, with gamma
// 0, from their exact expectation (the limit γ → ∞, at the cost of one);
// gamma < 0 asks for the mean only.
func NewQuery(flowHash uint64, gamma int, rng *rand.Rand) *Query {
	if rng == nil {
		rng = rand.New(rand.NewPCG(flowHash, 0x636f6c))
	}
	return &Query{flow: flowHash, gamma: gamma, rng: rng}
}

// Add takes one epoch's vectors of the upstream (s) and downstream (r)
// points; either may be nil (no vector stored, or a vector of another
// time). Vectors must share n, m, seed and unit.
func (q *Query) Add(s, r *Vector) error { return q.AddPair(s, r, nil) }

// AddPair is Add with the pair's statistics, when the caller keeps them
// (nil: computed here when needed).
func (q *Query) AddPair(s, r *Vector, st *PairStats) error {
	if err := q.checkVectors(s, r); err != nil {
		return err
	}
	var ps, pr uint32
	if s != nil {
		ps = s.FlowPackets(q.flow)
	}
	if r != nil {
		pr = r.FlowPackets(q.flow)
	}
	if ps == 0 && pr == 0 {
		return nil
	}
	if ps != pr {
		q.crossing = true
	}
	q.vectors++
	n, m := float64(q.cfg.Counters), float64(q.cfg.Subvector)
	unit := float64(q.cfg.Unit)
	// The noise of Σ_j S[j] is m times a counter's variance around its
	// mean, scaled by Eq. 4's n/(n − m); with a common start, what does
	// not cancel between the two points is the spread of R − S.
	scale := m * (n / (n - m)) * (n / (n - m)) * unit * unit
	paired := s != nil && r != nil && s.startNS == r.startNS && ps > 0 && pr > 0
	if paired && st == nil {
		st = NewPairStats(s, r)
	}
	if paired {
		q.noise += scale * st.Spread
	}
	q.addSide(s, ps, &q.ps, &q.sumS, unit, scale, paired)
	q.addSide(r, pr, &q.pr, &q.sumR, unit, scale, paired)
	var left []bool
	if q.robust {
		left = q.addRobust(s, r, ps, pr, st)
	}
	if paired && ps == pr && q.gamma >= 0 {
		q.sq += q.repetitions(s, r, left)
		q.sqPackets += uint64(ps)
		q.sqEpochs++
	}
	return nil
}

// checkVectors counts full flow tables, takes the query's settings and
// time reference from the first vector, and checks that the vectors
// (either may be nil) share them.
func (q *Query) checkVectors(s, r *Vector) error {
	for _, v := range []*Vector{s, r} {
		if v == nil {
			continue
		}
		if v.flowsFull {
			q.fullTables++
		}
		if q.cfg == nil {
			c := v.cfg
			q.cfg = &c
		}
		a, b := *q.cfg, v.cfg
		if a.Counters != b.Counters || a.Subvector != b.Subvector || a.Seed != b.Seed || a.Unit != b.Unit {
			return fmt.Errorf("%w: n %d/%d, m %d/%d, seed %x/%x, unit %v/%v", ErrMismatch,
				a.Counters, b.Counters, a.Subvector, b.Subvector, a.Seed, b.Seed, a.Unit, b.Unit)
		}
		if !q.haveRef {
			q.ref, q.haveRef = v.startNS, true
		}
	}
	return nil
}

// addSide adds one side's absolute timestamp sum, Theorem 2's relative
// one plus p_f times the vector's start, and its noise when unpaired.
func (q *Query) addSide(v *Vector, p uint32, packets *uint64, sum *float64, unit, scale float64, paired bool) {
	if v == nil || p == 0 {
		return
	}
	q.overflow = q.overflow || v.overflow
	*packets += uint64(p)
	*sum += v.FlowSum(q.flow)*unit + float64(p)*float64(v.startNS-q.ref)
	if !paired {
		q.noise += scale * v.ownSpread()
	}
}

// addRobust adds the robust estimate of one epoch's vector pair, or
// counts the epoch as unpaired; it returns the counters left out.
func (q *Query) addRobust(s, r *Vector, ps, pr uint32, st *PairStats) (left []bool) {
	if s == nil || r == nil || s.startNS != r.startNS || ps == 0 || pr == 0 {
		q.robUnpaired++
		return nil
	}
	m := float64(q.cfg.Subvector)
	unit := float64(q.cfg.Unit)
	sum, l, noise := robustPair(s, r, q.flow, st)
	left = l
	k := m - float64(countTrue(l))
	q.robSum += sum * unit
	// The sum is of the delays of the packets the downstream
	// point saw (counters with a lost one are taken from their
	// downstream side): the mean is over those.
	q.robPackets += float64(pr)
	q.robLeft += countTrue(l)
	if k > 0 {
		// k counters of noise, scaled up to m; and the
		// packets of the m − k counters left out, estimated
		// from the others' (a binomial share of p).
		pe := float64(pr)
		mu := sum * unit / pe
		q.robNoise += (m / k) * (m / k) * (k*noise*unit*unit + (m-k)*(pe/m)*(1-1/m)*mu*mu)
	}
	return left
}

// ownSpread is the variance of the vector's counters, computed once per
// content: the paper's estimate of every flow asked about in an unpaired
// vector needs it. The content is known by its packets and sum (Insert and
// Merge change the packets; Reset forgets the value).
func (v *Vector) ownSpread() float64 {
	if v.spreadOK && v.spreadAt == [2]uint64{v.packets, v.sum} {
		return v.spreadVal
	}
	v.materialize()
	v.spreadVal, v.spreadAt, v.spreadOK = spread(v.counters, nil), [2]uint64{v.packets, v.sum}, true
	return v.spreadVal
}

// spread is the variance of a's counters, or of b − a when b is given.
func spread(a, b []uint64) float64 {
	at := func(i int) float64 {
		if b == nil {
			return float64(a[i])
		}
		return float64(b[i]) - float64(a[i])
	}
	var sum float64
	for i := range a {
		sum += at(i)
	}
	mean := sum / float64(len(a))
	var ss float64
	for i := range a {
		d := at(i) - mean
		ss += d * d
	}
	return ss / float64(len(a))
}

// repetitions averages Σ_l (v_R[l] − v_S[l])² over gamma random pairings
// of the denoised counters (Theorem 4), in ns². Counters in left are left
// out (and one more when that leaves an odd number), the result scaled
// back to all m.
func (q *Query) repetitions(s, r *Vector, left []bool) float64 {
	ws, wr := s.Denoise(q.flow), r.Denoise(q.flow)
	unit := float64(q.cfg.Unit)
	var perm []int
	for i := range ws {
		if left == nil || !left[i] {
			perm = append(perm, i)
		}
	}
	perm = perm[:len(perm)&^1]
	m := len(perm)
	if m == 0 {
		return 0
	}
	if q.gamma == 0 {
		// The limit of γ → ∞: over a uniform random pairing each of the
		// k(k−1)/2 pairs {a, b} of kept counters is one of the k/2
		// pairs with probability 1/(k − 1), so the expectation of
		// Σ_l (x_a − x_b)², x = w̃_R − w̃_S, is
		// Σ_{a<b} (x_a − x_b)²/(k − 1) = k/(k − 1)·Σ_j (x_j − x̄)².
		var mean, ss float64
		for _, j := range perm {
			mean += wr[j] - ws[j]
		}
		mean /= float64(m)
		for _, j := range perm {
			d := wr[j] - ws[j] - mean
			ss += d * d
		}
		return float64(m) / float64(m-1) * ss * unit * unit * float64(len(ws)) / float64(m)
	}
	var acc float64
	for range q.gamma {
		q.rng.Shuffle(m, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		var sq float64
		for l := 0; l < m/2; l++ {
			a, b := perm[2*l], perm[2*l+1]
			d := ((wr[a] - wr[b]) - (ws[a] - ws[b])) * unit
			sq += d * d
		}
		acc += sq
	}
	return acc / float64(q.gamma) * float64(len(ws)) / float64(m)
}

// Vectors is how many epochs added so far held the flow.
func (q *Query) Vectors() int { return q.vectors }

// Estimate returns what the vectors added so far say of the flow.
func (q *Query) Estimate() (FlowEstimate, error) {
	out := FlowEstimate{Packets: q.ps, DownPackets: q.pr, Vectors: q.vectors, StddevEpochs: q.sqEpochs, Overflow: q.overflow, FullTables: q.fullTables}
	if q.ps == 0 || q.pr == 0 {
		return out, ErrNoPackets
	}
	out.MeanNS = (q.sumR - q.sumS) / float64(q.ps)
	out.MeanErrNS = math.Sqrt(q.noise) / float64(q.ps)
	// The robust estimate reads each counter's delay sum against an
	// epoch: a flow whose counters each hold more than half an epoch of
	// delay (a heavy flow with long delays: many packets in flight, so
	// every counter holds crossers) is past what it can unfold; the
	// paper's, which moves each vector's sum to absolute time with the
	// flow's counts, is exact for the flow's own crossers and has its
	// noise small next to such a flow.
	// Only where crossers are there to unfold (the flow's counts differ
	// between the points in some epoch) and none was lost (they agree
	// over the range: the paper's estimate has no answer to loss).
	heavy := false
	if q.robust && q.vectors > 0 && q.crossing && q.ps == q.pr {
		perCounter := float64(q.pr) / float64(q.vectors) / float64(q.cfg.Subvector)
		heavy = out.MeanNS*perCounter > float64(q.cfg.Span)/2
	}
	if q.robust && !heavy {
		out.LeftOut, out.Unpaired = q.robLeft, q.robUnpaired
		if q.robPackets == 0 {
			return out, ErrNoPackets
		}
		out.MeanNS = q.robSum / q.robPackets
		out.MeanErrNS = math.Sqrt(q.robNoise) / q.robPackets
	}
	out.Heavy = heavy
	if q.sqPackets > 0 {
		out.SecondMomentNS2 = q.sq / float64(q.sqPackets)
		out.StddevNS = math.Sqrt(math.Max(out.SecondMomentNS2-out.MeanNS*out.MeanNS, 0))
	}
	return out, nil
}

// Reliability is the probability that a mean estimate with standard error
// errNS is within beta·|mean| of the truth, for a normal error: the
// achieved α at β.
func Reliability(meanNS, errNS, beta float64) float64 {
	if errNS <= 0 {
		return 1
	}
	return math.Erf(beta * math.Abs(meanNS) / (errNS * math.Sqrt2))
}

// HalfWidth is the half-width of the interval that holds a normal
// estimate with standard error errNS with probability alpha.
func HalfWidth(errNS, alpha float64) float64 {
	return math.Sqrt2 * math.Erfinv(alpha) * errNS
}
