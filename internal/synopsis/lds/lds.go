// Package lds is the Lossy Difference Sketch (Sanjuàs-Cuxart, Barlet-Ros,
// Duffield, Kompella, "Sketching the delay", IMC 2011, §2–4): R rows × C
// cells of (timestamp sum, packet count, digest), kept alike at both ends of
// a path, from which the one-way delay of any flow can be estimated.
//
// A packet of flow f goes, in every row r that samples it, to cell
// (h_r(f) + h'(packet)) mod C: the flow hash picks a base cell per row and
// the packet hash an offset in [0, k), so a flow's packets spread over a
// virtual LDA of k neighbouring cells (§2.3.3). The digest is the xor of the
// IDs of the packets in the cell (§2.3.2): a cell is usable only when both
// ends agree on its count and digest. A flow's mean delay comes from its
// usable cells that hold at most (1+α) times the packets of its least loaded
// usable cell (§2.3.4), counts scaled by the row's sampling rate (§4.2).
package lds

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/owl-latency/owl/internal/synopsis"
)

// Limits, also enforced on decoding.
const (
	MaxRows   = 16
	MaxCols   = 1 << 22
	MaxK      = 64
	MaxWeight = 1 << 16
)

// Wire versions: 1 carries 8-byte digests; 2 names its digest width
// (DigestBytes), so that a collector that reads 2 can ask for shorter ones.
const (
	version       = 1
	versionDigest = 2
)

// DigestWidths are the digest widths in bytes a wire form may carry.
var DigestWidths = []int{2, 4, 8}

// Config sets the shape of an LDS; both ends of a path must use the same.
type Config struct {
	// Rows is R; Cols is C, the cells per row.
	Rows int `yaml:"rows"`
	Cols int `yaml:"cols"`
	// K is the length of a flow's virtual LDA in each row.
	K int `yaml:"k"`
	// RowSampleLog2 gives each row its sampling rate 2^-e (empty: all
	// rows sample every packet). Rows with low rates survive heavy loss,
	// rows with high rates collect more samples (multi-bank LDS, §4.2).
	RowSampleLog2 []uint8 `yaml:"row_sample_log2"`
	// Seed keys the hashes.
	Seed uint64 `yaml:"seed"`
}

// DefaultConfig returns 4 rows × 4096 cells, k = 4, rows sampling 1/64,
// 1/8, 1/2 and 1 (for loss up to about 1%), as §5.2 does with 4 banks.
func DefaultConfig() Config {
	return Config{Rows: 4, Cols: 4096, K: 4, RowSampleLog2: []uint8{6, 3, 1, 0}, Seed: 0x6c6473}
}

// Validate reports parameters out of range.
func (c Config) Validate() error {
	if c.Rows < 1 || c.Rows > MaxRows {
		return fmt.Errorf("lds rows %d out of range [1, %d]", c.Rows, MaxRows)
	}
	if c.Cols < 1 || c.Cols > MaxCols {
		return fmt.Errorf("lds cols %d out of range [1, %d]", c.Cols, MaxCols)
	}
	if c.K < 1 || c.K > MaxK || c.K > c.Cols {
		return fmt.Errorf("lds k %d out of range [1, min(%d, cols)]", c.K, MaxK)
	}
	if len(c.RowSampleLog2) != 0 && len(c.RowSampleLog2) != c.Rows {
		return fmt.Errorf("lds needs one sampling exponent per row (%d), got %d", c.Rows, len(c.RowSampleLog2))
	}
	for _, e := range c.RowSampleLog2 {
		if e > 63 {
			return fmt.Errorf("lds sampling exponent %d exceeds 63", e)
		}
	}
	return nil
}

// Compatible returns an error wrapping synopsis.ErrMismatch when o differs.
func (c Config) Compatible(o Config) error {
	if c.Rows != o.Rows || c.Cols != o.Cols || c.K != o.K || c.Seed != o.Seed || !slices.Equal(c.RowSampleLog2, o.RowSampleLog2) {
		return fmt.Errorf("%w: lds %d×%d k %d sampling %v seed %#x vs %d×%d k %d sampling %v seed %#x", synopsis.ErrMismatch,
			c.Rows, c.Cols, c.K, c.RowSampleLog2, c.Seed, o.Rows, o.Cols, o.K, o.RowSampleLog2, o.Seed)
	}
	return nil
}

