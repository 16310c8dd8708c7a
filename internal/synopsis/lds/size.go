package lds

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
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

// RowsFor picks which of cfg's rows an LDS keeps for epochs whose share
// loss of packets is lost or extra between the two ends (the set
// difference over the packets) and whose largest flow has largest
// packets. A flow of S packets puts S/k in each of its cells of a row
// sampling at rate ρ, and such a cell stays clean while ρ·(S/k)·loss is
// at most about one (the LDA's optimum, §2.3; the multi-bank LDS, §4.2).
// It keeps the rows from the densest that is clean for flows of
// smallFlow packets to the densest that is clean for the largest flow,
// and at least min(keep, rows) of them, adding the next sparser rows (or
// denser, past the sparsest): at no loss the two densest, at 1% every
// row of the default four. The result is a mask of cfg's rows (bit r:
// row r); keep < 1 keeps every row.
func RowsFor(cfg Config, loss, largest float64, keep int) uint32 {
	all := uint32(1)<<cfg.Rows - 1
	if keep < 1 || keep >= cfg.Rows {
		return all
	}
	order := make([]int, cfg.Rows) // densest first
	for r := range order {
		order[r] = r
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(cfg.rate(b), cfg.rate(a)) })
	clean := func(size float64) int { // the densest row clean for flows of size packets
		for i, r := range order {
			if cfg.rate(r)*size/float64(cfg.K)*loss <= 1 {
				return i
			}
		}
		return len(order) - 1
	}
	first, last := clean(smallFlow), clean(max(largest, smallFlow))
	for last-first+1 < keep {
		if last < len(order)-1 {
			last++
		} else {
			first--
		}
	}
	var mask uint32
	for _, r := range order[first : last+1] {
		mask |= 1 << r
	}
	return mask
}

// smallFlow is the flow size, in packets, from which RowsFor keeps rows
// clean: the smallest flows the paper's accuracy figures bin (100–499).
const smallFlow = 100

// Select is the configuration of the rows of cfg in mask (bit r: row r),
// in their order (0 and a mask of every row: cfg), or why it is not a
// valid configuration.
func (c Config) Select(mask uint32) (Config, error) {
	all := uint32(1)<<c.Rows - 1
	if mask == 0 || mask == all {
		return c, c.Validate()
	}
	if mask&^all != 0 {
		return Config{}, fmt.Errorf("lds row mask %#x names rows beyond the %d there are", mask, c.Rows)
	}
	out := c
	out.Rows, out.RowSampleLog2 = 0, nil
	for r := 0; r < c.Rows; r++ {
		if mask&(1<<r) == 0 {
			continue
		}
		out.Rows++
		if len(c.RowSampleLog2) > 0 {
			out.RowSampleLog2 = append(out.RowSampleLog2, c.RowSampleLog2[r])
		}
	}
	return out, out.Validate()
}

// Spoiled estimates, from the upstream sketch up and the downstream down
// of one epoch (after the collector took out the packets reconciliation
// found), the share of packets that still differ between them: lost or
// extra packets it could not take out, crossers it did not match,
// duplicates. In the densest row a cell of n packets stays clean with
// chance (1−p)^n when a share p of packets differ: p is the share for
// which the cells expected to disagree, on count or digest, are those
// that do. Cells are grouped by the bit length of n, since flows crowd
// their packets into few cells and a share read as if they were spread
// evenly would be too small. It is 0 when no cell disagrees and +Inf
// when every cell with packets does; the sketches must be Compatible.
func Spoiled(up, down *LDS) float64 {
	best := 0
	for r := 1; r < up.cfg.Rows; r++ {
		if up.cfg.rate(r) > up.cfg.rate(best) {
			best = r
		}
	}
	cols, mask := up.cfg.Cols, digestMask(up, down)
	u, d := up.cells[best*cols:(best+1)*cols], down.cells[best*cols:(best+1)*cols]
	var cells, packets [65]float64
	var bad, used float64
	for i := range u {
		n := max(u[i].Count, d[i].Count)
		if n == 0 {
			continue
		}
		b := bits.Len64(n)
		cells[b]++
		packets[b] += float64(n)
		used++
		if u[i].Count != d[i].Count || (u[i].Digest^d[i].Digest)&mask != 0 {
			bad++
		}
	}
	switch {
	case bad == 0:
		return 0
	case bad == used:
		return math.Inf(1)
	}
	lo, hi := 0.0, 1.0
	for range 60 {
		p := (lo + hi) / 2
		var want float64
		for b, c := range cells {
			if c > 0 {
				want += c * -math.Expm1(packets[b]/c*math.Log1p(-p))
			}
		}
		if want < bad {
			lo = p
		} else {
			hi = p
		}
	}
	return (lo + hi) / 2
}
