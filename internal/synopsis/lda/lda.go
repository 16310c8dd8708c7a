// Package lda is the Lossy Difference Aggregator (Kompella et al., "Every
// microsecond counts", SIGCOMM 2009, §3): n banks × m rows of (timestamp sum,
// packet count) kept alike at both ends of a path.
//
// A packet goes to at most one bank, chosen by the number of leading zeros of
// its hash (bank j samples with probability 2^-e_j − 2^-e_{j+1}, so banks see
// disjoint samples), and to one row of that bank by the same hash. A row is
// usable when both ends counted the same number of packets in it; the mean
// delay is the sum of the timestamp differences of usable rows over their
// packet count (Eq. 4). The second moment comes from collapsing rows 2i and
// 2i+1 into one signed sum, the sign being the low bit of the row (§3.4), and
// the standard deviation from it and the mean.
package lda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/owl-latency/owl/internal/synopsis"
)

// Limits of the parameters, also enforced on decoding.
const (
	MaxRows  = 1 << 20
	MaxBanks = 8
)

// version is the wire form's version.
const version = 1

// Config sets the shape of an LDA. Both ends of a path must use the same.
type Config struct {
	// Rows is m, the rows per bank (even, so that rows pair up for the
	// standard deviation).
	Rows int `yaml:"rows"`
	// BankSampleLog2 holds e_0 < e_1 < ... : bank j takes the packets whose
	// hash has at least e_j and (unless j is last) fewer than e_{j+1}
	// leading zeros. [0, 4] makes bank 0 take 15/16 of the packets (tuned to
	// low loss) and bank 1 the other 1/16 (to loss 16 times higher).
	BankSampleLog2 []uint8 `yaml:"bank_sample_log2"`
	// Seed keys the hash that places packets.
	Seed uint64 `yaml:"seed"`
}

// DefaultConfig returns 2 banks × 1024 rows, sampling 15/16 and 1/16.
func DefaultConfig() Config {
	return Config{Rows: 1024, BankSampleLog2: []uint8{0, 4}, Seed: 0x6c6461}
}

// Validate reports parameters out of range.
func (c Config) Validate() error {
	if c.Rows < 2 || c.Rows > MaxRows || c.Rows%2 != 0 {
		return fmt.Errorf("lda rows %d must be even and in [2, %d]", c.Rows, MaxRows)
	}
	if len(c.BankSampleLog2) == 0 || len(c.BankSampleLog2) > MaxBanks {
		return fmt.Errorf("lda needs 1 to %d banks, got %d", MaxBanks, len(c.BankSampleLog2))
	}
	for j, e := range c.BankSampleLog2 {
		if e > 63 {
			return fmt.Errorf("lda bank %d sampling exponent %d exceeds 63", j, e)
		}
		if j > 0 && e <= c.BankSampleLog2[j-1] {
			return fmt.Errorf("lda bank sampling exponents must increase: %v", c.BankSampleLog2)
		}
	}
	return nil
}

// WithRows is c at rows rows per bank, or why c does not allow it: more
// rows than c's, or rows Validate refuses. A collector sizes a path's LDA
// within its parameters' (LDASize); the banks and seed stay.
func (c Config) WithRows(rows int) (Config, error) {
	if rows > c.Rows {
		return Config{}, fmt.Errorf("lda rows %d exceed the parameters' %d", rows, c.Rows)
	}
	c.Rows = rows
	return c, c.Validate()
}

// RowsFor is the rows per bank for epochs whose set differences (packets
// lost or extra) reach d: the smallest least·2^k of at least 2d, at most
// most (least when d is 0). With d packets spoiling
// rows at random, about e^(−d/rows) of a bank's rows stay usable: at 2d,
// three fifths or more.
func RowsFor(d, least, most int) int {
	rows := least
	for rows < 2*d && rows < most {
		rows *= 2
	}
	return min(rows, most)
}

// Within returns an error wrapping synopsis.ErrMismatch unless o is c at
// o.Rows rows per bank (WithRows).
func (c Config) Within(o Config) error {
	if o.Rows > c.Rows {
		return fmt.Errorf("%w: lda rows %d exceed the parameters' %d", synopsis.ErrMismatch, o.Rows, c.Rows)
	}
	o.Rows = c.Rows
	return c.Compatible(o)
}

// Compatible returns an error wrapping synopsis.ErrMismatch when o differs.
func (c Config) Compatible(o Config) error {
	if c.Rows != o.Rows || c.Seed != o.Seed || !slices.Equal(c.BankSampleLog2, o.BankSampleLog2) {
		return fmt.Errorf("%w: lda rows %d banks %v seed %#x vs rows %d banks %v seed %#x",
			synopsis.ErrMismatch, c.Rows, c.BankSampleLog2, c.Seed, o.Rows, o.BankSampleLog2, o.Seed)
	}
	return nil
}