// rate is row r's sampling probability.
func (c Config) rate(r int) float64 {
	if len(c.RowSampleLog2) == 0 {
		return 1
	}
	return math.Ldexp(1, -int(c.RowSampleLog2[r]))
}

// Cell is one cell of the sketch.
type Cell struct {
	SumNS  int64  // weighted sum of timestamp offsets
	Count  uint64 // weighted packet count
	Digest uint64 // xor of the IDs of the packets
}

// LDS is one end's sketch for one path and epoch. Not safe for concurrent use.
type LDS struct {
	cfg   Config
	zeros []uint8 // per row: leading zeros a packet hash needs to be sampled
	cells []Cell  // row-major
	// digestBytes is how many low bytes of each cell's digest the wire
	// form carries (0: all 8).
	digestBytes uint8
	// packed: the wire form is version 3 (SetPacked).
	packed bool
}

// SetDigestBytes sets how many low bytes of each cell's digest the wire
// form carries: 8 (the default, wire version 1, which every collector
// reads), 4 or 2 (version 2, for collectors that ask for it). A
// digest's low bytes are the xor of the low bytes of the IDs, so shorter
// digests still tell cells apart, with a chance of 2^-(8·n) of taking two
// different sets of packets of one count for the same.
func (l *LDS) SetDigestBytes(n int) error {
	if !slices.Contains(DigestWidths, n) {
		return fmt.Errorf("lds digest of %d bytes: must be one of %v", n, DigestWidths)
	}
	l.digestBytes = uint8(n)
	return nil
}

// DigestBytes is how many bytes of each digest the wire form carries.
func (l *LDS) DigestBytes() int {
	if l.digestBytes == 0 {
		return 8
	}
	return int(l.digestBytes)
}

// digestMask keeps the bytes of a digest that both sketches carry.
func digestMask(a, b *LDS) uint64 {
	n := min(a.DigestBytes(), b.DigestBytes())
	if n >= 8 {
		return math.MaxUint64
	}
	return 1<<(8*n) - 1
}

// New returns an empty LDS.
func New(cfg Config) (*LDS, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.RowSampleLog2 = slices.Clone(cfg.RowSampleLog2)
	l := &LDS{cfg: cfg, zeros: make([]uint8, cfg.Rows), cells: make([]Cell, cfg.Rows*cfg.Cols)}
	copy(l.zeros, cfg.RowSampleLog2)
	return l, nil
}

// readCells reads up to total cells from b, into cells unless it is nil,
// and returns how many it read and the bytes they took. It stops at the
// first cell it cannot read; decode reads that one field by field, for
// the error.
func readCells(b []byte, cells []Cell, total, width int) (read, n int) {
	for read < total {
		var sum int64
		var k int
		if cells != nil {
			sum, k = binary.Varint(b[n:])
		} else {
			k = skipVarint(b[n:]) // a check: the sum's value is not kept
		}
		if k <= 0 {
			break
		}
		count, k2 := binary.Uvarint(b[n+k:])
		if k2 <= 0 {
			break
		}
		end := n + k + k2
		var digest uint64
		if count > 0 {
			if len(b)-end < width {
				break
			}
			digest = readDigest(b[end:], width)
			end += width
		}
		if cells != nil {
			cells[read] = Cell{SumNS: sum, Count: count, Digest: digest}
		}
		read, n = read+1, end
	}
	return read, n
}

// skipVarint returns the length of the varint b starts with, 0 when b
// ends before it does and less than 0 when it overflows 64 bits, as
// binary.Varint does, without computing its value.
func skipVarint(b []byte) int {
	for i, c := range b {
		if i == binary.MaxVarintLen64 {
			return -(i + 1)
		}
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return -(i + 1)
			}
			return i + 1
		}
	}
	return 0
}

// readDigest reads a digest of width bytes, little-endian; b holds them.
func readDigest(b []byte, width int) uint64 {
	switch width {
	case 8:
		return binary.LittleEndian.Uint64(b)
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	default:
		return uint64(binary.LittleEndian.Uint16(b))
	}
}

