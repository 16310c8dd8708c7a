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

// Load estimates, from the sketch's row with the highest sampling rate,
// how many flows of at least minPackets (weighted) packets it holds, and
// its packets. Such a flow fills its k cells of that row with at least
// minPackets/k packets each (scaled by the row's rate): the heavy cells,
// corrected for flows that share cells as in linear counting (h heavy of
// C cells hold about −C·ln(1 − h/C) flow-cells), divided by k. A row
// whose every cell is heavy gives +Inf large flows: the sketch is too
// small to tell.
func (l *LDS) Load(minPackets float64) (large, packets float64) {
	best := 0
	for r := 1; r < l.cfg.Rows; r++ {
		if l.cfg.rate(r) > l.cfg.rate(best) {
			best = r
		}
	}
	cols, rate := l.cfg.Cols, l.cfg.rate(best)
	perCell := minPackets * rate / float64(l.cfg.K)
	heavy := 0
	for _, c := range l.cells[best*cols : (best+1)*cols] {
		packets += float64(c.Count)
		if c.Count > 0 && float64(c.Count) >= perCell {
			heavy++
		}
	}
	packets /= rate
	if heavy == cols {
		return math.Inf(1), packets
	}
	return -float64(cols) * math.Log1p(-float64(heavy)/float64(cols)) / float64(l.cfg.K), packets
}

// ColsFor returns the cells per row for an epoch of about large flows of
// at least largePackets packets each, among packets packets, for rows
// rows, vLDA length k and a target probability eps that a large flow
// suffers a large collision in all of its R·k cells, rounded up to a
// power of two within [minCols, maxCols]. It is the larger of two terms:
//
//   - the paper's rule (§3.2), C = n·P·k / ε^(1/(R·k)) per row, n·P being
//     the large flows: cells needed grow with the large flows;
//   - the condition under which that rule holds (§3.1: "for small n/C"):
//     that the packets of the other flows a cell collects, packets/C on
//     average, stay below a large flow's share of a cell,
//     largePackets/k, so that small flows make small collisions:
//     C = k·packets/largePackets.
func ColsFor(large, packets, largePackets float64, rows, k int, eps float64, minCols, maxCols int) int {
	want := max(large*float64(k)/math.Pow(eps, 1/float64(rows*k)), packets*float64(k)/largePackets)
	cols := minCols
	for cols < maxCols && float64(cols) < want {
		cols <<= 1
	}
	return min(cols, maxCols)
}
