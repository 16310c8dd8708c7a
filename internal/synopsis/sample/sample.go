// Package sample is consistent packet sampling (trajectory sampling,
// Duffield and Grossglauser): both observation points of a path keep the
// packets whose identity hashes, under a seed of their own, below a
// threshold, so that they keep the same packets. Joining the two sides'
// samples gives the exact one-way delays of the sampled packets that were
// delivered, and from them percentiles with confidence intervals from
// order statistics. At rate 1 the sample is the exact list of the epoch's
// packets.
package sample

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/owl-latency/owl/internal/synopsis"
)

// Config says which packets are kept: those whose identity hashes under
// Seed below Threshold (all of them at math.MaxUint64). Both sides of a
// path must use the same Config for an epoch.
type Config struct {
	Seed      uint64
	Threshold uint64
}

// ForRate is the Config that keeps a share rate (0 < rate ≤ 1) of packets.
func ForRate(seed uint64, rate float64) (Config, error) {
	if !(rate > 0 && rate <= 1) {
		return Config{}, fmt.Errorf("sampling rate %v out of (0, 1]", rate)
	}
	if rate == 1 {
		return Config{Seed: seed, Threshold: math.MaxUint64}, nil
	}
	t := rate * (1 << 64)
	if t < 1 {
		t = 1
	}
	return Config{Seed: seed, Threshold: uint64(t)}, nil
}

// MaxShift bounds a rate's shift: 2^-MaxShift is the lowest rate.
const MaxShift = 63

// ForShift is the Config that keeps a share 2^-shift of packets. Samples
// of one seed at two shifts are nested: the packets kept at the larger
// shift are exactly those of the other sample whose hash lies below the
// lower threshold, so either side can be narrowed to the other's rate.
func ForShift(seed uint64, shift int) (Config, error) {
	if shift < 0 || shift > MaxShift {
		return Config{}, fmt.Errorf("sampling shift %d out of [0, %d]", shift, MaxShift)
	}
	if shift == 0 {
		return Config{Seed: seed, Threshold: math.MaxUint64}, nil
	}
	return Config{Seed: seed, Threshold: 1 << (64 - shift)}, nil
}

// ShiftFor is the least shift k at which peak packets give at most √2 ×
// target sampled ones (2^-k the highest such rate): an epoch as busy as
// peak then gives between target/√2 and target·√2, about target.
func ShiftFor(peak, target uint64) int {
	k := 0
	for k < MaxShift && float64(peak>>k) > math.Sqrt2*float64(target) {
		k++
	}
	return k
}

// Shift is k when the configuration keeps 2^-k of packets, or −1 when its
// threshold is not a power of two.
func (c Config) Shift() int {
	if c.Threshold == math.MaxUint64 {
		return 0
	}
	if c.Threshold == 0 || c.Threshold&(c.Threshold-1) != 0 {
		return -1
	}
	return 64 - bits.TrailingZeros64(c.Threshold)
}

// Rate is the share of packets kept.
func (c Config) Rate() float64 {
	if c.Threshold == math.MaxUint64 {
		return 1
	}
	return float64(c.Threshold) / (1 << 64)
}

// Validate refuses a configuration that keeps nothing.
func (c Config) Validate() error {
	if c.Threshold == 0 {
		return errors.New("sampling threshold 0 keeps no packet")
	}
	return nil
}

// Keeps says whether the packet with identity id is in the sample.
func (c Config) Keeps(id uint64) bool {
	return c.Threshold == math.MaxUint64 || synopsis.Hash(id, c.Seed) < c.Threshold
}

// MaxEntries bounds the entries a sample's wire form may hold (16 MiB
// decoded).
const MaxEntries = 1 << 20

// KeyBits is how many high bits of a packet's sampling hash its key keeps,
// at most (SetKeyBits narrows a sample's keys); MinKeyBits the fewest.
const (
	KeyBits    = 48
	MinKeyBits = 16
)

// keyLow are the bits of a sampling hash a key leaves out.
const keyLow = 1<<(64-KeyBits) - 1

// Key is the key by which samples of this seed know the packet with
// identity id: the high KeyBits bits of its sampling hash (the rest 0).
// Both sides derive it alike, so keys join the same packets as IDs do,
// and it says at once whether a lower rate keeps the packet (KeepsKey),
// where an ID needs hashing again. A kept packet's key has as many
// leading zeros as the rate's shift, and keys sort into short
// differences: at 1,000 packets a sample's keys take about 4.5 bytes
// each where IDs took 8. Two packets of one sample share a key with a
// chance of about n²/2^(49−shift) (n = 1,250 at 1/8: one in 10^8), and
// the join then leaves both out as it leaves out copies it cannot tell
// apart.
func (c Config) Key(id uint64) uint64 { return synopsis.Hash(id, c.Seed) &^ keyLow }

