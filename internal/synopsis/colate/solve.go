package colate

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Requirement is what an operator asks of COLATE (§5): RAM, reliability
// and confidence interval, and two measurements of the network.
type Requirement struct {
	// RAMBits is M, the bits a point gives its counter vector.
	RAMBits float64
	// Alpha is the required reliability α, Beta the confidence interval
	// β: P{|μ̃_f − μ_f| ≤ β·μ_f} ≥ α.
	Alpha, Beta float64
	// TMin and TMax are t^min and t^max: the smallest per-flow timestamp
	// sum in a vector the guarantee must cover, and the largest any flow
	// reaches (in timestamp units).
	TMin, TMax float64
	// Rho is (t_R − t_S)/(t_R + t_S) as measured on the network; the
	// individual interval is B = β·ρ (Eq. 12).
	Rho float64
	// VectorSum, when set, is t_X, the sum of one vector's timestamps.
	// owl closes a vector every epoch rather than when its sum reaches
	// T, so the other flows' noise in Eq. 22 comes from this sum, not
	// from T = n·2^(b−1); the solver then takes the most counters whose
	// width still holds a flow's counter (Eq. 15 with t_X for T).
	VectorSum float64
}

// Validate reports an unusable requirement.
func (q Requirement) Validate() error {
	switch {
	case q.RAMBits < 1024:
		return fmt.Errorf("colate RAM %v bits: want at least 1024", q.RAMBits)
	case q.Alpha <= 0 || q.Alpha >= 1:
		return fmt.Errorf("colate α %v out of range (0, 1)", q.Alpha)
	case q.Beta <= 0 || q.Beta > 1:
		return fmt.Errorf("colate β %v out of range (0, 1]", q.Beta)
	case q.TMin <= 0 || q.TMax < q.TMin:
		return fmt.Errorf("colate t_min %v and t_max %v: want 0 < t_min ≤ t_max", q.TMin, q.TMax)
	case q.Rho <= 0 || q.Rho > 1:
		return fmt.Errorf("colate ρ %v out of range (0, 1]", q.Rho)
	case q.VectorSum < 0:
		return fmt.Errorf("colate vector sum %v is negative", q.VectorSum)
	}
	return nil
}

// ParseRequirement reads RAM_BITS,ALPHA,BETA,TMIN,TMAX,RHO[,VECTOR_SUM]
// (the form of the probe's -colate-solve flag).
func ParseRequirement(s string) (Requirement, error) {
	f := strings.Split(s, ",")
	if len(f) != 6 && len(f) != 7 {
		return Requirement{}, fmt.Errorf("want RAM_BITS,ALPHA,BETA,TMIN,TMAX,RHO[,VECTOR_SUM], got %q", s)
	}
	var x [7]float64
	for i := range f {
		var err error
		if x[i], err = strconv.ParseFloat(strings.TrimSpace(f[i]), 64); err != nil {
			return Requirement{}, fmt.Errorf("want RAM_BITS,ALPHA,BETA,TMIN,TMAX,RHO[,VECTOR_SUM] numbers: %w", err)
		}
	}
	q := Requirement{RAMBits: x[0], Alpha: x[1], Beta: x[2], TMin: x[3], TMax: x[4], Rho: x[5], VectorSum: x[6]}
	return q, q.Validate()
}

// Parameters are the solver's answer.
type Parameters struct {
	Counters, Subvector, Bits int
	// Threshold is T.
	Threshold float64
	// A and B are the individual reliability and interval (Eq. 11, 12);
	// K is the standard normal quantile with P{−K ≤ Z ≤ K} = A.
	A, B, K float64
}

// ErrInfeasible says no n meets the requirement within the RAM.
var ErrInfeasible = errors.New("colate: no counter count meets the requirement in this RAM")

