// Package rda is the Reconcilable Difference Aggregator (Fu, Barlet-Ros, Li,
// "Every timestamp counts", §V): k banks × m buckets of (ID xor, timestamp
// sum, count). Every packet goes into one bucket of every bank, chosen by an
// independent hash per bank. Subtracting the upstream RDA from the
// downstream one cancels the packets both sides saw and leaves the set
// difference, which package reconcile peels into lost and reordered packets.
//
// Beyond the paper, each bucket may carry a 32-bit check: the xor of a hash
// of every ID in it, as in invertible Bloom lookup tables. The paper's purity
// test (the bucket's ID hashes to the bucket and its count is ±1) lets an
// impure bucket pass with probability about 1/m; the check divides that by
// 2^32 for 4 bytes per bucket.
package rda

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"github.com/owl-latency/owl/internal/synopsis"
)

// Limits of the parameters, also enforced on decoding.
const (
	MaxBanks   = 4
	MaxBuckets = 1 << 22
)

const version = 1

// checkSalt keys the check hash apart from the index hashes.
const checkSalt = 0x636865636b

// Config sets the shape of an RDA. Both ends of a path must use the same
// banks, seed and check; the bucket count may differ per epoch (late
// binding) but must be equal for the two RDAs of one epoch.
type Config struct {
	// Banks is k, the hash functions (default 2, as the paper recommends).
	Banks int `yaml:"banks"`
	// Buckets is m, the buckets per bank. Peeling succeeds with high
	// probability when m ≥ 2·d, d the size of the set difference.
	Buckets int `yaml:"buckets"`
	// Seed keys the index hashes.
	Seed uint64 `yaml:"seed"`
	// Check adds the 32-bit check field to every bucket.
	Check bool `yaml:"check"`
}

// DefaultConfig returns 2 banks × 1024 buckets with the check field.
func DefaultConfig() Config { return Config{Banks: 2, Buckets: 1024, Seed: 0x726461, Check: true} }

// Validate reports parameters out of range.
func (c Config) Validate() error {
	if c.Banks < 1 || c.Banks > MaxBanks {
		return fmt.Errorf("rda banks %d out of range [1, %d]", c.Banks, MaxBanks)
	}
	if c.Buckets < 1 || c.Buckets > MaxBuckets {
		return fmt.Errorf("rda buckets %d out of range [1, %d]", c.Buckets, MaxBuckets)
	}
	return nil
}

// Compatible returns an error wrapping synopsis.ErrMismatch when o differs.
func (c Config) Compatible(o Config) error {
	if c != o {
		return fmt.Errorf("%w: rda banks %d buckets %d seed %#x check %t vs banks %d buckets %d seed %#x check %t",
			synopsis.ErrMismatch, c.Banks, c.Buckets, c.Seed, c.Check, o.Banks, o.Buckets, o.Seed, o.Check)
	}
	return nil
}

// Bucket is one cell of a bank.
type Bucket struct {
	ID    uint64 // xor of the IDs in the bucket
	SumNS int64  // sum of their timestamp offsets
	Count int64  // how many (negative after subtraction)
	Check uint32 // xor of their check hashes (zero without Check)
}

// Empty reports whether the bucket holds nothing.
func (b Bucket) Empty() bool { return b.ID == 0 && b.Count == 0 && b.Check == 0 }

// RDA is one side's aggregator for one path and epoch, or the difference
// of two. Not safe for concurrent use.
type RDA struct {
	cfg     Config
	buckets []Bucket // bank-major: buckets[l*m + i]
}

// New returns an empty RDA.
func New(cfg Config) (*RDA, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &RDA{cfg: cfg, buckets: make([]Bucket, cfg.Banks*cfg.Buckets)}, nil
}

// Config returns the RDA's parameters.
func (r *RDA) Config() Config { return r.cfg }

// Buckets returns bank l's buckets. The slice aliases the RDA.
func (r *RDA) Buckets(l int) []Bucket {
	m := r.cfg.Buckets
	return r.buckets[l*m : (l+1)*m]
}

// Index returns the bucket of id in bank l.
func (r *RDA) Index(l int, id uint64) int {
	return index(r.cfg, l, id)
}

func index(c Config, l int, id uint64) int {
	h := synopsis.Hash(id, c.Seed+uint64(l>>1))
	if l&1 == 1 {
		h >>= 32
	}
	return int((uint64(uint32(h)) * uint64(c.Buckets)) >> 32)
}

// CheckHash is the check value of an ID (zero when the RDA has no check).
func (r *RDA) CheckHash(id uint64) uint32 {
	if !r.cfg.Check {
		return 0
	}
	return uint32(synopsis.Hash(id, r.cfg.Seed^checkSalt))
}

// Insert adds a packet seen offsetNS after the epoch's start.
func (r *RDA) Insert(id uint64, offsetNS int64) { r.add(id, offsetNS, 1) }

// Remove takes a packet out again (repair of a lost or reordered packet).
func (r *RDA) Remove(id uint64, offsetNS int64) { r.add(id, -offsetNS, -1) }