// KeepsKey says whether the packet with key k is in the sample. For
// thresholds that are powers of two down to 2^(64−KeyBits), as rates
// set by shift are, it is Keeps of the packet.
func (c Config) KeepsKey(k uint64) bool {
	return c.Threshold == math.MaxUint64 || k < c.Threshold
}

// Entry is a sampled packet: its key (Config.Key) and its time from the
// epoch's start.
type Entry struct {
	Key      uint64
	OffsetNS int64
	// Flow is the hash of the packet's flow where the sampler said it
	// (InsertFlow), else 0; the wire form does not carry it.
	Flow uint64
}

// Sample is one side's sampled packets of one epoch.
type Sample struct {
	cfg     Config
	entries []Entry
	sorted  bool
	keyBits int // its keys' width: KeyBits unless narrowed (0 stands for KeyBits)
}

// New returns an empty sample.
func New(cfg Config) (*Sample, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sample{cfg: cfg, sorted: true}, nil
}

// Grow makes room for n more entries, as when the caller expects an
// epoch like the one before: the entries then need not be copied as the
// sample grows.
func (s *Sample) Grow(n int) { s.entries = slices.Grow(s.entries, n) }

// Config is the sample's configuration.
func (s *Sample) Config() Config { return s.cfg }

// KeyBits is how many high bits of the sampling hash the sample's keys
// keep.
func (s *Sample) KeyBits() int { return cmp.Or(s.keyBits, KeyBits) }

// SetKeyBits narrows the sample's keys to their high b bits (in
// [MinKeyBits, KeyBits], at most the current width): the wire form then
// takes about KeyBits − b bits less per entry. Two packets whose keys
// agree in those bits cannot be told apart, and a join leaves both out,
// as it leaves out copies: with b − k bits above a rate 2^-k and n
// entries, a chance of about n²/2^(b−k+1) per epoch (1,250 entries with
// 32 bits above the rate: one epoch in 5,000).
func (s *Sample) SetKeyBits(b int) error {
	if b < MinKeyBits || b > s.KeyBits() {
		return fmt.Errorf("sample key width %d out of [%d, %d]", b, MinKeyBits, s.KeyBits())
	}
	if b == s.KeyBits() {
		return nil
	}
	mask := ^uint64(0) << (64 - b)
	for i := range s.entries {
		s.entries[i].Key &= mask
	}
	s.keyBits, s.sorted = b, false
	return nil
}

// Len is the number of packets kept.
func (s *Sample) Len() int { return len(s.entries) }

// Insert offers a packet; it is kept when the configuration keeps it, and
// Insert says whether it was.
func (s *Sample) Insert(id uint64, offsetNS int64) bool { return s.InsertFlow(id, 0, offsetNS) }

// InsertFlow is Insert of a packet of the flow with hash flow, which the
// entry keeps (Entry.Flow) for the sender to say which entries are of
// which flow; the wire form does not carry it.
func (s *Sample) InsertFlow(id, flow uint64, offsetNS int64) bool {
	h := synopsis.Hash(id, s.cfg.Seed)
	if s.cfg.Threshold != math.MaxUint64 && h >= s.cfg.Threshold {
		return false
	}
	s.entries = append(s.entries, Entry{Key: h &^ keyLow, OffsetNS: offsetNS, Flow: flow})
	s.sorted = false
	return true
}

// FlowPositions returns, for each flow hash of flows, the positions in
// Entries of the entries of that flow, as gaps: the first position, then
// each one's distance from the one before (the form a report's top flows
// carry). Flows with no entry get none.
func (s *Sample) FlowPositions(flows []uint64) [][]uint32 {
	out := make([][]uint32, len(flows))
	at := make(map[uint64]int, len(flows))
	for i, f := range flows {
		at[f] = i
	}
	last := make([]int, len(flows))
	for i, e := range s.Entries() {
		k, ok := at[e.Flow]
		if !ok {
			continue
		}
		if len(out[k]) == 0 {
			out[k] = append(out[k], uint32(i))
		} else {
			out[k] = append(out[k], uint32(i-last[k]))
		}
		last[k] = i
	}
	return out
}

