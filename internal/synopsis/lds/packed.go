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
		for _, c := range row {
			w.ExpGolomb(c.Count, kc)
			if c.Count == 0 {
				w.ExpGolomb(uint64(c.SumNS<<1)^uint64(c.SumNS>>63), 0)
				continue
			}
			w.ExpGolomb(residual(c, center), ks)
			w.Bits(c.Digest, 8*width)
		}
	}
	return w.Done()
}

// readPacked reads cells the packed form of total cells in rows of cols
// from b, into cells unless it is nil; false for a truncated or damaged
// form (trailing bits included).
func readPacked(b []byte, cells []Cell, rows, cols, width int) bool {
	rd := synopsis.BitReader{B: b}
	for r := range rows {
		kc, ok1 := rd.Bits(6)
		ks, ok2 := rd.Bits(6)
		c64, ok3 := rd.Bits(64)
		if !ok1 || !ok2 || !ok3 {
			return false
		}
		center := int64(c64)
		for i := range cols {
			count, ok := rd.ExpGolomb(int(kc))
			if !ok {
				return false
			}
			var c Cell
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