// emptyLike is New for a valid cfg, its cells taken from reuse when it
// has the capacity (their content is left for the caller to overwrite).
func emptyLike(cfg Config, reuse []Cell) *LDS {
	n := cfg.Rows * cfg.Cols
	if cap(reuse) < n {
		l, _ := New(cfg)
		return l
	}
	cfg.RowSampleLog2 = slices.Clone(cfg.RowSampleLog2)
	l := &LDS{cfg: cfg, zeros: make([]uint8, cfg.Rows), cells: reuse[:n]}
	copy(l.zeros, cfg.RowSampleLog2)
	return l
}

// Config returns the sketch's parameters.
func (l *LDS) Config() Config { return l.cfg }

// Reset empties the sketch, keeping its parameters.
func (l *LDS) Reset() { clear(l.cells) }

// FlowHash hashes a flow key's bytes (capture.FlowKey.AppendBinary) for
// Insert and Estimate.
func FlowHash(key []byte, seed uint64) uint64 { return synopsis.HashBytes(key, seed) }

// base returns the flow's base cell in row r.
func (l *LDS) base(r int, flow uint64) int {
	h := synopsis.Hash(flow, l.cfg.Seed+uint64(r>>1))
	if r&1 == 1 {
		h >>= 32
	}
	return int((uint64(uint32(h)) * uint64(l.cfg.Cols)) >> 32)
}

// Insert adds a packet (ID id, seen offsetNS into the epoch) of the flow
// with hash flow, with weight w (1 unless the operator's rules say more).
func (l *LDS) Insert(flow, id uint64, offsetNS int64, w uint64) { l.add(flow, id, offsetNS, w, false) }

// Remove takes a packet out again: the collector removes lost and extra
// packets that RDA reconciliation found, so that the cells they spoiled
// become usable.
func (l *LDS) Remove(flow, id uint64, offsetNS int64, w uint64) { l.add(flow, id, offsetNS, w, true) }

// Clone returns a deep copy.
func (l *LDS) Clone() *LDS {
	c := *l
	c.cells = slices.Clone(l.cells)
	return &c
}

func (l *LDS) add(flow, id uint64, offsetNS int64, w uint64, remove bool) {
	sum, cnt := int64(w)*offsetNS, w
	if remove {
		sum, cnt = -sum, -w // counts wrap back: uint64 arithmetic is modular
	}
	ph := synopsis.Hash(id, l.cfg.Seed^0x706b74)
	off := int((uint64(uint32(ph)) * uint64(l.cfg.K)) >> 32)
	lz := uint8(bits.LeadingZeros64(ph))
	cols := l.cfg.Cols
	for r := 0; r < l.cfg.Rows; r += 2 {
		// A pair of rows shares a hash of the flow: skipped when
		// neither row samples the packet (the sparsest rows take few).
		in0, in1 := lz >= l.zeros[r], r+1 < l.cfg.Rows && lz >= l.zeros[r+1]
		if !in0 && !in1 {
			continue
		}
		h := synopsis.Hash(flow, l.cfg.Seed+uint64(r>>1))
		if in0 {
			j := int((uint64(uint32(h))*uint64(cols))>>32) + off
			if j >= cols {
				j -= cols
			}
			c := &l.cells[r*cols+j]
			c.SumNS += sum
			c.Count += cnt
			c.Digest ^= id
		}
		if in1 {
			j := int(((h>>32)*uint64(cols))>>32) + off
			if j >= cols {
				j -= cols
			}
			c := &l.cells[(r+1)*cols+j]
			c.SumNS += sum
			c.Count += cnt
			c.Digest ^= id
		}
	}
}

// Merge adds o (a shard of the same path and epoch) to l.
func (l *LDS) Merge(o *LDS) error {
	if err := l.cfg.Compatible(o.cfg); err != nil {
		return err
	}
	for i, c := range o.cells {
		a := &l.cells[i]
		a.SumNS += c.SumNS
		a.Count += c.Count
		a.Digest ^= c.Digest
	}
	return nil
}