// Positions decodes gaps (as FlowPositions gives them) into positions of
// a sample of n entries; it refuses positions out of order or range.
func Positions(gaps []uint32, n int) ([]int, error) {
	return AppendPositions(make([]int, 0, min(len(gaps), n)), gaps, n)
}

// AppendPositions is Positions appending to out: a collector reads the
// positions of each of a report's top flows into one array.
func AppendPositions(out []int, gaps []uint32, n int) ([]int, error) {
	at := -1
	for i, g := range gaps {
		if i > 0 && g == 0 {
			return nil, fmt.Errorf("sample positions: gap %d is 0", i)
		}
		at += int(g)
		if i == 0 {
			at++
		}
		if at >= n || at < 0 {
			return nil, fmt.Errorf("sample positions: position %d past the sample's %d entries", at, n)
		}
		out = append(out, at)
	}
	return out, nil
}

// Halve halves the sampling rate, dropping the entries the lower
// threshold does not keep: a sample grown past its bound stays consistent
// with the other side's, which the collector narrows to the same rate.
// A rate already at 2^-MaxShift stays.
func (s *Sample) Halve() {
	switch {
	case s.cfg.Threshold == math.MaxUint64:
		s.cfg.Threshold = 1 << 63
	case s.cfg.Threshold > 1:
		s.cfg.Threshold /= 2
	default:
		return
	}
	s.entries = slices.DeleteFunc(s.entries, func(e Entry) bool { return !s.cfg.KeepsKey(e.Key) })
}

// Merge adds o's entries (another capture worker's share of the same
// epoch) to s, at the lower of their two rates. The seeds must agree.
func (s *Sample) Merge(o *Sample) error {
	if s.cfg.Seed != o.cfg.Seed {
		return fmt.Errorf("%w: sampling seeds differ (%x and %x)", synopsis.ErrMismatch, s.cfg.Seed, o.cfg.Seed)
	}
	if o.cfg.Threshold < s.cfg.Threshold {
		s.narrow(o.cfg.Threshold)
	}
	if o.KeyBits() < s.KeyBits() {
		_ = s.SetKeyBits(o.KeyBits()) // a valid width, narrower
	}
	mask := ^uint64(0) << (64 - s.KeyBits())
	for _, e := range o.entries {
		e.Key &= mask
		if s.cfg.KeepsKey(e.Key) {
			s.entries = append(s.entries, e)
			s.sorted = false
		}
	}
	return nil
}

// narrow lowers the threshold, dropping the entries it no longer keeps.
func (s *Sample) narrow(threshold uint64) {
	s.cfg.Threshold = threshold
	s.entries = slices.DeleteFunc(s.entries, func(e Entry) bool { return !s.cfg.KeepsKey(e.Key) })
}

// Narrowed returns s at threshold (s itself when it is already there): the
// entries the lower threshold keeps. It refuses a higher threshold (the
// entries it would keep are not known) and another seed.
func (s *Sample) Narrowed(cfg Config) (*Sample, error) {
	if cfg.Seed != s.cfg.Seed || cfg.Threshold > s.cfg.Threshold {
		return nil, fmt.Errorf("%w: cannot narrow a sample of seed %x, threshold %x to seed %x, threshold %x",
			synopsis.ErrMismatch, s.cfg.Seed, s.cfg.Threshold, cfg.Seed, cfg.Threshold)
	}
	if cfg.Threshold == s.cfg.Threshold {
		return s, nil
	}
	n := &Sample{cfg: s.cfg, entries: slices.Clone(s.entries), sorted: s.sorted, keyBits: s.keyBits}
	n.narrow(cfg.Threshold)
	return n, nil
}

// Reset empties the sample for another epoch, keeping its memory.
func (s *Sample) Reset() {
	s.entries = s.entries[:0]
	s.sorted = true
}

// sort orders the entries by key, then time.
func (s *Sample) sort() {
	if !s.sorted {
		sortEntries(s.entries)
		s.sorted = true
	}
}

func sortEntries(es []Entry) {
	synopsis.SortByKey(es, func(e Entry) uint64 { return e.Key }, func(a, b Entry) int {
		return cmp.Compare(a.OffsetNS, b.OffsetNS)
	})
}

// Entries returns the entries by key, then time (shared, not to be changed).
func (s *Sample) Entries() []Entry {
	s.sort()
	return s.entries
}

// Wire versions: 1 carried each packet's ID, 2 its key, 3 its key at a
// width it names.
const (
	versionIDs       = 1
	versionKeys      = 2
	versionKeyWidths = 3
)