// Solve finds n, m, b and T from Eqs. 13, 14, 15 and 22. Eq. 22 is used as
// it follows from Eq. 18, B·t·(1/m − 1/n) = k·h/√m, that is
//
//	B²·t_min² = k²·n²·m/(n − m)² · {(t_min/m)(1 − 1/m) + ((T − t_min)/n)(1 − 1/n)},
//
// where the paper's print has (n − m) unsquared (which makes its own
// example parameters miss the requirement by orders of magnitude). With b = M/n
// (13), T = n·2^(b−1) (14) and m from (15),
//
//	m = t_max / (2^(b−1) − 1 + t_max/n),
//
// Eq. 22 is a function of n alone, solved by bisection on log n; b is then
// rounded up to whole bits, n = ⌊M/b⌋ and m to an even count.
func Solve(q Requirement) (Parameters, error) {
	if err := q.Validate(); err != nil {
		return Parameters{}, err
	}
	a := (1 + q.Alpha) / 2
	p := Parameters{A: a, B: q.Beta * q.Rho, K: math.Sqrt2 * math.Erfinv(a)}
	if q.VectorSum > 0 {
		return solveEpoch(q, p)
	}
	shape := func(n float64) (b, t, m float64) {
		b = q.RAMBits / n
		half := math.Exp2(b - 1)
		t = n * half
		m = q.TMax / (half - 1 + q.TMax/n)
		return b, t, m
	}
	// g > 0: the variance bound of Eq. 22 is not met.
	g := func(n float64) float64 {
		_, t, m := shape(n)
		if m < 2 || m >= n || t <= q.TMin {
			return math.Inf(1)
		}
		rhs := p.K * p.K * variance(n, m, t, q.TMin)
		return rhs - p.B*p.B*q.TMin*q.TMin
	}
	// n from M/64 (64-bit counters) to M/8 (8-bit ones). Where Eq. 22
	// holds for a range of n, the largest T is chosen: the fewest vectors
	// to store. T = n·2^(M/n − 1) falls as n grows, so that is the
	// smallest feasible n, refined by bisection against the boundary.
	lo, hi := math.Log(q.RAMBits/64), math.Log(q.RAMBits/8)
	const steps = 400
	best := math.NaN()
	prevX, prevOK := lo, false
	for i := 0; i <= steps; i++ {
		x := lo + (hi-lo)*float64(i)/steps
		ok := g(math.Exp(x)) <= 0
		if ok {
			if i > 0 && !prevOK {
				a, b := prevX, x
				for range 100 {
					mid := (a + b) / 2
					if g(math.Exp(mid)) <= 0 {
						b = mid
					} else {
						a = mid
					}
				}
				x = b
			}
			best = math.Exp(x)
			break
		}
		prevX, prevOK = x, ok
	}
	if math.IsNaN(best) {
		return p, ErrInfeasible
	}
	bits, _, _ := shape(best)
	// Whole bits: b rounds down (n up, by at most one bit's worth), which
	// keeps m ≥ 2 in Eq. 15.
	p.Bits = int(math.Floor(bits + 1e-9))
	p.Counters = int(q.RAMBits / float64(p.Bits))
	n := float64(p.Counters)
	half := math.Exp2(float64(p.Bits - 1))
	p.Threshold = n * half
	m := q.TMax / (half - 1 + q.TMax/n)
	p.Subvector = max(2, 2*int(math.Round(m/2)))
	return p, nil
}

// variance is Eq. 22's right side over k²: the variance of a flow's
// estimated timestamp sum t̃ with n counters, m per flow and a vector sum t.
func variance(n, m, t, tMin float64) float64 {
	return n * n * m / ((n - m) * (n - m)) * (tMin/m*(1-1/m) + (t-tMin)/n*(1-1/n))
}

// solveEpoch solves for vectors closed every epoch with a sum of
// q.VectorSum: for each whole width b, n = ⌊M/b⌋, and m the smallest even
// count that keeps a flow's counter (t_max/m plus the others' t_X/n)
// within half of b bits; the answer is the width that meets Eq. 22 with
// the smallest variance.
func solveEpoch(q Requirement, p Parameters) (Parameters, error) {
	found, best := false, 0.0
	for b := 8; b <= 64; b++ {
		n := math.Floor(q.RAMBits / float64(b))
		if n < 4 || n > MaxCounters {
			continue
		}
		room := math.Exp2(float64(b-1)) - q.VectorSum/n
		if room <= 0 {
			continue
		}
		m := math.Max(2, 2*math.Ceil(q.TMax/room/2))
		if m >= n || q.VectorSum <= q.TMin {
			continue
		}
		v := variance(n, m, q.VectorSum, q.TMin)
		if p.K*p.K*v > p.B*p.B*q.TMin*q.TMin {
			continue
		}
		if !found || v < best {
			p.Counters, p.Subvector, p.Bits, found, best = int(n), int(m), b, true, v
			p.Threshold = n * math.Exp2(float64(b-1))
		}
	}
	if !found {
		return p, ErrInfeasible
	}
	return p, nil
}

// Check evaluates Eq. 22 at given parameters: the achieved reliability A
// for flows with t_min, assuming the binomial noise of Theorem 1 (as the
// paper does), and the interval B it holds.
func Check(p Parameters, q Requirement) (achievedA float64) {
	n, m, t := float64(p.Counters), float64(p.Subvector), p.Threshold
	if q.VectorSum > 0 {
		t = q.VectorSum
	}
	k := p.B * q.TMin / math.Sqrt(variance(n, m, t, q.TMin))
	return math.Erf(k / math.Sqrt2)
}