func (r *RDA) add(id uint64, offsetNS, n int64) {
	m := uint64(r.cfg.Buckets)
	chk := r.CheckHash(id)
	for l := 0; l < r.cfg.Banks; l += 2 {
		h := synopsis.Hash(id, r.cfg.Seed+uint64(l>>1))
		b := &r.buckets[l*int(m)+int((uint64(uint32(h))*m)>>32)]
		b.ID ^= id
		b.SumNS += offsetNS
		b.Count += n
		b.Check ^= chk
		if l+1 < r.cfg.Banks {
			b = &r.buckets[(l+1)*int(m)+int(((h>>32)*m)>>32)]
			b.ID ^= id
			b.SumNS += offsetNS
			b.Count += n
			b.Check ^= chk
		}
	}
}

// Pure reports whether bucket i of bank l holds exactly one packet (of
// either sign): its count is ±1, its ID hashes to it, and (with Check) its
// check matches the ID.
func (r *RDA) Pure(l, i int) bool {
	b := r.buckets[l*r.cfg.Buckets+i]
	if b.Count != 1 && b.Count != -1 {
		return false
	}
	if r.cfg.Check && b.Check != r.CheckHash(b.ID) {
		return false
	}
	return r.Index(l, b.ID) == i
}

// Merge adds o (a shard of the same path and epoch) to r.
func (r *RDA) Merge(o *RDA) error {
	if err := r.cfg.Compatible(o.cfg); err != nil {
		return err
	}
	for i, b := range o.buckets {
		a := &r.buckets[i]
		a.ID ^= b.ID
		a.SumNS += b.SumNS
		a.Count += b.Count
		a.Check ^= b.Check
	}
	return nil
}

// Subtract returns r − o: the packets in r and not in o with count +1,
// those in o and not in r with count −1; common packets cancel.
func (r *RDA) Subtract(o *RDA) (*RDA, error) {
	d := &RDA{}
	if err := d.SetDifference(r, o); err != nil {
		return nil, err
	}
	return d, nil
}

// SetDifference makes r the difference a − b, as Subtract returns it, in
// r's own storage when it is large enough: a caller that reconciles
// epoch after epoch need not allocate an RDA for each. The zero RDA is a
// valid r.
func (r *RDA) SetDifference(a, b *RDA) error {
	if err := a.cfg.Compatible(b.cfg); err != nil {
		return err
	}
	n := len(a.buckets)
	r.cfg, r.buckets = a.cfg, slices.Grow(r.buckets[:0], n)[:n]
	for i, x := range a.buckets {
		y := b.buckets[i]
		r.buckets[i] = Bucket{ID: x.ID ^ y.ID, SumNS: x.SumNS - y.SumNS, Count: x.Count - y.Count, Check: x.Check ^ y.Check}
	}
	return nil
}

// Clone returns a deep copy.
func (r *RDA) Clone() *RDA {
	return &RDA{cfg: r.cfg, buckets: append([]Bucket(nil), r.buckets...)}
}

// SetCopy makes r a deep copy of a, in r's own storage when it is large
// enough. The zero RDA is a valid r.
func (r *RDA) SetCopy(a *RDA) {
	r.cfg, r.buckets = a.cfg, append(r.buckets[:0], a.buckets...)
}

// Packets is the number of packets in the first bank (each packet is in
// every bank once).
func (r *RDA) Packets() int64 {
	var n int64
	for _, b := range r.Buckets(0) {
		n += b.Count
	}
	return n
}

// Reset empties the RDA for reuse.
func (r *RDA) Reset() { clear(r.buckets) }

// AppendBinary appends the wire form:
//
//	envelope (kind 'R', version 1) | banks (1 byte) | check (1 byte) |
//	buckets per bank (uvarint) | seed (8 bytes LE) |
//	per bucket, bank-major: ID (8 bytes LE), sum (zig-zag varint),
//	count (zig-zag varint), check (4 bytes LE, only with check)
func (r *RDA) AppendBinary(b []byte) ([]byte, error) {
	b = synopsis.AppendHeader(b, synopsis.KindRDA, version)
	chk := byte(0)
	if r.cfg.Check {
		chk = 1
	}
	b = append(b, byte(r.cfg.Banks), chk)
	b = binary.AppendUvarint(b, uint64(r.cfg.Buckets))
	b = binary.LittleEndian.AppendUint64(b, r.cfg.Seed)
	for _, k := range r.buckets {
		b = binary.LittleEndian.AppendUint64(b, k.ID)
		b = binary.AppendVarint(b, k.SumNS)
		b = binary.AppendVarint(b, k.Count)
		if r.cfg.Check {
			b = binary.LittleEndian.AppendUint32(b, k.Check)
		}
	}
	return b, nil
}

// MarshalBinary returns the wire form, in one allocation of at most its
// largest size.
func (r *RDA) MarshalBinary() ([]byte, error) {
	return r.AppendBinary(make([]byte, 0, 64+len(r.buckets)*(8+2*binary.MaxVarintLen64+4)))
}

// ErrFormat is synopsis.ErrFormat, for callers that import only this package.
var ErrFormat = synopsis.ErrFormat