// MarshalBinary is the wire form: version 2 for keys of KeyBits (which
// collectors since 2026-11-24 read), version 3 for narrower ones. The
// envelope, seed and threshold, in version 3 the keys' width (1 byte),
// the count, then, when there are entries, the Rice parameter
// k (1 byte), the least offset (varint) and the offsets' width w in bits
// (1 byte), and a bit stream (least significant bit first): per entry by
// key, its key's difference from the one before (the first from 0), in
// units of the bits a key leaves out, as a Rice code of parameter k (the
// quotient in unary, ones ended by a zero, then k bits), and its offset
// above the least in w bits. The keys of n entries below a threshold T
// differ by about T/n, which the Rice code takes in about
// log2(T/n) − (64 − width) + 1.5 bits; the offsets of a 1 s epoch take
// 30. At 1,000 packets an entry is about 8 bytes with 48-bit keys, where
// version 1 took 13.
func (s *Sample) MarshalBinary() ([]byte, error) {
	s.sort()
	width := s.KeyBits()
	version := byte(versionKeys)
	if width != KeyBits {
		version = versionKeyWidths
	}
	b := synopsis.AppendHeader(make([]byte, 0, 32+9*len(s.entries)), synopsis.KindSample, version)
	b = binary.LittleEndian.AppendUint64(b, s.cfg.Seed)
	b = binary.LittleEndian.AppendUint64(b, s.cfg.Threshold)
	if version == versionKeyWidths {
		b = append(b, byte(width))
	}
	b = binary.AppendUvarint(b, uint64(len(s.entries)))
	if len(s.entries) == 0 {
		return b, nil
	}
	least, most := s.entries[0].OffsetNS, s.entries[0].OffsetNS
	for _, e := range s.entries {
		least, most = min(least, e.OffsetNS), max(most, e.OffsetNS)
	}
	span := s.entries[len(s.entries)-1].Key >> (64 - width)
	k := riceParameter(span / uint64(len(s.entries)))
	w := bits.Len64(uint64(most - least))
	b = append(b, byte(k))
	b = binary.AppendVarint(b, least)
	b = append(b, byte(w))
	bw := synopsis.BitWriter{B: b}
	var prev uint64
	for _, e := range s.entries {
		key := e.Key >> (64 - width)
		bw.Rice(key-prev, k)
		bw.Bits(uint64(e.OffsetNS-least), w)
		prev = key
	}
	return bw.Done(), nil
}

// riceParameter is the Rice parameter for differences of about mean:
// its bit length less one, at least 0.
func riceParameter(mean uint64) int { return max(0, bits.Len64(mean)-1) }

// Decode parses a wire form (version 2 or 3, or version 1, whose IDs it
// turns into keys), rejecting truncated, oversized, unsorted or trailing
// input, and keys the threshold does not keep, with an error wrapping
// synopsis.ErrFormat.
func Decode(b []byte) (*Sample, error) {
	s := &Sample{}
	if err := s.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return s, nil
}

// UnmarshalBinary makes s the sample of a wire form, as Decode reads it,
// its entries in s's own storage when it is large enough. On error s is
// left empty.
func (s *Sample) UnmarshalBinary(b []byte) error {
	d, err := decode(b, s.entries[:0])
	if err != nil {
		*s = Sample{entries: s.entries[:0]}
		return err
	}
	*s = *d
	return nil
}

