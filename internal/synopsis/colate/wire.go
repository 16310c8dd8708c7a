package colate

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"
)

// Wire form, little endian:
//
//	version    1 byte (2)
//	counters   uvarint n
//	subvector  uvarint m
//	bits       uvarint b
//	seed       8 bytes
//	unit       uvarint (ns)
//	start      8 bytes (ns, signed)
//	first,last 8 bytes each
//	flags      1 byte: 1 a counter overflowed, 2 the flow table was full,
//	           4 the counters are sparse
//	width      1 byte w: the bits of the largest counter (0 when all are 0)
//	sum        uvarint: t_X, the sum of the counters
//	packets    uvarint: the sum of the flow counts
//	counters   dense: n·w bits, packed from the low bit of each byte;
//	           sparse: n bits marking the non-zero counters (⌈n/8⌉ bytes,
//	           counter i at bit i%8 of byte i/8), then the z marked
//	           counters' values in order, z·w bits packed as above
//	flows      uvarint k, then k × (hash 8 bytes, count 4 bytes), by hash
//
// The counters travel at the width the largest needs, not at b: a quiet
// vector costs less to store than a busy one. A vector with many more
// counters than packets (what a tight bound on the mean asks for) is
// mostly zeros, and the sparse form stores each zero as one bit: it is
// used whenever it is the smaller. Fixed-size flow entries in hash order
// let a decoded vector find a flow's count by binary search and a counter
// by its bit offset (in the sparse form, by the rank of its mark, from a
// table of one count per 64 counters built when decoding), without
// unpacking the rest (Unmarshal is lazy; a query reads m counters and one
// count of each vector).
const wireVersion = 2

// flowEntry is the size of a flow count on the wire.
const flowEntry = 12

// MarshalBinary returns the vector's wire form.
func (v *Vector) MarshalBinary() ([]byte, error) {
	v.materialize()
	var top uint64
	nonzero := 0
	for _, c := range v.counters {
		top |= c
		if c != 0 {
			nonzero++
		}
	}
	w := bits.Len64(top)
	n := len(v.counters)
	sparse := (n+7)/8+(nonzero*w+7)/8 < (n*w+7)/8
	out := make([]byte, 0, 80+(n*w+7)/8+flowEntry*v.flows.len())
	out = append(out, wireVersion)
	out = binary.AppendUvarint(out, uint64(v.cfg.Counters))
	out = binary.AppendUvarint(out, uint64(v.cfg.Subvector))
	out = binary.AppendUvarint(out, uint64(v.cfg.Bits))
	out = binary.LittleEndian.AppendUint64(out, v.cfg.Seed)
	out = binary.AppendUvarint(out, uint64(v.cfg.Unit))
	out = binary.LittleEndian.AppendUint64(out, uint64(v.startNS))
	out = binary.LittleEndian.AppendUint64(out, uint64(v.firstNS))
	out = binary.LittleEndian.AppendUint64(out, uint64(v.lastNS))
	var of byte
	if v.overflow {
		of |= 1
	}
	if v.flowsFull {
		of |= 2
	}
	if sparse {
		of |= 4
	}
	out = append(out, of, byte(w))
	out = binary.AppendUvarint(out, v.sum)
	out = binary.AppendUvarint(out, v.packets)
	if sparse {
		marks := make([]byte, (n+7)/8)
		vals := make([]uint64, 0, nonzero)
		for i, c := range v.counters {
			if c != 0 {
				marks[i/8] |= 1 << (i % 8)
				vals = append(vals, c)
			}
		}
		out = append(out, marks...)
		out = packBits(out, vals, w)
	} else {
		out = packBits(out, v.counters, w)
	}
	type fc struct {
		k uint64
		n uint32
	}
	flows := make([]fc, 0, v.flows.len())
	v.flows.each(func(k uint64, n uint32) { flows = append(flows, fc{k, n}) })
	slices.SortFunc(flows, func(a, b fc) int { return cmp.Compare(a.k, b.k) })
	out = binary.AppendUvarint(out, uint64(len(flows)))
	for _, f := range flows {
		out = binary.LittleEndian.AppendUint64(out, f.k)
		out = binary.LittleEndian.AppendUint32(out, f.n)
	}
	return out, nil
}

// packBits appends each value's low w bits.
func packBits(out []byte, vals []uint64, w int) []byte {
	if w == 0 {
		return out
	}
	var acc uint64 // pending bits, low first
	var n int      // how many
	for _, x := range vals {
		// Write w bits in at most two steps so that acc never holds more
		// than 64.
		lo := min(w, 64-n)
		acc |= (x & mask(lo)) << n
		n += lo
		for n >= 8 {
			out = append(out, byte(acc))
			acc >>= 8
			n -= 8
		}
		if rest := w - lo; rest > 0 {
			acc |= (x >> lo & mask(rest)) << n
			n += rest
			for n >= 8 {
				out = append(out, byte(acc))
				acc >>= 8
				n -= 8
			}
		}
	}
	if n > 0 {
		out = append(out, byte(acc))
	}
	return out
}