// Options tune the estimator.
type Options struct {
	// Alpha is α: cells with more than (1+α) times the packets of the
	// least loaded usable cell are left out (default 0.1, the paper's).
	Alpha float64
	// MinCellPackets leaves out rows whose sampling gives each of the
	// flow's k cells fewer packets of the flow than this, by the flow's
	// estimated size (default 32). In such a row most of the flow's cells
	// hold none of its packets, only colliding ones, and the least loaded
	// cell the α rule starts from is one of those. Rows are left out only
	// while another row has usable cells.
	MinCellPackets float64
}

// DefaultOptions returns α = 0.1 and MinCellPackets 32.
func DefaultOptions() Options { return Options{Alpha: 0.1, MinCellPackets: 32} }

// FlowEstimate is what a pair of sketches tells about one flow.
type FlowEstimate struct {
	// MeanNS is the flow's mean delay; Samples the (weighted, scaled back
	// from sampling) packet count behind it. Zero when no cell is usable.
	MeanNS  float64
	Samples float64
	// Observed is the packets the mean was taken over (at least: those
	// of the row that holds the most of them), not scaled back from
	// sampling: the standard error of the mean is StddevNS/√Observed.
	Observed float64
	// StddevNS is a rough standard deviation, from the spread of the
	// selected cells of one row (zero when fewer than two cells allow).
	StddevNS float64
	// Cells is how many cells entered the mean; Usable how many of the
	// flow's R·k cells both ends agreed on.
	Cells, Usable int
	// UpPackets and DownPackets estimate the flow's packets at each end,
	// count-min style (§4.3): per row the vLDA's cells summed and scaled
	// by the sampling rate, then the least row. They are upper bounds.
	UpPackets, DownPackets float64
	// Lost estimates the flow's lost packets from the row that gives the
	// least upstream count (the least collided).
	Lost float64
}

// ErrNoCell is returned when none of a flow's cells is usable.
var ErrNoCell = errors.New("no usable cell for the flow")

// EstimateFlow estimates the delay of the flow with hash flow and weight w.
func EstimateFlow(up, down *LDS, flow uint64, w uint64, opts Options) (FlowEstimate, error) {
	if err := up.cfg.Compatible(down.cfg); err != nil {
		return FlowEstimate{}, err
	}
	if w == 0 {
		w = 1
	}
	cfg := up.cfg
	est := FlowEstimate{UpPackets: math.Inf(1), DownPackets: math.Inf(1)}
	cands := flowCells(up, down, flow, w, &est)
	est.Usable = len(cands)
	if len(cands) == 0 {
		return est, ErrNoCell
	}
	// Rows sampled too thinly for this flow's size are left out.
	if opts.MinCellPackets > 0 {
		cands = dropThinRows(cfg, cands, est.UpPackets, w, opts.MinCellPackets)
	}
	perRow := selectCells(cands, cfg.Rows, opts.Alpha, &est)
	// Samples: the packets behind the selected cells of the best row
	// (rows hold the same packets again), scaled back from sampling.
	if best := bestRow(perRow); best >= 0 {
		est.Samples, est.StddevNS = rowSpread(cfg, perRow[best], best, est.MeanNS, w)
	}
	// Observed: the packets the mean was taken over, not scaled back.
	// Rows hold the same packets again, so the row with the most is a
	// lower bound of how many different packets that is.
	for _, cs := range perRow {
		var n float64
		for _, c := range cs {
			n += c.count
		}
		est.Observed = max(est.Observed, n/float64(w))
	}
	return est, nil
}

// cellCand is one of the flow's cells that both ends agree on.
type cellCand struct {
	row           int
	sum           int64
	count, scaled float64
}

