// Package synopsis holds what the synopses of owl share: the envelope of
// their compact wire form and the hash that places a packet ID in one.
// Each synopsis lives in its own sub-package (lda, rda, ...), with Insert,
// Merge or Subtract where its paper has one, its wire form and its estimator.
//
// The wire form of every synopsis starts with the envelope
//
//	"OWL" | kind (1 byte) | version (1 byte)
//
// followed by the synopsis's parameters and body, in varints where values
// are small. Decoders reject truncated, oversized and trailing input.
package synopsis

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"
)

// Kind tags a synopsis in its wire form.
type Kind byte

// Kinds of synopsis.
const (
	KindLDA Kind = 'L'
	KindRDA Kind = 'R'
	KindLDS Kind = 'S'
	// KindSample is a consistent packet sample (trajectory sampling).
	KindSample Kind = 'T'
	// KindList is an epoch's exact list of packets.
	KindList Kind = 'X'
	// KindLDSPair is an epoch's two LDS as the collector keeps them.
	KindLDSPair Kind = 'P'
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindLDA:
		return "LDA"
	case KindRDA:
		return "RDA"
	case KindLDS:
		return "LDS"
	case KindSample:
		return "sample"
	case KindList:
		return "exact list"
	case KindLDSPair:
		return "LDS pair"
	}
	return fmt.Sprintf("kind %#x", byte(k))
}

const magic = "OWL"

// headerLen is the length of the envelope.
const headerLen = len(magic) + 2

// ErrFormat is wrapped by every decoding error.
var ErrFormat = errors.New("malformed synopsis")

// ErrMismatch is wrapped by errors about two synopses whose parameters differ.
var ErrMismatch = errors.New("synopsis parameters differ")

// Hash maps a packet ID to a 64-bit value under a per-synopsis seed. Both
// observation points derive the same bucket from the same ID and seed.
func Hash(id, seed uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], id)
	return xxh3.HashSeed(b[:], seed)
}

// AppendHeader appends the envelope for kind and version.
func AppendHeader(b []byte, kind Kind, version byte) []byte {
	b = append(b, magic...)
	return append(b, byte(kind), version)
}

// Reader decodes a wire form field by field. The first error sticks: later
// reads return zero values and Err reports the first failure with the name
// of the field it happened in.
type Reader struct {
	kind Kind
	b    []byte
	off  int
	err  error
}

// NewReader checks the envelope of b and returns a Reader positioned after it.
func NewReader(b []byte, kind Kind, version byte) (*Reader, error) {
	r, _, err := NewReaderOf(b, kind, version, version)
	return r, err
}

// NewReaderOf is NewReader for a kind read in versions [oldest, newest]:
// it returns the version of b too.
func NewReaderOf(b []byte, kind Kind, oldest, newest byte) (*Reader, byte, error) {
	if len(b) < headerLen {
		return nil, 0, fmt.Errorf("%w: %s: %d bytes is shorter than the header", ErrFormat, kind, len(b))
	}
	if string(b[:len(magic)]) != magic {
		return nil, 0, fmt.Errorf("%w: %s: bad magic %q", ErrFormat, kind, b[:len(magic)])
	}
	if Kind(b[3]) != kind {
		return nil, 0, fmt.Errorf("%w: expected %s, got %s", ErrFormat, kind, Kind(b[3]))
	}
	if b[4] < oldest || b[4] > newest {
		if oldest == newest {
			return nil, 0, fmt.Errorf("%w: %s: unsupported version %d (want %d)", ErrFormat, kind, b[4], newest)
		}
		return nil, 0, fmt.Errorf("%w: %s: unsupported version %d (want %d to %d)", ErrFormat, kind, b[4], oldest, newest)
	}
	return &Reader{kind: kind, b: b, off: headerLen}, b[4], nil
}

func (r *Reader) fail(field, why string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s: %s at byte %d: %s", ErrFormat, r.kind, field, r.off, why)
	}
}

// Byte reads one byte.
func (r *Reader) Byte(field string) byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail(field, "truncated")
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

// Uint64 reads a fixed 8-byte little-endian value.
func (r *Reader) Uint64(field string) uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.off < 8 {
		r.fail(field, "truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

// Uint32 reads a fixed 4-byte little-endian value.
func (r *Reader) Uint32(field string) uint32 {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.off < 4 {
		r.fail(field, "truncated")
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

// Uvarint reads an unsigned varint and checks it against max.
func (r *Reader) Uvarint(field string, max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		if n == 0 {
			r.fail(field, "truncated")
		} else {
			r.fail(field, "varint overflows 64 bits")
		}
		return 0
	}
	r.off += n
	if v > max {
		r.fail(field, fmt.Sprintf("%d exceeds the limit %d", v, max))
		return 0
	}
	return v
}

// Varint reads a zig-zag signed varint.
func (r *Reader) Varint(field string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		if n == 0 {
			r.fail(field, "truncated")
		} else {
			r.fail(field, "varint overflows 64 bits")
		}
		return 0
	}
	r.off += n
	return v
}

// Remaining is the number of unread bytes.
func (r *Reader) Remaining() int { return len(r.b) - r.off }

// Rest returns the unread bytes (nil after an error), for a decoder's
// fast path over many fields; Skip then moves past what it read.
func (r *Reader) Rest() []byte {
	if r.err != nil {
		return nil
	}
	return r.b[r.off:]
}

// Skip moves past n unread bytes (at most Remaining).
func (r *Reader) Skip(n int) {
	if r.err == nil {
		r.off += min(max(n, 0), r.Remaining())
	}
}

// Need fails unless at least n more bytes remain; decoders call it before
// allocating for a count read from the input, so that a short hostile input
// cannot make them allocate much.
func (r *Reader) Need(field string, n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || r.Remaining() < n {
		r.fail(field, fmt.Sprintf("needs at least %d more bytes, %d left", n, r.Remaining()))
		return false
	}
	return true
}

// Fail records a semantic error found by the caller.
func (r *Reader) Fail(field, why string) { r.fail(field, why) }

// Err returns the first error.
func (r *Reader) Err() error { return r.err }

// Done returns the first error, or an error if bytes are left over.
func (r *Reader) Done() error {
	if r.err == nil && r.off != len(r.b) {
		r.fail("end", fmt.Sprintf("%d trailing bytes", len(r.b)-r.off))
	}
	return r.err
}

// HashBytes hashes a byte string under a seed (flow keys).
func HashBytes(b []byte, seed uint64) uint64 { return xxh3.HashSeed(b, seed) }

// LostCopy is the rule by which owl tells which copy of a packet sent k
// times was lost, given the k−1 that arrived (both in time order, in one
// time base): the one copy whose loss leaves every arrival at or after its
// sending (first sent, first arrived). Copies sent further apart than the
// path's delay are told apart so. When none or more than one could have
// been lost, it does not guess: false.
func LostCopy(sent, arrived []int64) (int, bool) {
	if len(arrived) != len(sent)-1 {
		return 0, false
	}
	found := -1
	for i := range sent {
		ok := true
		for j, at := range arrived {
			k := j
			if j >= i {
				k = j + 1 // sent without copy i
			}
			if at < sent[k] {
				ok = false
				break
			}
		}
		if ok {
			if found >= 0 {
				return 0, false // two could have been lost
			}
			found = i
		}
	}
	return found, found >= 0
}