// BankProbability returns p_j, the share of packets bank j samples.
func (c Config) BankProbability(j int) float64 {
	p := math.Ldexp(1, -int(c.BankSampleLog2[j]))
	if j+1 < len(c.BankSampleLog2) {
		p -= math.Ldexp(1, -int(c.BankSampleLog2[j+1]))
	}
	return p
}

// SampledFraction is the share of packets some bank samples.
func (c Config) SampledFraction() float64 { return math.Ldexp(1, -int(c.BankSampleLog2[0])) }

// cell is one row of one bank.
type cell struct {
	sumNS int64  // sum of timestamp offsets within the epoch
	count uint64 // packets
}

// LDA is one end's aggregator for one path and epoch. Not safe for
// concurrent use; shards merge exactly with Merge.
type LDA struct {
	cfg    Config
	bankOf [65]int8 // leading zeros of the hash → bank, or -1
	cells  []cell   // bank-major: cells[j*Rows + i]
}

// New returns an empty LDA.
func New(cfg Config) (*LDA, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.BankSampleLog2 = slices.Clone(cfg.BankSampleLog2)
	l := &LDA{cells: make([]cell, len(cfg.BankSampleLog2)*cfg.Rows)}
	l.setConfig(cfg)
	return l, nil
}

// setConfig sets the parameters and the bank of each hash's leading
// zeros.
func (l *LDA) setConfig(cfg Config) {
	l.cfg = cfg
	for lz := range l.bankOf {
		l.bankOf[lz] = -1
		for j, e := range cfg.BankSampleLog2 {
			if lz >= int(e) {
				l.bankOf[lz] = int8(j)
			}
		}
	}
}

// Config returns the LDA's parameters.
func (l *LDA) Config() Config { return l.cfg }

// Insert adds a packet with the given ID seen at offsetNS nanoseconds after
// the start of the epoch.
func (l *LDA) Insert(id uint64, offsetNS int64) {
	h := synopsis.Hash(id, l.cfg.Seed)
	j := l.bankOf[bits.LeadingZeros64(h)]
	if j < 0 {
		return
	}
	row := int((uint64(uint32(h)) * uint64(l.cfg.Rows)) >> 32)
	c := &l.cells[int(j)*l.cfg.Rows+row]
	c.sumNS += offsetNS
	c.count++
}

// Merge adds the packets of o (a shard of the same path and epoch) to l.
func (l *LDA) Merge(o *LDA) error {
	if err := l.cfg.Compatible(o.cfg); err != nil {
		return err
	}
	for i := range l.cells {
		l.cells[i].sumNS += o.cells[i].sumNS
		l.cells[i].count += o.cells[i].count
	}
	return nil
}

// Packets is the number of packets the banks sampled.
func (l *LDA) Packets() uint64 {
	var n uint64
	for _, c := range l.cells {
		n += c.count
	}
	return n
}

// Reset empties the LDA for reuse.
func (l *LDA) Reset() { clear(l.cells) }

// Estimate is what a pair of LDAs tells about one path and epoch.
type Estimate struct {
	// MeanNS is the mean delay, from usable rows. Zero when Samples is 0.
	MeanNS float64
	// StddevNS is the standard deviation of the delay, from usable
	// collapsed row pairs; zero when StddevSamples is 0.
	StddevNS float64
	// Samples is the effective sample size of the mean: the packets in
	// usable rows.
	Samples uint64
	// StddevSamples is the number of packets behind the standard deviation.
	StddevSamples uint64
	// UsableRows and Rows count usable rows and all rows over all banks.
	UsableRows, Rows int
	// UpPackets and DownPackets are the packets each side's banks sampled.
	UpPackets, DownPackets uint64
	// LostPackets estimates the packets of the epoch lost between the two
	// points: (UpPackets − DownPackets) / SampledFraction. It is negative
	// when the downstream side saw packets the upstream side did not.
	LostPackets float64
	// SampledFraction is the share of packets the banks sample.
	SampledFraction float64
}

// ErrNoSamples is returned by Estimate when no row is usable.
var ErrNoSamples = errors.New("no usable rows")

// DelayBounds are the delays a path can plausibly have. A row whose counts
// match but whose mean delay falls outside them is not usable.
//
// The paper's usable-row test (equal counts) assumes that a packet seen by
// the downstream point was seen by the upstream point in the same interval.
// With clock-delimited epochs that fails for packets sent just before an
// epoch's end and received after it: they are missing in epoch e and extra
// in e+1, and a row of e+1 that holds such a packet and a lost one has equal
// counts but a timestamp sum off by up to the epoch length. The bounds catch
// nearly all such rows (RDA repairs them exactly).
type DelayBounds struct {
	MinNS, MaxNS int64
}