// flowCells returns the flow's cells both ends agree on, row by row, and
// sets est's count-min packet counts and loss.
func flowCells(up, down *LDS, flow uint64, w uint64, est *FlowEstimate) []cellCand {
	cfg := up.cfg
	mask := digestMask(up, down)
	cands := make([]cellCand, 0, cfg.Rows*cfg.K)
	for r := 0; r < cfg.Rows; r++ {
		p := cfg.rate(r)
		b := up.base(r, flow)
		var upN, downN uint64
		for o := 0; o < cfg.K; o++ {
			j := (b + o) % cfg.Cols
			a, d := up.cells[r*cfg.Cols+j], down.cells[r*cfg.Cols+j]
			upN += a.Count
			downN += d.Count
			if a.Count == d.Count && (a.Digest^d.Digest)&mask == 0 && a.Count > 0 {
				cands = append(cands, cellCand{row: r, sum: d.SumNS - a.SumNS, count: float64(a.Count), scaled: float64(a.Count) / p})
			}
		}
		upP, downP := float64(upN)/p/float64(w), float64(downN)/p/float64(w)
		if upP < est.UpPackets {
			est.UpPackets, est.Lost = upP, upP-downP
		}
		est.DownPackets = min(est.DownPackets, downP)
	}
	return cands
}

// dropThinRows leaves out the cells of rows that give each of the flow's
// cells fewer than minPackets of its packets, unless no cell is left.
func dropThinRows(cfg Config, cands []cellCand, upPackets float64, w uint64, minPackets float64) []cellCand {
	thick := func(c cellCand) bool {
		return upPackets*float64(w)*cfg.rate(c.row)/float64(cfg.K) >= minPackets
	}
	if !slices.ContainsFunc(cands, thick) {
		return cands
	}
	return slices.DeleteFunc(cands, func(c cellCand) bool { return !thick(c) })
}

// selectCells keeps the cells within (1+α) of the least loaded one, sets
// est's mean and cell count from them, and returns them by row (of
// rows). It reorders nothing and keeps them in cands's storage: cands is
// row by row.
func selectCells(cands []cellCand, rows int, alpha float64, est *FlowEstimate) [MaxRows][]cellCand {
	minScaled := math.Inf(1)
	for _, c := range cands {
		minScaled = min(minScaled, c.scaled)
	}
	var sum, n float64
	kept := cands[:0]
	for _, c := range cands {
		if c.scaled > (1+alpha)*minScaled {
			continue
		}
		sum += float64(c.sum)
		n += c.count
		est.Cells++
		kept = append(kept, c)
	}
	est.MeanNS = sum / n
	var perRow [MaxRows][]cellCand
	for i := 0; i < len(kept); {
		j := i + 1
		for j < len(kept) && kept[j].row == kept[i].row {
			j++
		}
		if r := kept[i].row; r < rows {
			perRow[r] = kept[i:j:j]
		}
		i = j
	}
	return perRow
}

// bestRow is the row with the most selected cells, the highest on a tie
// (-1 when there is none).
func bestRow(perRow [MaxRows][]cellCand) int {
	best := -1
	for r, cs := range perRow {
		if len(cs) > 0 && (best < 0 || len(cs) >= len(perRow[best])) {
			best = r
		}
	}
	return best
}

// rowSpread returns the packets behind the cells cs of row best, scaled
// back from sampling and weight w, and the standard deviation from their
// spread around mean (zero when fewer than two cells allow).
func rowSpread(cfg Config, cs []cellCand, best int, mean float64, w uint64) (samples, stddev float64) {
	var bc, bc2, bsq float64
	for _, c := range cs {
		bc += c.count
		bc2 += c.count * c.count
	}
	samples = bc / cfg.rate(best) / float64(w)
	if len(cs) >= 2 {
		for _, c := range cs {
			r := float64(c.sum) - c.count*mean
			bsq += r * r
		}
		if dof := bc - bc2/bc; dof > 0 {
			// Each cell's sum is weighted by w: divide the weight out.
			stddev = math.Sqrt(bsq/dof) / math.Sqrt(float64(w))
		}
	}
	return samples, stddev
}