// decode is Decode, its entries appended to into.
func decode(b []byte, into []Entry) (*Sample, error) {
	r, v, err := synopsis.NewReaderOf(b, synopsis.KindSample, versionIDs, versionKeyWidths)
	if err != nil {
		return nil, err
	}
	if v == versionIDs {
		return decodeIDs(r)
	}
	cfg := Config{Seed: r.Uint64("seed"), Threshold: r.Uint64("threshold")}
	width := KeyBits
	if v == versionKeyWidths {
		width = int(r.Byte("key width"))
		if r.Err() == nil && (width < MinKeyBits || width >= KeyBits) {
			return nil, fmt.Errorf("%w: sample key width %d out of [%d, %d)", synopsis.ErrFormat, width, MinKeyBits, KeyBits)
		}
	}
	// Every entry takes at least one bit: check before allocating.
	n := r.Uvarint("count", 8*uint64(r.Remaining()))
	if r.Err() != nil {
		return nil, r.Err()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", synopsis.ErrFormat, err)
	}
	s := &Sample{cfg: cfg, sorted: true, keyBits: width, entries: into}
	if n == 0 {
		return s, r.Done()
	}
	k, least, w := int(r.Byte("rice parameter")), r.Varint("least offset"), int(r.Byte("offset width"))
	if r.Err() != nil {
		return nil, r.Err()
	}
	if k >= width || w > 63 {
		return nil, fmt.Errorf("%w: sample rice parameter %d or offset width %d out of range", synopsis.ErrFormat, k, w)
	}
	rest := r.Rest()
	if n > MaxEntries || n > uint64(8*len(rest))/uint64(1+k+w) {
		return nil, fmt.Errorf("%w: sample of %d entries in %d bytes", synopsis.ErrFormat, n, len(rest))
	}
	if uint64(cap(into)) < n {
		s.entries = make([]Entry, 0, n)
	}
	br := synopsis.BitReader{B: rest}
	var key uint64
	for i := uint64(0); i < n; i++ {
		d, off, ok := readEntry(&br, k, w, 1<<width-1-key)
		if !ok {
			return nil, fmt.Errorf("%w: sample entry %d of %d truncated or its key beyond %d bits", synopsis.ErrFormat, i, n, width)
		}
		key += d
		e := Entry{Key: key << (64 - width), OffsetNS: least + int64(off)}
		if e.OffsetNS < least {
			return nil, fmt.Errorf("%w: sample entry %d: offset overflows", synopsis.ErrFormat, i)
		}
		if i > 0 && d == 0 && s.entries[i-1].OffsetNS > e.OffsetNS {
			return nil, fmt.Errorf("%w: sample entry %d: copies of a key out of time order", synopsis.ErrFormat, i)
		}
		if !cfg.KeepsKey(e.Key) {
			return nil, fmt.Errorf("%w: sample entry %d: a key the sampling does not keep", synopsis.ErrFormat, i)
		}
		s.entries = append(s.entries, e)
	}
	if !br.Done() {
		return nil, fmt.Errorf("%w: sample: trailing bits", synopsis.ErrFormat)
	}
	return s, nil
}

// readEntry reads an entry's key difference (Rice code of parameter k, at
// most most) and offset (w bits): from one Peek where both are within it
// (most entries), else field by field.
func readEntry(br *synopsis.BitReader, k, w int, most uint64) (d, off uint64, ok bool) {
	if p, ok := br.Peek(); ok {
		if d, n, ok := synopsis.RiceIn(p, k); ok && n+w <= 57 {
			br.Advance(n + w)
			return d, p >> n & (1<<w - 1), d <= most
		}
	}
	d, ok = br.Rice(k, most)
	off, ok2 := br.Bits(w)
	return d, off, ok && ok2
}

// decodeIDs parses wire version 1, after its envelope: the first ID whole and the others as
// differences (uvarint), each with its offset (varint), by ID. It turns
// the IDs into keys.
func decodeIDs(r *synopsis.Reader) (*Sample, error) {
	cfg := Config{Seed: r.Uint64("seed"), Threshold: r.Uint64("threshold")}
	// Every entry takes at least two bytes: check before allocating.
	n := r.Uvarint("count", uint64(r.Remaining()/2))
	if r.Err() != nil {
		return nil, r.Err()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", synopsis.ErrFormat, err)
	}
	if n > 0 && !r.Need("entries", 9+int(n-1)*2) {
		return nil, r.Err()
	}
	s := &Sample{cfg: cfg, entries: make([]Entry, 0, n)}
	var id, prevID uint64
	var prevOff int64
	for i := uint64(0); i < n; i++ {
		if i == 0 {
			id = r.Uint64("first id")
		} else {
			d := r.Uvarint("id difference", math.MaxUint64)
			if id+d < id {
				r.Fail("id difference", "overflows")
			}
			id += d
		}
		off := r.Varint("offset")
		if r.Err() != nil {
			return nil, r.Err()
		}
		if i > 0 && id == prevID && prevOff > off {
			r.Fail("offset", "copies of an id out of time order")
			return nil, r.Err()
		}
		if !cfg.Keeps(id) {
			r.Fail("id", "not one the sampling keeps")
			return nil, r.Err()
		}
		s.entries = append(s.entries, Entry{Key: cfg.Key(id), OffsetNS: off})
		prevID, prevOff = id, off
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	s.sort()
	return s, nil
}

// HeapBytes is the memory its entries take.
func (s *Sample) HeapBytes() int { return cap(s.entries) * int(unsafe.Sizeof(Entry{})) }
