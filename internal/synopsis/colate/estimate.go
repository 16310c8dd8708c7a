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
	// Vectors is how many vectors of each side held the flow.
	Vectors int
}

// Mean estimates a flow's mean delay from the vectors of the upstream (s)
// and downstream (r) points that cover the flow (Eq. 3): the difference of
// the flows' timestamp sums, each vector's estimate (Theorem 2) moved to
// absolute time with the flow's packet count in that vector, over p_f.
func Mean(s, r []*Vector, flowHash uint64) (FlowEstimate, error) {
	if err := compatible(s, r); err != nil {
		return FlowEstimate{}, err
	}
	var ref int64
	switch {
	case len(s) > 0:
		ref = s[0].startNS
	case len(r) > 0:
		ref = r[0].startNS
	}
	total := func(vs []*Vector) (sumNS float64, packets uint64, vectors int) {
		for _, v := range vs {
			p := v.FlowPackets(flowHash)
			if p == 0 {
				continue
			}
			vectors++
			packets += uint64(p)
			sumNS += v.FlowSum(flowHash)*float64(v.cfg.Unit) + float64(p)*float64(v.startNS-ref)
		}
		return sumNS, packets, vectors
	}
	ss, ps, vs := total(s)
	rs, pr, _ := total(r)
	out := FlowEstimate{Packets: ps, DownPackets: pr, Vectors: vs}
	if ps == 0 || pr == 0 {
		return out, ErrNoPackets
	}
	out.MeanNS = (rs - ss) / float64(ps)
	return out, nil
}

func compatible(s, r []*Vector) error {
	var first *Vector
	for _, v := range append(append([]*Vector(nil), s...), r...) {
		if first == nil {
			first = v
			continue
		}
		a, b := first.cfg, v.cfg
		if a.Counters != b.Counters || a.Subvector != b.Subvector || a.Seed != b.Seed || a.Unit != b.Unit {
			return fmt.Errorf("colate vectors differ: n %d/%d, m %d/%d, seed %x/%x, unit %v/%v",
				a.Counters, b.Counters, a.Subvector, b.Subvector, a.Seed, b.Seed, a.Unit, b.Unit)
		}
	}
	return nil
}

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
	target := math.Log(float64(v.cfg.Counters) - 1)
	s := v.subvector(flowHash)
	w := make([]float64, len(s))
	for j, c := range s {
		f := func(xi float64) float64 {
			return mathext.Digamma(tau-xi+1) - mathext.Digamma(xi+1) - target
		}
		lo, hi := 0.0, math.Min(c, tau)
		switch {
		case hi <= 0 || f(0) <= 0:
			w[j] = c // no room for noise
			continue
		case f(hi) >= 0:
			w[j] = c - hi // the noise takes the whole counter
			continue
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
		w[j] = c - (lo+hi)/2
	}
	return w
}

// Stddev estimates the standard deviation of a flow's delay between two
// points from one vector of each, with the same start, that both hold all
// of the flow's packets (§4.2): the mean from Theorem 2, E[D²] from the denoised counters by
// gamma virtual repetitions (Theorem 4, Eq. 9–10): each random pairing Q of
// the m counters gives Σ_l (v_R[l] − v_S[l])², v_X[l] = w̃_X[Q[2l]] −
// w̃_X[Q[2l−1]], an unbiased estimate of Σ_z (u_R[z] − u_S[z])².
func Stddev(s, r *Vector, flowHash uint64, gamma int, rng *rand.Rand) (FlowEstimate, error) {
	est, err := Mean([]*Vector{s}, []*Vector{r}, flowHash)
	if err != nil {
		return est, err
	}
	if gamma < 1 {
		return est, errors.New("colate: at least one virtual repetition")
	}
	if s.startNS != r.startNS {
		// Counter j's absolute sum is its relative one plus its packet
		// count times the start, and per-counter counts are unknown: only
		// a common start cancels out of the pair differences.
		return est, fmt.Errorf("colate: the standard deviation needs vectors with one start (%d and %d)", s.startNS, r.startNS)
	}
	ws, wr := s.Denoise(flowHash), r.Denoise(flowHash)
	unit := float64(s.cfg.Unit)
	m := len(ws)
	q := make([]int, m)
	for i := range q {
		q[i] = i
	}
	var acc float64
	for range gamma {
		rng.Shuffle(m, func(i, j int) { q[i], q[j] = q[j], q[i] })
		var sq float64
		for l := 0; l < m/2; l++ {
			a, b := q[2*l], q[2*l+1]
			vs := ws[a] - ws[b]
			vr := wr[a] - wr[b]
			d := (vr - vs) * unit
			sq += d * d
		}
		acc += sq
	}
	meanSq := acc / float64(gamma) / float64(est.Packets)
	est.SecondMomentNS2 = meanSq
	est.StddevNS = math.Sqrt(math.Max(meanSq-est.MeanNS*est.MeanNS, 0))
	return est, nil
}
