package delays

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// TestCDF: a CDF read from a sketch of weighted delays rises from 0 to
// exactly 1 at the largest delay, and never past 1, whatever rounding
// the weights' sums bring.
func TestCDF(t *testing.T) {
	for _, w := range []float64{1, 1.0 / 3, 0.1, 1 / 0.3, 7.7} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			s := New()
			for i := 1; i <= 1000; i++ {
				if err := s.AddWithCount(float64(i*i), w); err != nil {
					t.Fatal(err)
				}
			}
			maxNS, _ := s.GetMaxValue()
			at := []float64{0, 1, 10, 1e3, 1e4, 1e5, 5e5, 9e5, maxNS, 1e6, 2e6, math.MaxFloat64}
			cdf := CDF(s, at)
			for i, f := range cdf {
				if f < 0 || f > 1 || i > 0 && f < cdf[i-1] {
					t.Errorf("CDF at %v is %v (before: %v)", at[i], f, cdf[:i])
				}
				if at[i] >= maxNS && f != 1 {
					t.Errorf("CDF at %v, past the largest value %v, is %v (1%+g), not 1", at[i], maxNS, f, f-1)
				}
			}
			if cdf[0] != 0 {
				t.Errorf("CDF at 0, below every value, is %v", cdf[0])
			}
		})
	}
}

// oneByOne is the sketch of delays added one at a time, as Sketch's
// runs must give it.
func oneByOne(delaysNS []int64, weight float64) *ddsketch.DDSketch {
	s := New()
	for _, d := range delaysNS {
		_ = s.AddWithCount(float64(d), weight)
	}
	return s
}

// epochDelays is n delays of 5 ms × (1 + an exponential), sorted, as
// a sample's join gives them.
func epochDelays(n int) []int64 {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(5e6 * (1 + rng.ExpFloat64()))
	}
	slices.Sort(out)
	return out
}

// TestSketchRuns: a sketch built by runs of delays within a bin holds
// the bins a sketch of the delays added one at a time holds, sorted or
// not, of either sign, zero and the largest values included.
func TestSketchRuns(t *testing.T) {
	sorted := epochDelays(1250)
	mixed := append([]int64{-4e6, -4e6, -3, 0, 0, 1, 2, 3}, sorted...)
	mixed = append(mixed, 1e13, 2e13, math.MaxInt64)
	shuffled := slices.Clone(mixed)
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, tc := range []struct {
		name   string
		ds     []int64
		weight float64
	}{{"sorted", sorted, 4}, {"mixed", mixed, 1}, {"shuffled", shuffled, 8}, {"empty", nil, 1}} {
		got, want := Sketch(tc.ds, tc.weight), oneByOne(tc.ds, tc.weight)
		if got.GetZeroCount() != want.GetZeroCount() {
			t.Errorf("%s: zero count %v, want %v", tc.name, got.GetZeroCount(), want.GetZeroCount())
		}
		for sign, st := range map[string][2]store.Store{
			"positive": {got.GetPositiveValueStore(), want.GetPositiveValueStore()},
			"negative": {got.GetNegativeValueStore(), want.GetNegativeValueStore()}} {
			g, w := bins(st[0]), bins(st[1])
			if !maps.Equal(g, w) {
				t.Errorf("%s: %s bins %v, want %v", tc.name, sign, g, w)
			}
			if tc.name == "sorted" && sign == "positive" && len(w) < 50 {
				t.Errorf("only %d bins: the runs are not tried", len(w))
			}
		}
	}
}

func bins(s store.Store) map[int]float64 {
	out := map[int]float64{}
	s.ForEach(func(index int, count float64) bool {
		out[index] = count
		return false
	})
	return out
}

// BenchmarkSketch is a sketch of an epoch's 1,250 sampled delays, by
// runs within a bin (runs) and one delay at a time (each).
func BenchmarkSketch(b *testing.B) {
	ds := epochDelays(1250)
	b.Run("runs", func(b *testing.B) {
		for b.Loop() {
			Sketch(ds, 4)
		}
	})
	b.Run("each", func(b *testing.B) {
		for b.Loop() {
			oneByOne(ds, 4)
		}
	})
}