// AppendBinary appends the wire form:
//
//	envelope (kind 'S', version 1, or 2 for digests under 8 bytes) |
//	rows (1) | cols (uvarint) | k (1) | sampling flag (1) [+ rows
//	exponents] | seed (8 LE) | version 2: digest bytes (1) |
//	per cell, row-major: sum (zig-zag varint), count (uvarint), digest
//	(its low digest bytes, LE, only when count > 0)
func (l *LDS) AppendBinary(b []byte) ([]byte, error) {
	width := l.DigestBytes()
	v := byte(version)
	switch {
	case l.packed:
		v = versionPacked
	case width < 8:
		v = versionDigest
	}
	b = appendConfig(synopsis.AppendHeader(b, synopsis.KindLDS, v), l.cfg)
	if v != version {
		b = append(b, byte(width))
	}
	if l.packed {
		return l.appendPacked(b, width), nil
	}
	for _, c := range l.cells {
		b = binary.AppendVarint(b, c.SumNS)
		b = binary.AppendUvarint(b, c.Count)
		if c.Count > 0 {
			switch width {
			case 8:
				b = binary.LittleEndian.AppendUint64(b, c.Digest)
			case 4:
				b = binary.LittleEndian.AppendUint32(b, uint32(c.Digest))
			default:
				b = binary.LittleEndian.AppendUint16(b, uint16(c.Digest))
			}
		}
	}
	return b, nil
}

// MarshalBinary returns the wire form, in one allocation of at most its
// largest size.
func (l *LDS) MarshalBinary() ([]byte, error) {
	return l.AppendBinary(make([]byte, 0, 64+len(l.cfg.RowSampleLog2)+len(l.cells)*(2*binary.MaxVarintLen64+8)))
}

// Decode parses a wire form, rejecting truncated, oversized or trailing
// input with an error wrapping synopsis.ErrFormat.
func Decode(b []byte) (*LDS, error) {
	return decode(b, true)
}

// UnmarshalBinary parses a wire form into l as Decode does, reusing l's
// cells when they are enough: a collector decodes two sketches per epoch,
// each ten times its wire form. On error l is left empty (no cells).
func (l *LDS) UnmarshalBinary(b []byte) error {
	d, err := decodeInto(l.cells, b, true)
	if err != nil {
		*l = LDS{cells: l.cells[:0]}
		return err
	}
	*l = *d
	return nil
}

// Check reads a wire form as Decode does, and returns its parameters
// without keeping the cells: a report's sketch is checked when it comes
// and decoded when it is used.
func Check(b []byte) (Config, error) {
	l, err := decode(b, false)
	if err != nil {
		return Config{}, err
	}
	return l.cfg, nil
}

// Shape reads a wire form's parameters and checks that its body is long
// enough for its cells, without reading them: the cheap check of a
// report's sketch when it comes, whose full reading waits until it is
// used (and whose bounds the receiver checks against its own parameters
// before it decodes). Decode may still find damaged cells.
func Shape(b []byte) (Config, error) {
	rd, v, err := synopsis.NewReaderOf(b, synopsis.KindLDS, version, versionPacked)
	if err != nil {
		return Config{}, err
	}
	cfg := readConfig(rd)
	if v != version {
		width := int(rd.Byte("digest bytes"))
		if rd.Err() == nil && !slices.Contains(DigestWidths, width) {
			rd.Fail("digest bytes", fmt.Sprintf("%d: must be one of %v", width, DigestWidths))
		}
	}
	if err := checkConfig(rd, cfg); err != nil {
		return Config{}, err
	}
	least := 2 * cfg.Rows * cfg.Cols // bytes: 2 a cell, or 2 bits packed
	if v == versionPacked {
		least = (cfg.Rows*cfg.Cols + 3) / 4
	}
	if !rd.Need("cells", least) {
		return Config{}, rd.Err()
	}
	return cfg, nil
}

// decode parses a wire form; without keep, the cells are read and
// checked but not kept (the result has none).
func decode(b []byte, keep bool) (*LDS, error) { return decodeInto(nil, b, keep) }

