package sample

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

// rankIntervalByCDF is rankInterval as it was first written: the
// binomial distribution function evaluated afresh at every rank.
func rankIntervalByCDF(n int, q, conf float64) (lo, hi int, cdfLo, cdfHi float64) {
	b := distuv.Binomial{N: float64(n), P: q}
	alpha := (1 - conf) / 2
	lo = 0
	for l := int(q*float64(n)) - 1; l >= 0; l-- {
		if b.CDF(float64(l)) <= alpha {
			lo = l
			break
		}
	}
	hi = n - 1
	for h := max(int(q*float64(n)), 0); h < n; h++ {
		if b.CDF(float64(h)) >= 1-alpha {
			hi = h
			break
		}
	}
	return lo, hi, b.CDF(float64(lo)), b.CDF(float64(hi))
}

// TestRankIntervalWalk: walking the binomial distribution term by term
// picks the ranks that evaluating its distribution function at each
// rank picks, with the same coverage, from 1 to 20,000 values; and
// rankInterval answers from its table what it computed.
func TestRankIntervalWalk(t *testing.T) {
	qs := []float64{0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999}
	for n := 1; n <= 20000; n += 1 + n/7 {
		for _, q := range qs {
			for _, conf := range []float64{0.9, 0.95, 0.99} {
				lo, hi, cl, ch := walkInterval(n, q, conf)
				wlo, whi, wcl, wch := rankIntervalByCDF(n, q, conf)
				if lo != wlo || hi != whi || math.Abs(cl-wcl) > 1e-9 || math.Abs(ch-wch) > 1e-9 {
					t.Fatalf("n %d q %v conf %v: ranks %d..%d (P %.12f, %.12f), by the distribution function %d..%d (P %.12f, %.12f)",
						n, q, conf, lo, hi, cl, ch, wlo, whi, wcl, wch)
				}
				for range 2 { // computed, then (unless another took its slot) kept
					if l, h, a, b := rankInterval(n, q, conf); l != lo || h != hi || a != cl || b != ch {
						t.Fatalf("n %d q %v conf %v: rankInterval %d..%d (P %v, %v), computed %d..%d (P %v, %v)", n, q, conf, l, h, a, b, lo, hi, cl, ch)
					}
				}
			}
		}
	}
}

// TestSortDelays: delays and their keys come out as a comparison sort
// orders them (delay, then key), their flows along with them, negative
// and repeated delays included.
func TestSortDelays(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 2, 10, 1000, 20000} {
		for _, spread := range []int64{1, 50, 1e6, math.MaxInt64 / 2} {
			delays, ids, flows := make([]int64, n), make([]uint64, n), make([]uint64, n)
			type triple struct {
				d        int64
				id, flow uint64
			}
			want := make([]triple, n)
			perm := rng.Perm(n) // keys differ, as a sample's do
			for i := range n {
				delays[i], ids[i], flows[i] = rng.Int64N(spread)-spread/3, uint64(perm[i])<<40, rng.Uint64()
				want[i] = triple{delays[i], ids[i], flows[i]}
			}
			slices.SortFunc(want, func(a, b triple) int { return cmp.Or(cmp.Compare(a.d, b.d), cmp.Compare(a.id, b.id)) })
			SortDelays(delays, ids, flows)
			for i := range n {
				if delays[i] != want[i].d || ids[i] != want[i].id || flows[i] != want[i].flow {
					t.Fatalf("n %d spread %d: at %d (%d, %d, %x), want (%d, %d, %x)", n, spread, i, delays[i], ids[i], flows[i], want[i].d, want[i].id, want[i].flow)
				}
			}
		}
	}
}

// BenchmarkSortDelays sorts a joined sample's 2,000 delays (5–50 ms, in
// key order as a join leaves them) with their keys and flows.
func BenchmarkSortDelays(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 5))
	const n = 2000
	delays, ids, flows := make([]int64, n), make([]uint64, n), make([]uint64, n)
	src := make([]int64, n)
	for i := range src {
		src[i] = int64(5e6 * (1 + rng.ExpFloat64()))
	}
	for b.Loop() {
		copy(delays, src)
		for i := range ids {
			ids[i], flows[i] = uint64(i)<<20, uint64(i)
		}
		SortDelays(delays, ids, flows)
	}
}
