package lds

import (
	"math"
	"math/bits"

	"github.com/owl-latency/owl/internal/synopsis"
)

// versionPacked is the wire version whose cells are bit-packed (SetPacked).
const versionPacked = 3

// SetPacked chooses the packed wire form (version 3) for collectors that
// read it: per row, the counts and the sums' distance from what the count
// predicts are Exp-Golomb codes of an order fitted to the row, and the
// digests take their width in bits. A dense row's cell takes about 9.5
// bytes with 4-byte digests, where varints took 12.
func (l *LDS) SetPacked(on bool) { l.packed = on }

// Wire is how a probe writes its sketches for its collector: digests of
// DigestBytes, cells packed (version 3) or not.
type Wire struct {
	DigestBytes int
	Packed      bool
}

// DefaultWire is what every collector reads: version 1.
var DefaultWire = Wire{DigestBytes: 8}

// SetWire sets the digest width and the packing.
func (l *LDS) SetWire(w Wire) error {
	if err := l.SetDigestBytes(w.DigestBytes); err != nil {
		return err
	}
	l.SetPacked(w.Packed)
	return nil
}

// Wire returns the wire form the sketch is written in (as decoded, for
// one that was).
func (l *LDS) Wire() Wire { return Wire{DigestBytes: l.DigestBytes(), Packed: l.packed} }

// rowCenter is the mean timestamp offset of row r's packets, rounded: a
// cell of c packets is expected to sum to about c times it. Any value
// decodes; this one makes the sums' residuals small.
func rowCenter(row []Cell) int64 {
	var sum, count float64
	for _, c := range row {
		sum += float64(c.SumNS)
		count += float64(c.Count)
	}
	if count == 0 {
		return 0
	}
	m := math.Round(sum / count)
	if math.IsNaN(m) || math.Abs(m) > 1<<62 {
		return 0
	}
	return int64(m)
}

// residual is a cell's sum less count times center, zig-zag coded; it
// wraps like the decoder's inverse, so every cell round-trips.
func residual(c Cell, center int64) uint64 {
	r := c.SumNS - int64(c.Count)*center
	return uint64(r<<1) ^ uint64(r>>63)
}

// unresidual inverts residual.
func unresidual(z, count uint64, center int64) int64 {
	r := int64(z>>1) ^ -int64(z&1)
	return r + int64(count)*center
}

// appendPacked appends the cells in the packed form:
//
//	per row: count order (6 bits) | residual order (6 bits) | center
//	(64 bits) | per cell: count (Exp-Golomb, count order), then for a
//	non-empty cell its residual (Exp-Golomb, residual order) and digest
//	(8 × width bits), for an empty one its sum (Exp-Golomb, order 0)
//
// padded with zero bits to a byte.
func (l *LDS) appendPacked(b []byte, width int) []byte {
	w := synopsis.BitWriter{B: b}
	for r := range l.cfg.Rows {
		row := l.cells[r*l.cfg.Cols : (r+1)*l.cfg.Cols]
		center := rowCenter(row)
		var countLen, resLen [65]int
		for _, c := range row {
			countLen[bits.Len64(c.Count)]++
			if c.Count > 0 {
				resLen[bits.Len64(residual(c, center))]++
			}
		}
		kc, ks := synopsis.BestExpGolomb(&countLen), synopsis.BestExpGolomb(&resLen)
		w.Bits(uint64(kc), 6)
		w.Bits(uint64(ks), 6)
		w.Bits(uint64(center), 64)
		empty := 0 // empty cells of sum 0 not written yet: 2 + kc zero bits each
		for _, c := range row {
			if c.Count == 0 && c.SumNS == 0 {
				empty++
				continue
			}
			w.Bits(0, empty*(2+kc))
			empty = 0
			w.ExpGolomb(c.Count, kc)
			if c.Count == 0 {
				w.ExpGolomb(uint64(c.SumNS<<1)^uint64(c.SumNS>>63), 0)
				continue
			}
			w.ExpGolomb(residual(c, center), ks)
			w.Bits(c.Digest, 8*width)
		}
		w.Bits(0, empty*(2+kc))
	}
	return w.Done()
}

// readPacked reads cells the packed form of total cells in rows of cols
// from b, into cells unless it is nil; false for a truncated or damaged
// form (trailing bits included).
func readPacked(b []byte, cells []Cell, rows, cols, width int) bool {
	rd := synopsis.BitReader{B: b}
	fast := !slowCells
	for r := range rows {
		kc, ok1 := rd.Bits(6)
		ks, ok2 := rd.Bits(6)
		c64, ok3 := rd.Bits(64)
		if !ok1 || !ok2 || !ok3 {
			return false
		}
		center := int64(c64)
		empty := 2 + int(kc) // bits of an empty cell of sum 0: its two codes, all zeros
		for i := 0; i < cols; i++ {
			c, ok := Cell{}, false
			if p, peeked := rd.Peek(); fast && peeked {
				// A run of empty cells, many in the rows that sample
				// few packets, in one Peek.
				if empty <= 57 && p&(1<<empty-1) == 0 { // at least one in the Peek
					n := min(min(bits.TrailingZeros64(p), 57)/empty, cols-i)
					rd.Advance(n * empty)
					if cells != nil {
						clear(cells[r*cols+i : r*cols+i+n])
					}
					i += n - 1
					continue
				}
				c, ok = readCellFast(&rd, p, int(kc), int(ks), width, center)
			}
			if ok {
				if cells != nil {
					cells[r*cols+i] = c
				}
				continue
			}
			count, ok := rd.ExpGolomb(int(kc))
			if !ok {
				return false
			}
			c.Count = count
			if count == 0 {
				z, ok := rd.ExpGolomb(0)
				if !ok {
					return false
				}
				c.SumNS = int64(z>>1) ^ -int64(z&1)
			} else {
				z, ok := rd.ExpGolomb(int(ks))
				d, ok2 := rd.Bits(8 * width)
				if !ok || !ok2 {
					return false
				}
				c.SumNS, c.Digest = unresidual(z, count, center), d
			}
			if cells != nil {
				cells[r*cols+i] = c
			}
		}
	}
	return rd.Done()
}

// slowCells makes readPacked read every cell field by field (tests: both
// ways must read the same).
var slowCells bool

// readCellFast reads a cell whose codes are within p (the reader's Peek)
// and whose digest within the next Peek (most cells), without the checks
// of the reader's methods on every field; false: it read nothing, and
// the caller reads the cell field by field.
func readCellFast(rd *synopsis.BitReader, p uint64, kc, ks, width int, center int64) (Cell, bool) {
	count, n1, ok1 := synopsis.ExpGolombIn(p, kc)
	if count == 0 {
		ks = 0
	}
	z, n2, ok2 := synopsis.ExpGolombIn(p>>n1, ks)
	if !ok1 || !ok2 || n1+n2 > 57 {
		return Cell{}, false
	}
	if count == 0 {
		rd.Advance(n1 + n2)
		return Cell{SumNS: int64(z>>1) ^ -int64(z&1)}, true
	}
	rd.Advance(n1 + n2)
	d, ok := rd.Peek()
	if !ok || 8*width > 56 {
		rd.Advance(-(n1 + n2))
		return Cell{}, false
	}
	rd.Advance(8 * width)
	return Cell{Count: count, SumNS: unresidual(z, count, center), Digest: d & (1<<(8*width) - 1)}, true
}
