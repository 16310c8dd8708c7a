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

// Entry is a sampled packet: its identity and its time from the epoch's
// start.
type Entry struct {
	ID       uint64
	OffsetNS int64
}

// Sample is one side's sampled packets of one epoch.
type Sample struct {
	cfg     Config
	entries []Entry
	sorted  bool
}

// New returns an empty sample.
func New(cfg Config) (*Sample, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sample{cfg: cfg, sorted: true}, nil
}

// Config is the sample's configuration.
func (s *Sample) Config() Config { return s.cfg }

// Len is the number of packets kept.
func (s *Sample) Len() int { return len(s.entries) }

// Insert offers a packet; it is kept when the configuration keeps it, and
// Insert says whether it was.
func (s *Sample) Insert(id uint64, offsetNS int64) bool {
	if !s.cfg.Keeps(id) {
		return false
	}
	s.entries = append(s.entries, Entry{id, offsetNS})
	s.sorted = false
	return true
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
	s.entries = slices.DeleteFunc(s.entries, func(e Entry) bool { return !s.cfg.Keeps(e.ID) })
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
	for _, e := range o.entries {
		if s.cfg.Keeps(e.ID) {
			s.entries = append(s.entries, e)
			s.sorted = false
		}
	}
	return nil
}

// narrow lowers the threshold, dropping the entries it no longer keeps.
func (s *Sample) narrow(threshold uint64) {
	s.cfg.Threshold = threshold
	s.entries = slices.DeleteFunc(s.entries, func(e Entry) bool { return !s.cfg.Keeps(e.ID) })
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
	n := &Sample{cfg: s.cfg, entries: slices.Clone(s.entries), sorted: s.sorted}
	n.narrow(cfg.Threshold)
	return n, nil
}

// Reset empties the sample for another epoch, keeping its memory.
func (s *Sample) Reset() {
	s.entries = s.entries[:0]
	s.sorted = true
}

// sort orders the entries by ID, then time.
func (s *Sample) sort() {
	if !s.sorted {
		slices.SortFunc(s.entries, func(a, b Entry) int {
			return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.OffsetNS, b.OffsetNS))
		})
		s.sorted = true
	}
}

// Entries returns the entries by ID, then time (shared, not to be changed).
func (s *Sample) Entries() []Entry {
	s.sort()
	return s.entries
}

const version = 1

// MarshalBinary is the wire form: the envelope, seed and threshold, the
// count, then the entries by ID: the first ID whole and the others as
// differences (uvarint), each with its offset (varint).
func (s *Sample) MarshalBinary() ([]byte, error) {
	s.sort()
	b := synopsis.AppendHeader(make([]byte, 0, 24+12*len(s.entries)), synopsis.KindSample, version)
	b = binary.LittleEndian.AppendUint64(b, s.cfg.Seed)
	b = binary.LittleEndian.AppendUint64(b, s.cfg.Threshold)
	b = binary.AppendUvarint(b, uint64(len(s.entries)))
	var prev uint64
	for i, e := range s.entries {
		if i == 0 {
			b = binary.LittleEndian.AppendUint64(b, e.ID)
		} else {
			b = binary.AppendUvarint(b, e.ID-prev)
		}
		b = binary.AppendVarint(b, e.OffsetNS)
		prev = e.ID
	}
	return b, nil
}

// Decode parses a wire form, rejecting truncated, oversized, unsorted or
// trailing input with an error wrapping synopsis.ErrFormat.
func Decode(b []byte) (*Sample, error) {
	r, err := synopsis.NewReader(b, synopsis.KindSample, version)
	if err != nil {
		return nil, err
	}
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
	s := &Sample{cfg: cfg, entries: make([]Entry, 0, n), sorted: true}
	var id uint64
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
		if i > 0 {
			if last := s.entries[i-1]; last.ID == id && last.OffsetNS > off {
				r.Fail("offset", "copies of an id out of time order")
				return nil, r.Err()
			}
		}
		if !cfg.Keeps(id) {
			r.Fail("id", "not one the sampling keeps")
			return nil, r.Err()
		}
		s.entries = append(s.entries, Entry{id, off})
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return s, nil
}

// HeapBytes is the memory its entries take.
func (s *Sample) HeapBytes() int { return cap(s.entries) * int(unsafe.Sizeof(Entry{})) }