func mask(w int) uint64 {
	if w >= 64 {
		return ^uint64(0)
	}
	return 1<<w - 1
}

// ErrWire wraps every decoding error.
var ErrWire = errors.New("colate: bad wire form")

// Unmarshal decodes a vector that must have been recorded with want's
// counters, subvector, seed and unit (the deployment's): checking the shape
// before anything is allocated bounds the memory a hostile input can take.
// The vector keeps data (which must not change while it is in use) and
// reads counters and flow counts from it as asked; Check verifies what the
// header claims against them.
func Unmarshal(data []byte, want Config) (*Vector, error) {
	if err := want.Validate(); err != nil {
		return nil, err
	}
	d := decoder{b: data}
	if d.byte() != wireVersion {
		return nil, fmt.Errorf("%w: version", ErrWire)
	}
	n, m, b := d.uvarint(), d.uvarint(), d.uvarint()
	seed := d.u64()
	unit := d.uvarint()
	if d.err == nil && (n != uint64(want.Counters) || m != uint64(want.Subvector) || seed != want.Seed || unit != uint64(want.Unit)) {
		return nil, fmt.Errorf("%w: vector of n %d, m %d, seed %x, unit %dns; the deployment's is n %d, m %d, seed %x, unit %v",
			ErrMismatch, n, m, seed, unit, want.Counters, want.Subvector, want.Seed, want.Unit)
	}
	cfg := want
	if b >= 8 && b <= 64 {
		cfg.Bits = int(b)
	}
	v := &Vector{cfg: cfg, top: cfg.maxCounter()}
	v.startNS, v.firstNS, v.lastNS = int64(d.u64()), int64(d.u64()), int64(d.u64())
	flags := d.byte()
	v.overflow, v.flowsFull = flags&1 != 0, flags&2 != 0
	if flags > 7 {
		return nil, fmt.Errorf("%w: flags %#x", ErrWire, flags)
	}
	w := int(d.byte())
	v.sum, v.packets = d.uvarint(), d.uvarint()
	if d.err != nil {
		return nil, d.err
	}
	if w > 64 {
		return nil, fmt.Errorf("%w: counter width %d", ErrWire, w)
	}
	values := want.Counters
	if flags&4 != 0 {
		marks := (want.Counters + 7) / 8
		if len(d.b) < marks {
			return nil, fmt.Errorf("%w: %d bytes of counter marks, want %d", ErrWire, len(d.b), marks)
		}
		v.present, d.b = d.b[:marks], d.b[marks:]
		if r := want.Counters % 8; r != 0 && v.present[marks-1]>>r != 0 {
			return nil, fmt.Errorf("%w: marks past the last counter", ErrWire)
		}
		v.rank = make([]uint32, (want.Counters+63)/64)
		values = 0
		for k := range v.rank {
			v.rank[k] = uint32(values)
			values += bits.OnesCount64(markWord(v.present, k))
		}
		if w == 0 && values > 0 {
			return nil, fmt.Errorf("%w: %d counters marked non-zero at width 0", ErrWire, values)
		}
	}
	need := (values*w + 7) / 8
	if len(d.b) < need {
		return nil, fmt.Errorf("%w: %d bytes of counters, want %d", ErrWire, len(d.b), need)
	}
	v.packed, v.width = d.b[:need:need], w
	if v.packed == nil {
		v.packed = []byte{} // decoded: counters are read from here
	}
	d.b = d.b[need:]
	k := d.uvarint()
	if d.err != nil {
		return nil, d.err
	}
	if k > uint64(len(d.b))/flowEntry || uint64(len(d.b)) != k*flowEntry {
		return nil, fmt.Errorf("%w: %d flows in %d bytes", ErrWire, k, len(d.b))
	}
	v.rawFlows = d.b
	return v, nil
}

// markWord is the k-th 64 marks of a sparse vector's counters.
func markWord(marks []byte, k int) uint64 {
	if 8*k+8 <= len(marks) {
		return binary.LittleEndian.Uint64(marks[8*k:])
	}
	var b [8]byte
	copy(b[:], marks[min(8*k, len(marks)):])
	return binary.LittleEndian.Uint64(b[:])
}

// Check verifies what a decoded vector's header claims: the counters add
// up to its sum, the flow counts (positive, in hash order) to its packets,
// and a sparse form marks only non-zero counters.
// A vector from outside should pass it before it is kept; a query trusts
// a kept vector's header and reads only what it needs.
func (v *Vector) Check() error {
	var prev, packets uint64
	for i := range len(v.rawFlows) / flowEntry {
		e := v.rawFlows[i*flowEntry:]
		h, c := binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint32(e[8:])
		if c == 0 || i > 0 && h <= prev {
			return fmt.Errorf("%w: flow entry %d (count %d, hashes out of order)", ErrWire, i, c)
		}
		prev = h
		packets += uint64(c)
	}
	if v.rawFlows != nil && (packets != v.packets && !v.flowsFull || packets > v.packets) {
		return fmt.Errorf("%w: flow counts add up to %d, the header says %d", ErrWire, packets, v.packets)
	}
	v.materialize()
	if v.markedZero {
		return fmt.Errorf("%w: the sparse form marks a zero counter as non-zero", ErrWire)
	}
	var sum uint64
	for _, c := range v.counters {
		sum += c
	}
	if sum != v.sum {
		return fmt.Errorf("%w: counters add up to %d, the header says %d", ErrWire, sum, v.sum)
	}
	return nil
}

