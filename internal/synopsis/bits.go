package synopsis

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// BitWriter appends bits to B, least significant bit first.
type BitWriter struct {
	B    []byte
	acc  uint64 // bits not yet appended, the first at bit 0
	nacc int    // under 32 between calls
}

// Bits appends the low n (≤ 64) bits of v.
func (w *BitWriter) Bits(v uint64, n int) {
	for n > 0 {
		take := min(n, 32)
		w.acc |= (v & (1<<take - 1)) << w.nacc
		w.nacc += take
		v >>= take
		n -= take
		if w.nacc >= 32 {
			w.B = binary.LittleEndian.AppendUint32(w.B, uint32(w.acc))
			w.acc >>= 32
			w.nacc -= 32
		}
	}
}

// Rice appends v as a Rice code of parameter k: v>>k ones, a zero, then
// the low k bits of v.
func (w *BitWriter) Rice(v uint64, k int) {
	for q := v >> k; q > 0; {
		n := min(q, 32)
		w.Bits(1<<n-1, int(n))
		q -= n
	}
	w.Bits(0, 1)
	w.Bits(v, k)
}

// ExpGolomb appends v as an Exp-Golomb code of order k (k < 64): with q =
// v>>k, the Elias gamma code of q+1 (n ones, a zero, then the low n bits
// of q+1, where 2^n ≤ q+1 < 2^(n+1)), then the low k bits of v. Values
// near 2^k take about k+2 bits, and one far above costs twice its length,
// where a Rice code's unary part would grow with the value itself.
func (w *BitWriter) ExpGolomb(v uint64, k int) {
	q := v >> k
	n, low := 64, uint64(0) // q+1 = 2^64
	if q != math.MaxUint64 {
		n = bits.Len64(q+1) - 1
		low = q + 1 - 1<<n
	}
	if total := 2*n + 1 + k; total <= 64 { // in one go
		w.Bits(1<<n-1|low<<(n+1)|(v&(1<<k-1))<<(2*n+1), total)
		return
	}
	for left := n; left > 0; {
		m := min(left, 32)
		w.Bits(1<<m-1, m)
		left -= m
	}
	w.Bits(0, 1)
	w.Bits(low, n)
	w.Bits(v, k)
}

// ExpGolombBits is about what ExpGolomb(v, k) takes for a value of L
// significant bits, for choosing k.
func ExpGolombBits(L, k int) int { return 2*max(L-k-1, 0) + 1 + k }

// BestExpGolomb returns the order k in [0, 63] that codes values whose
// significant bits are counted in hist (hist[L] values of L bits) in the
// fewest bits, by ExpGolombBits.
func BestExpGolomb(hist *[65]int) int {
	best, bestBits := 0, math.MaxInt
	for k := range 64 {
		total := 0
		for L, n := range hist {
			if n > 0 {
				total += n * ExpGolombBits(L, k)
			}
		}
		if total < bestBits {
			best, bestBits = k, total
		}
	}
	return best
}

// Done returns the bytes, the last padded with zero bits.
func (w *BitWriter) Done() []byte {
	for w.nacc > 0 {
		w.B = append(w.B, byte(w.acc))
		w.acc >>= 8
		w.nacc = max(w.nacc-8, 0)
	}
	w.acc = 0
	return w.B
}

// BitReader reads what BitWriter wrote.
type BitReader struct {
	B   []byte
	pos int // bits read
}

// left is the number of bits not read.
func (r *BitReader) left() int { return 8*len(r.B) - r.pos }

// peek returns the bits from pos on, the next at bit 0: at least 57 of
// them, or all that are left, then zeros.
func (r *BitReader) peek() uint64 {
	i := r.pos >> 3
	var v uint64
	if i+8 <= len(r.B) {
		v = binary.LittleEndian.Uint64(r.B[i:])
	} else {
		for j := len(r.B) - 1; j >= i; j-- {
			v = v<<8 | uint64(r.B[j])
		}
	}
	return v >> (r.pos & 7)
}

// Bit reads one bit; false past the end.
func (r *BitReader) Bit() (uint64, bool) { return r.Bits(1) }

