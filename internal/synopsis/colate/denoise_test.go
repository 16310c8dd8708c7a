package colate

import (
	"math"
	"testing"

	"gonum.org/v1/gonum/mathext"
)

// TestDenoiseClosedForm: where Denoise takes the asymptotic root of Eq. 7,
// it is a root: the equation holds to far better than a unit of ξ.
func TestDenoiseClosedForm(t *testing.T) {
	for _, n := range []float64{1 << 10, 1 << 16, 1 << 20} {
		for _, tau := range []float64{1e8, 1e12, 4e15} {
			xi := (tau + 1 - n/2) / n
			if xi <= asymptotic || tau-xi <= asymptotic {
				continue
			}
			f := func(x float64) float64 { return mathext.Digamma(tau-x+1) - mathext.Digamma(x+1) - math.Log(n-1) }
			// f decreases in ξ: the root lies between ξ − ½ and ξ + ½.
			if f(xi-0.5) < 0 || f(xi+0.5) > 0 {
				t.Errorf("n %v τ %v: closed-form ξ %v is not within ½ of the root (f = %v, %v)", n, tau, xi, f(xi-0.5), f(xi+0.5))
			}
		}
	}
}