// DefaultDelayBounds allows delays from −1 ms (clock error) to 1 s.
func DefaultDelayBounds() DelayBounds {
	return DelayBounds{MinNS: -1_000_000, MaxNS: 1_000_000_000}
}

// usable says whether a row with these counts and timestamp difference can be used.
func (b DelayBounds) usable(up, down cell) bool {
	if up.count != down.count || up.count == 0 {
		return false
	}
	d := down.sumNS - up.sumNS
	n := int64(up.count)
	return d >= b.MinNS*n && d <= b.MaxNS*n
}

// StddevMethod picks the standard deviation estimator.
type StddevMethod uint8

// Standard deviation estimators.
const (
	// StddevCentered uses each usable row's deviation from the mean (the
	// default: on the same LDAs its error is about half the paper's, and
	// much smaller when the mean is large against the deviation).
	StddevCentered StddevMethod = iota
	// StddevCollapsed is the paper's collapsed row pairs (§3.4).
	StddevCollapsed
)

// Options tune the estimator; both ends' LDAs are unaffected.
type Options struct {
	Bounds DelayBounds
	Stddev StddevMethod
}

// DefaultOptions returns DefaultDelayBounds and the centered estimator.
func DefaultOptions() Options { return Options{Bounds: DefaultDelayBounds()} }

// EstimatePair computes the delay statistics of the packets that went from
// the upstream LDA to the downstream one.
func EstimatePair(up, down *LDA, opts Options) (Estimate, error) {
	bounds := opts.Bounds
	if err := up.cfg.Compatible(down.cfg); err != nil {
		return Estimate{}, err
	}
	est := Estimate{Rows: len(up.cells), SampledFraction: up.cfg.SampledFraction()}
	var diffNS int64 // sum of delays of packets in usable rows
	for i, a := range up.cells {
		b := down.cells[i]
		est.UpPackets += a.count
		est.DownPackets += b.count
		if bounds.usable(a, b) {
			est.UsableRows++
			est.Samples += a.count
			diffNS += b.sumNS - a.sumNS
		}
	}
	est.LostPackets = (float64(est.UpPackets) - float64(est.DownPackets)) / est.SampledFraction
	if est.Samples == 0 {
		return est, ErrNoSamples
	}
	est.MeanNS = float64(diffNS) / float64(est.Samples)

	switch opts.Stddev {
	case StddevCollapsed:
		est.StddevNS, est.StddevSamples = stddevCollapsed(up, down, opts.Bounds, est.MeanNS)
	default:
		est.StddevNS, est.StddevSamples = stddevCentered(up, down, opts.Bounds, est.MeanNS)
	}
	return est, nil
}

// stddevCollapsed is the paper's estimator (§3.4): packets of row 2i count
// with sign −1, those of row 2i+1 with +1, so that the square of a pair's
// signed delay sum is, in expectation, the sum of its squared delays; the
// variance is their mean minus the squared mean. Both rows of a pair must
// be usable (or empty).
func stddevCollapsed(up, down *LDA, bounds DelayBounds, meanNS float64) (float64, uint64) {
	var sq float64
	var n uint64
	for i := 0; i+1 < len(up.cells); i += 2 {
		a0, a1, b0, b1 := up.cells[i], up.cells[i+1], down.cells[i], down.cells[i+1]
		if !bounds.usable(a0, b0) && a0.count+b0.count > 0 || !bounds.usable(a1, b1) && a1.count+b1.count > 0 {
			continue // a row of the pair holds packets of one side only
		}
		if a0.count+a1.count == 0 {
			continue
		}
		d := float64((b1.sumNS - a1.sumNS) - (b0.sumNS - a0.sumNS))
		sq += d * d
		n += a0.count + a1.count
	}
	if n == 0 {
		return 0, 0
	}
	return math.Sqrt(math.Max(sq/float64(n)-meanNS*meanNS, 0)), n
}

// stddevCentered estimates the variance from every usable row's deviation
// from the mean: a row of c packets has delay sum R with E[R] = c·μ and
// Var R = c·σ², so Σ (R_i − c_i·μ̂)² has expectation σ²·(C − Σc_i²/C), C = Σc_i.
// The squares hold deviations from the mean instead of whole delays, so the
// noise of the cross terms scales with σ² instead of μ² + σ², and every
// usable row counts instead of usable pairs of rows.
func stddevCentered(up, down *LDA, bounds DelayBounds, meanNS float64) (float64, uint64) {
	var sq, c, c2 float64
	for i, a := range up.cells {
		b := down.cells[i]
		if !bounds.usable(a, b) {
			continue
		}
		n := float64(a.count)
		r := float64(b.sumNS-a.sumNS) - n*meanNS
		sq += r * r
		c += n
		c2 += n * n
	}
	dof := c - c2/c
	if c == 0 || dof <= 0 {
		return 0, 0
	}
	return math.Sqrt(sq / dof), uint64(c)
}