// Bits reads n (≤ 64) bits; false past the end.
func (r *BitReader) Bits(n int) (uint64, bool) {
	if n > r.left() {
		return 0, false
	}
	if n > 56 {
		lo, _ := r.Bits(32)
		hi, _ := r.Bits(n - 32)
		return hi<<32 | lo, true
	}
	v := r.peek() & (1<<n - 1)
	r.pos += n
	return v, true
}

// ones reads ones up to the first zero, which it reads too, and returns
// how many; false past the end or past most ones.
func (r *BitReader) ones(most int) (int, bool) {
	n := 0
	for {
		avail := min(56, r.left())
		if avail == 0 {
			return 0, false
		}
		run := bits.TrailingZeros64(^r.peek())
		if run < avail {
			n += run
			r.pos += run + 1
			return n, n <= most
		}
		n += avail
		r.pos += avail
		if n > most {
			return 0, false
		}
	}
}

// Rice reads a Rice code of parameter k whose value is at most most;
// false past the end or above most.
func (r *BitReader) Rice(k int, most uint64) (uint64, bool) {
	q, ok := r.ones(int(min(most>>k, math.MaxInt32)))
	if !ok {
		return 0, false
	}
	low, ok := r.Bits(k)
	v := uint64(q)<<k | low
	return v, ok && v <= most
}

// ExpGolomb reads what BitWriter.ExpGolomb(v, k) wrote; false past the
// end or for a code whose value exceeds 64 bits.
func (r *BitReader) ExpGolomb(k int) (uint64, bool) {
	if r.left() >= 64 { // most codes: within the next 57 bits, read at once
		p := r.peek()
		run := bits.TrailingZeros64(^p)
		if total := 2*run + 1 + k; total <= 57 {
			v := p >> (run + 1)
			r.pos += total
			return (1<<run+v&(1<<run-1)-1)<<k | v>>run&(1<<k-1), true
		}
	}
	n, ok := r.ones(64 - k)
	if !ok {
		return 0, false
	}
	low, ok := r.Bits(n)
	if !ok {
		return 0, false
	}
	var q uint64
	if n == 64 { // q+1 = 2^64 + low
		if low != 0 {
			return 0, false
		}
		q = math.MaxUint64
	} else {
		q = 1<<n + low - 1
	}
	if q > math.MaxUint64>>k {
		return 0, false
	}
	lowK, ok := r.Bits(k)
	return q<<k | lowK, ok
}

// Done says whether what is left is under a byte of zero padding.
func (r *BitReader) Done() bool {
	if 8*len(r.B)-r.pos >= 8 {
		return false
	}
	for r.pos < 8*len(r.B) {
		if b, _ := r.Bit(); b != 0 {
			return false
		}
	}
	return true
}

// Peek returns the next 57 bits or more (the next at bit 0) when 8 bytes
// are left from the position; false otherwise. With Advance, a decoder's
// loop reads most codes inline and calls the methods for the rest.
func (r *BitReader) Peek() (uint64, bool) {
	i := r.pos >> 3
	if i+8 > len(r.B) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(r.B[i:]) >> (r.pos & 7), true
}

// Advance moves past n bits Peek returned (back, for n < 0, to bits
// read before).
func (r *BitReader) Advance(n int) { r.pos += n }

// RiceIn decodes the Rice code of parameter k (BitReader.Rice) at the
// start of p (from Peek) and returns its value and length; false when the
// code is not within the 57 bits Peek guarantees.
func RiceIn(p uint64, k int) (v uint64, n int, ok bool) {
	q := bits.TrailingZeros64(^p)
	n = q + 1 + k
	if n > 57 {
		return 0, 0, false
	}
	return uint64(q)<<k | p>>(q+1)&(1<<k-1), n, true
}

// ExpGolombIn decodes the Exp-Golomb code of parameter k at the start of
// p (from Peek) and returns its value and length; false when the code is
// not within the 57 bits Peek guarantees (call ExpGolomb then).
func ExpGolombIn(p uint64, k int) (v uint64, n int, ok bool) {
	run := bits.TrailingZeros64(^p)
	n = 2*run + 1 + k
	if n > 57 {
		return 0, 0, false
	}
	v = p >> (run + 1)
	return (1<<run+v&(1<<run-1)-1)<<k | v>>run&(1<<k-1), n, true
}