// DecodeConfig reads the parameters at the head of a wire form without
// decoding its buckets: a receiver checks an RDA's size before it
// allocates it.
func DecodeConfig(b []byte) (Config, error) {
	rd, err := synopsis.NewReader(b, synopsis.KindRDA, version)
	if err != nil {
		return Config{}, err
	}
	return decodeConfig(rd)
}

// Decode parses a wire form, rejecting truncated, oversized or trailing
// input with an error wrapping synopsis.ErrFormat.
func Decode(b []byte) (*RDA, error) {
	r := &RDA{}
	if err := r.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return r, nil
}

// UnmarshalBinary makes r the RDA of a wire form, in r's own storage when
// it is large enough (a collector decodes into RDAs it reuses). It
// rejects what Decode rejects; r is then in no defined state.
func (r *RDA) UnmarshalBinary(b []byte) error {
	rd, err := synopsis.NewReader(b, synopsis.KindRDA, version)
	if err != nil {
		return err
	}
	cfg, err := decodeConfig(rd)
	if err != nil {
		return err
	}
	per := 10 // ID + at least one byte each for sum and count
	if cfg.Check {
		per += 4
	}
	n := cfg.Banks * cfg.Buckets
	if !rd.Need("buckets", per*n) {
		return rd.Err()
	}
	r.cfg, r.buckets = cfg, slices.Grow(r.buckets[:0], n)[:n]
	read, used := readBuckets(rd.Rest(), r.buckets, cfg.Check)
	rd.Skip(used)
	for i := read; i < len(r.buckets); i++ { // from a bucket readBuckets could not read, for the error
		k := &r.buckets[i]
		k.ID = rd.Uint64("bucket id")
		k.SumNS = rd.Varint("bucket sum")
		k.Count = rd.Varint("bucket count")
		k.Check = 0
		if cfg.Check {
			k.Check = rd.Uint32("bucket check")
		}
	}
	return rd.Done()
}

// readBuckets reads buckets from b until they are all read or one cannot
// be, and returns how many it read and the bytes they took: one loop over
// the bytes, where the Reader's field by field checks each field.
func readBuckets(b []byte, buckets []Bucket, check bool) (read, n int) {
	for read < len(buckets) && len(b)-n >= 8 {
		id := binary.LittleEndian.Uint64(b[n:])
		sum, k := binary.Varint(b[n+8:])
		if k <= 0 {
			break
		}
		count, k2 := binary.Varint(b[n+8+k:])
		if k2 <= 0 {
			break
		}
		m := n + 8 + k + k2
		var chk uint32
		if check {
			if len(b)-m < 4 {
				break
			}
			chk = binary.LittleEndian.Uint32(b[m:])
			m += 4
		}
		buckets[read] = Bucket{ID: id, SumNS: sum, Count: count, Check: chk}
		read, n = read+1, m
	}
	return read, n
}

// decodeConfig reads the parameters that follow the envelope.
func decodeConfig(rd *synopsis.Reader) (Config, error) {
	var cfg Config
	cfg.Banks = int(rd.Byte("banks"))
	switch rd.Byte("check") {
	case 0:
	case 1:
		cfg.Check = true
	default:
		rd.Fail("check", "must be 0 or 1")
	}
	cfg.Buckets = int(rd.Uvarint("buckets", MaxBuckets))
	cfg.Seed = rd.Uint64("seed")
	if rd.Err() != nil {
		return Config{}, rd.Err()
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w: %w", synopsis.ErrFormat, err)
	}
	return cfg, nil
}

// HeapBytes is the memory its buckets take.
func (r *RDA) HeapBytes() int { return len(r.buckets) * int(unsafe.Sizeof(Bucket{})) }

// InsertMany adds packets ids[i] seen offs[i] after the epoch's start, as
// Insert each would. It finds every packet's buckets first and updates
// them after: the loads of buckets not in the cache (an RDA of a lossy
// epoch is megabytes) then overlap, where one Insert after another waits
// for each in turn.
func (r *RDA) InsertMany(ids []uint64, offs []int64) {
	const chunk = 32
	var at [chunk][2]int32
	var chk [chunk]uint32
	m := uint64(r.cfg.Buckets)
	for len(ids) > 0 {
		n := min(len(ids), chunk)
		if r.cfg.Banks != 2 {
			for i := range n {
				r.add(ids[i], offs[i], 1)
			}
			ids, offs = ids[n:], offs[n:]
			continue
		}
		for i := range n {
			h := synopsis.Hash(ids[i], r.cfg.Seed)
			at[i] = [2]int32{int32((uint64(uint32(h)) * m) >> 32), int32(m) + int32(((h>>32)*m)>>32)}
			chk[i] = r.CheckHash(ids[i])
		}
		for i := range n {
			for _, j := range at[i] {
				b := &r.buckets[j]
				b.ID ^= ids[i]
				b.SumNS += offs[i]
				b.Count++
				b.Check ^= chk[i]
			}
		}
		ids, offs = ids[n:], offs[n:]
	}
}