// marked is the number of non-zero counters a sparse form marks.
func (v *Vector) marked() int {
	k := len(v.rank) - 1
	return int(v.rank[k]) + bits.OnesCount64(markWord(v.present, k))
}

// counter is counter i, from the counters or, in a decoded vector, from
// the packed bits.
func (v *Vector) counter(i int) uint64 {
	if v.packed == nil {
		return v.counters[i]
	}
	if v.present != nil {
		word := markWord(v.present, i/64)
		if word>>(i%64)&1 == 0 {
			return 0
		}
		i = int(v.rank[i/64]) + bits.OnesCount64(word&(1<<(i%64)-1))
	}
	return packedAt(v.packed, i, v.width)
}

// packedAt is the i-th w-bit value of packed.
func packedAt(packed []byte, i, w int) uint64 {
	if w == 0 {
		return 0
	}
	bit := i * w
	at, shift := bit/8, uint(bit%8)
	span := (int(shift) + w + 7) / 8 // bytes the counter touches, ≤ 9
	var x uint64
	for j := 0; j < min(span, 8); j++ {
		x |= uint64(packed[at+j]) << (8 * j)
	}
	x >>= shift
	if span == 9 {
		x |= uint64(packed[at+8]) << (64 - shift)
	}
	return x & mask(w)
}

// flowCount is a decoded vector's count of a flow, by binary search.
func (v *Vector) flowCount(k uint64) uint32 {
	n := len(v.rawFlows) / flowEntry
	i := sort.Search(n, func(i int) bool { return binary.LittleEndian.Uint64(v.rawFlows[i*flowEntry:]) >= k })
	if i < n && binary.LittleEndian.Uint64(v.rawFlows[i*flowEntry:]) == k {
		return binary.LittleEndian.Uint32(v.rawFlows[i*flowEntry+8:])
	}
	return 0
}

// eachFlow calls fn for every flow the vector counted and its packets.
func (v *Vector) eachFlow(fn func(k uint64, n uint32)) {
	if v.rawFlows == nil {
		v.flows.each(fn)
		return
	}
	for i := range len(v.rawFlows) / flowEntry {
		e := v.rawFlows[i*flowEntry:]
		fn(binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint32(e[8:]))
	}
}

// materialize unpacks a decoded vector's counters and flow counts, so
// that it can be changed or scanned whole.
func (v *Vector) materialize() {
	if v.packed != nil && v.present != nil {
		vals := unpackBits(v.packed, v.marked(), v.width)
		v.counters = make([]uint64, v.cfg.Counters)
		r := 0
		for i := range v.counters {
			if v.present[i/8]>>(i%8)&1 != 0 {
				v.counters[i] = vals[r]
				v.markedZero = v.markedZero || vals[r] == 0
				r++
			}
		}
		v.packed, v.present, v.rank = nil, nil, nil
	} else if v.packed != nil {
		v.counters = unpackBits(v.packed, v.cfg.Counters, v.width)
		v.packed = nil
	}
	if v.rawFlows != nil {
		n := len(v.rawFlows) / flowEntry
		v.flows.reserve(n)
		for i := range n {
			e := v.rawFlows[i*flowEntry:]
			v.flows.add(binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint32(e[8:]))
		}
		v.rawFlows = nil
	}
}

// ErrMismatch says two vectors, or a vector and a configuration, differ
// in shape.
var ErrMismatch = errors.New("colate: vectors differ")

func unpackBits(b []byte, n, w int) []uint64 {
	out := make([]uint64, n)
	if w == 0 {
		return out
	}
	var acc uint64 // pending bits, low first
	have, i := 0, 0
	m := mask(w)
	for j := range out {
		if have >= w {
			out[j] = acc & m
			acc >>= w
			have -= w
			continue
		}
		// Take whole bytes until w bits are there (at most 8 + have ≤ 64
		// bits pending for w ≤ 56; wider counters take two steps).
		x, got := acc, have
		for got < w {
			if got > 56 {
				// acc cannot take another byte: finish with the byte's
				// low bits.
				need := w - got
				x |= (uint64(b[i]) & mask(need)) << got
				acc, have = uint64(b[i])>>need, 8-need
				i++
				got = w
				break
			}
			x |= uint64(b[i]) << got
			i++
			got += 8
			acc, have = 0, 0
		}
		if got > w {
			acc, have = x>>w, got-w
		}
		out[j] = x & m
	}
	return out
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated", ErrWire)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail()
		return 0
	}
	x := d.b[0]
	d.b = d.b[1:]
	return x
}

func (d *decoder) u64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail()
		return 0
	}
	x := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return x
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return x
}