// decodeInto is decode, taking the cells from reuse when it has the
// capacity for them.
func decodeInto(reuse []Cell, b []byte, keep bool) (*LDS, error) {
	rd, v, err := synopsis.NewReaderOf(b, synopsis.KindLDS, version, versionPacked)
	if err != nil {
		return nil, err
	}
	cfg := readConfig(rd)
	width := 8
	switch v {
	case versionDigest:
		width = int(rd.Byte("digest bytes"))
		if rd.Err() == nil && (width == 8 || !slices.Contains(DigestWidths, width)) {
			rd.Fail("digest bytes", fmt.Sprintf("%d: version 2 carries 2 or 4", width))
		}
	case versionPacked:
		width = int(rd.Byte("digest bytes"))
		if rd.Err() == nil && !slices.Contains(DigestWidths, width) {
			rd.Fail("digest bytes", fmt.Sprintf("%d: must be one of %v", width, DigestWidths))
		}
	}
	if err := checkConfig(rd, cfg); err != nil {
		return nil, err
	}
	if v == versionPacked {
		return decodePacked(rd, reuse, cfg, width, keep)
	}
	if !rd.Need("cells", 2*cfg.Rows*cfg.Cols) {
		return nil, rd.Err()
	}
	l := &LDS{cfg: cfg}
	if keep {
		l = emptyLike(cfg, reuse)
	}
	l.digestBytes = uint8(width)
	read, n := readCells(rd.Rest(), l.cells, cfg.Rows*cfg.Cols, width) // l.cells nil without keep
	rd.Skip(n)
	var scratch Cell
	for i := read; i < cfg.Rows*cfg.Cols; i++ { // from a cell readCells could not read, for the error
		c := &scratch
		if keep {
			c = &l.cells[i]
		}
		c.SumNS = rd.Varint("cell sum")
		c.Count = rd.Uvarint("cell count", math.MaxUint64)
		c.Digest = 0
		if c.Count > 0 {
			if rd.Remaining() < width {
				rd.Fail("cell digest", "truncated")
				break
			}
			c.Digest = readDigest(rd.Rest(), width)
			rd.Skip(width)
		}
	}
	if err := rd.Done(); err != nil {
		return nil, err
	}
	return l, nil
}

// decodePacked reads the cells of a version 3 form (appendPacked). Every
// cell takes at least two bits, so a form holds at most four cells a byte.
func decodePacked(rd *synopsis.Reader, reuse []Cell, cfg Config, width int, keep bool) (*LDS, error) {
	if !rd.Need("cells", (cfg.Rows*cfg.Cols+3)/4) {
		return nil, rd.Err()
	}
	l := &LDS{cfg: cfg}
	if keep {
		l = emptyLike(cfg, reuse)
	}
	l.digestBytes, l.packed = uint8(width), true
	if !readPacked(rd.Rest(), l.cells, cfg.Rows, cfg.Cols, width) {
		rd.Fail("cells", "truncated or damaged packed cells")
		return nil, rd.Err()
	}
	rd.Skip(rd.Remaining())
	if err := rd.Done(); err != nil {
		return nil, err
	}
	return l, nil
}

// appendConfig appends the shape of a sketch: rows (1) | cols (uvarint) |
// k (1) | sampling flag (1) [+ rows exponents] | seed (8 LE).
func appendConfig(b []byte, cfg Config) []byte {
	b = append(b, byte(cfg.Rows))
	b = binary.AppendUvarint(b, uint64(cfg.Cols))
	b = append(b, byte(cfg.K))
	if len(cfg.RowSampleLog2) == 0 {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = append(b, cfg.RowSampleLog2...)
	}
	return binary.LittleEndian.AppendUint64(b, cfg.Seed)
}

// readConfig reads what appendConfig wrote; checkConfig checks it.
func readConfig(rd *synopsis.Reader) Config {
	var cfg Config
	cfg.Rows = int(rd.Byte("rows"))
	cfg.Cols = int(rd.Uvarint("cols", MaxCols))
	cfg.K = int(rd.Byte("k"))
	switch rd.Byte("sampling") {
	case 0:
	case 1:
		if cfg.Rows <= MaxRows && rd.Need("row sampling", cfg.Rows) {
			cfg.RowSampleLog2 = make([]uint8, cfg.Rows)
			for i := range cfg.RowSampleLog2 {
				cfg.RowSampleLog2[i] = rd.Byte("row sampling")
			}
		}
	default:
		rd.Fail("sampling", "must be 0 or 1")
	}
	cfg.Seed = rd.Uint64("seed")
	return cfg
}

// checkConfig returns the reader's first error, or cfg's.
func checkConfig(rd *synopsis.Reader, cfg Config) error {
	if rd.Err() != nil {
		return rd.Err()
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", synopsis.ErrFormat, err)
	}
	return nil
}
