package sample

// bitWriter appends bits to b, least significant bit first.
type bitWriter struct {
	b    []byte
	acc  uint64 // bits not yet appended, the first at bit 0
	nacc int
}

// bits appends the low n (≤ 64) bits of v.
func (w *bitWriter) bits(v uint64, n int) {
	for n > 0 {
		take := min(n, 64-w.nacc, 32)
		w.acc |= (v & (1<<take - 1)) << w.nacc
		w.nacc += take
		v >>= take
		n -= take
		for w.nacc >= 8 {
			w.b = append(w.b, byte(w.acc))
			w.acc >>= 8
			w.nacc -= 8
		}
	}
}

// rice appends v as a Rice code of parameter k: v>>k ones, a zero, then
// the low k bits of v.
func (w *bitWriter) rice(v uint64, k int) {
	for q := v >> k; q > 0; {
		n := min(q, 32)
		w.bits(1<<n-1, int(n))
		q -= n
	}
	w.bits(0, 1)
	w.bits(v, k)
}

// done returns the bytes, the last padded with zero bits.
func (w *bitWriter) done() []byte {
	if w.nacc > 0 {
		w.b = append(w.b, byte(w.acc))
		w.acc, w.nacc = 0, 0
	}
	return w.b
}

// bitReader reads what bitWriter wrote.
type bitReader struct {
	b   []byte
	pos int // bits read
}

// bit reads one bit; false past the end.
func (r *bitReader) bit() (uint64, bool) {
	if r.pos >= 8*len(r.b) {
		return 0, false
	}
	v := uint64(r.b[r.pos>>3]>>(r.pos&7)) & 1
	r.pos++
	return v, true
}

// bits reads n (≤ 64) bits; false past the end.
func (r *bitReader) bits(n int) (uint64, bool) {
	if n > 8*len(r.b)-r.pos {
		return 0, false
	}
	var v uint64
	for i := 0; i < n; {
		byteBits := min(8-r.pos&7, n-i)
		chunk := uint64(r.b[r.pos>>3]>>(r.pos&7)) & (1<<byteBits - 1)
		v |= chunk << i
		i += byteBits
		r.pos += byteBits
	}
	return v, true
}

// rice reads a Rice code of parameter k whose value is at most most;
// false past the end or above most.
func (r *bitReader) rice(k int, most uint64) (uint64, bool) {
	var q uint64
	for {
		b, ok := r.bit()
		if !ok {
			return 0, false
		}
		if b == 0 {
			break
		}
		if q++; q > most>>k {
			return 0, false
		}
	}
	low, ok := r.bits(k)
	v := q<<k | low
	return v, ok && v <= most
}

// done says whether what is left is under a byte of zero padding.
func (r *bitReader) done() bool {
	if 8*len(r.b)-r.pos >= 8 {
		return false
	}
	for r.pos < 8*len(r.b) {
		if b, _ := r.bit(); b != 0 {
			return false
		}
	}
	return true
}
