package lds

import (
	"fmt"
	"math"
)

// Size dimensions an LDS after §3.1–3.2: for about flows flows per epoch,
// of which a share large are "large" (long enough to be measured well, e.g.
// ≥ 1,000 packets), a vLDA length k and a target probability eps that a
// large flow suffers only large collisions in all of its R·k cells:
//
//	R = max(1, round(−ln ε / k)),   C_total = n·k·R·P / ε^(1/(R·k))
//
// from Q(Rk) = 1 − (n·k·R·P / C_total)^(R·k) ≥ 1 − ε. It returns the rows
// and the cells per row.
func Size(flows int, large, eps float64, k int) (rows, cols int, err error) {
	if flows < 1 || large <= 0 || large > 1 || eps <= 0 || eps >= 1/math.E || k < 1 || k > MaxK {
		return 0, 0, fmt.Errorf("lds sizing needs flows ≥ 1, 0 < large share ≤ 1, 0 < ε < 1/e, 1 ≤ k ≤ %d; got %d, %g, %g, %d", MaxK, flows, large, eps, k)
	}
	rows = int(math.Max(1, math.Round(-math.Log(eps)/float64(k))))
	rows = min(rows, MaxRows)
	total := float64(flows) * float64(k) * float64(rows) * large / math.Pow(eps, 1/float64(rows*k))
	cols = int(math.Ceil(total / float64(rows)))
	cols = max(cols, k)
	if cols > MaxCols {
		return 0, 0, fmt.Errorf("lds sizing: %d cells per row exceed the limit %d", cols, MaxCols)
	}
	return rows, cols, nil
}