// AppendBinary appends the wire form:
//
//	envelope (kind 'L', version 1) | rows (uvarint) | banks (1 byte) |
//	sampling exponents (1 byte each) | seed (8 bytes LE) |
//	per cell, bank-major: sum (zig-zag varint), count (uvarint)
func (l *LDA) AppendBinary(b []byte) ([]byte, error) {
	b = synopsis.AppendHeader(b, synopsis.KindLDA, version)
	b = binary.AppendUvarint(b, uint64(l.cfg.Rows))
	b = append(b, byte(len(l.cfg.BankSampleLog2)))
	b = append(b, l.cfg.BankSampleLog2...)
	b = binary.LittleEndian.AppendUint64(b, l.cfg.Seed)
	for _, c := range l.cells {
		b = binary.AppendVarint(b, c.sumNS)
		b = binary.AppendUvarint(b, c.count)
	}
	return b, nil
}

// MarshalBinary returns the wire form.
func (l *LDA) MarshalBinary() ([]byte, error) { return l.AppendBinary(nil) }

// DecodeConfig reads the parameters at the head of a wire form without
// decoding its cells: a receiver checks an LDA's shape before it
// allocates it.
func DecodeConfig(b []byte) (Config, error) {
	r, err := synopsis.NewReader(b, synopsis.KindLDA, version)
	if err != nil {
		return Config{}, err
	}
	return decodeConfig(r)
}

// decodeConfig reads the parameters that follow the envelope.
func decodeConfig(r *synopsis.Reader) (Config, error) {
	var cfg Config
	cfg.Rows = int(r.Uvarint("rows", MaxRows))
	nb := int(r.Byte("banks"))
	if nb > MaxBanks {
		r.Fail("banks", fmt.Sprintf("%d banks exceed the limit %d", nb, MaxBanks))
	}
	if r.Need("bank exponents", nb) {
		cfg.BankSampleLog2 = make([]uint8, nb)
		for j := range cfg.BankSampleLog2 {
			cfg.BankSampleLog2[j] = r.Byte("bank exponent")
		}
	}
	cfg.Seed = r.Uint64("seed")
	if r.Err() != nil {
		return Config{}, r.Err()
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w: %w", synopsis.ErrFormat, err)
	}
	return cfg, nil
}

// readCells reads cells from b until they are all read or one cannot be,
// and returns how many it read and the bytes they took: one loop over the
// bytes, where the Reader's field by field would check each field.
func readCells(b []byte, cells []cell) (read, n int) {
	for read < len(cells) {
		sum, k := binary.Varint(b[n:])
		if k <= 0 {
			break
		}
		count, k2 := binary.Uvarint(b[n+k:])
		if k2 <= 0 {
			break
		}
		cells[read] = cell{sumNS: sum, count: count}
		read, n = read+1, n+k+k2
	}
	return read, n
}

// Decode parses a wire form. It rejects truncated, oversized or trailing
// input and parameters out of range with an error wrapping synopsis.ErrFormat.
func Decode(b []byte) (*LDA, error) {
	l := &LDA{}
	if err := l.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return l, nil
}

// UnmarshalBinary makes l the LDA of a wire form, in l's own storage when
// it is large enough (a collector decodes into LDAs it reuses). It
// rejects what Decode rejects; l is then in no defined state.
func (l *LDA) UnmarshalBinary(b []byte) error {
	r, err := synopsis.NewReader(b, synopsis.KindLDA, version)
	if err != nil {
		return err
	}
	cfg, err := decodeConfig(r)
	if err != nil {
		return err
	}
	// Each cell takes at least two bytes: check before allocating.
	cells := len(cfg.BankSampleLog2) * cfg.Rows
	if !r.Need("cells", 2*cells) {
		return r.Err()
	}
	l.setConfig(cfg)
	l.cells = slices.Grow(l.cells[:0], cells)[:cells]
	read, n := readCells(r.Rest(), l.cells)
	r.Skip(n)
	for i := read; i < len(l.cells); i++ { // from a cell readCells could not read, for the error
		l.cells[i].sumNS = r.Varint("cell sum")
		l.cells[i].count = r.Uvarint("cell count", math.MaxUint64)
	}
	return r.Done()
}

// HeapBytes is the memory its cells take.
func (l *LDA) HeapBytes() int { return len(l.cells) * int(unsafe.Sizeof(cell{})) }
