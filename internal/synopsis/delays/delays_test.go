package delays

import (
	"fmt"
	"math"
	"testing"
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
