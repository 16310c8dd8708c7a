package lds

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/owl-latency/owl/internal/synopsis"
)

// The pair form is how a collector keeps an epoch's two sketches for
// later per-flow queries. EstimateFlow reads, of each cell, the two counts
// and, when the ends agree on the cell (same count, same digest), the
// difference of the two sums; nothing else. The pair form keeps just
// that: no digests, no timestamp sums (sums of offsets into the epoch, the
// longest varints of a sketch), one difference of sums for the cells both
// ends agree on. An empty cell takes one byte.
const pairVersion = 1

// Cell flags of the pair form, in the low two bits of a cell's first
// uvarint (the upstream count above them).
const (
	pairDiffers = 1 // the downstream count follows
	pairUsable  = 2 // the difference of the sums follows
	// pairEscape (both bits, which no cell has: a usable cell's counts
	// are equal) is a cell whose upstream count does not fit above the
	// flags: upstream count, downstream count, usable (1), [difference].
	pairEscape = pairDiffers | pairUsable
)

// AppendPair appends the pair form of up and down, one path's two sketches
// of an epoch (of one shape):
//
//	envelope (kind 'P', version 1) | the shape, as in the wire form |
//	per cell, row-major: uvarint(up count << 2 | flags) [down count
//	(uvarint)] [down sum − up sum (zig-zag varint)]
func AppendPair(b []byte, up, down *LDS) ([]byte, error) {
	if err := up.cfg.Compatible(down.cfg); err != nil {
		return b, err
	}
	// An empty cell takes a byte, others mostly 2 to 5: one allocation,
	// not a dozen.
	n := len(up.cells) + 64
	for i, a := range up.cells {
		if a.Count|down.cells[i].Count != 0 {
			n += 4
		}
	}
	b = slices.Grow(b, n)
	b = appendConfig(synopsis.AppendHeader(b, synopsis.KindLDSPair, pairVersion), up.cfg)
	mask := digestMask(up, down)
	for i, a := range up.cells {
		d := down.cells[i]
		usable := a.Count == d.Count && a.Count > 0 && (a.Digest^d.Digest)&mask == 0
		if a.Count >= 1<<62 {
			b = binary.AppendUvarint(b, pairEscape)
			b = binary.AppendUvarint(b, a.Count)
			b = binary.AppendUvarint(b, d.Count)
			if !usable {
				b = append(b, 0)
				continue
			}
			b = append(b, 1)
			b = binary.AppendVarint(b, d.SumNS-a.SumNS)
			continue
		}
		h := a.Count << 2
		switch {
		case usable:
			b = binary.AppendUvarint(b, h|pairUsable)
			b = binary.AppendVarint(b, d.SumNS-a.SumNS)
		case a.Count != d.Count:
			b = binary.AppendUvarint(b, h|pairDiffers)
			b = binary.AppendUvarint(b, d.Count)
		default:
			b = binary.AppendUvarint(b, h)
		}
	}
	return b, nil
}

// IsPair says whether b starts as a pair form does.
func IsPair(b []byte) bool {
	h := synopsis.AppendHeader(nil, synopsis.KindLDSPair, pairVersion)
	return len(b) >= len(h)-1 && string(b[:len(h)-1]) == string(h[:len(h)-1])
}

// DecodePair parses a pair form into two sketches from which EstimateFlow
// gives what it gave from the two it was made of: the upstream cells hold
// the counts, the downstream cells the counts and, in the cells both ends
// agreed on, the difference of the sums; a digest tells the cells apart
// that the ends did not agree on. Truncated, oversized or trailing input
// is rejected with an error wrapping synopsis.ErrFormat.
func DecodePair(b []byte) (up, down *LDS, err error) { return decodePair(b, true) }

// CheckPair says whether DecodePair would take b, without building the
// sketches.
func CheckPair(b []byte) error {
	_, _, err := decodePair(b, false)
	return err
}

// decodePair is DecodePair; without keep, the cells are read and checked
// but not kept (the results are nil).
func decodePair(b []byte, keep bool) (up, down *LDS, err error) {
	rd, cfg, err := pairReader(b)
	if err != nil {
		return nil, nil, err
	}
	total := cfg.Rows * cfg.Cols
	var upCells, downCells []Cell
	if keep {
		up, _ = New(cfg)
		down, _ = New(cfg)
		upCells, downCells = up.cells, down.cells
	}
	var a, d Cell
	for i := 0; i < total; {
		// Common cells in one loop over the bytes; the first other one
		// (escaped, or damaged: for the error) field by field.
		read, n := readPairCells(rd.Rest(), upCells, downCells, i, total)
		rd.Skip(n)
		if i = read; i == total {
			break
		}
		a, d = Cell{}, Cell{}
		if !readPairCell(rd, &a, &d) {
			break
		}
		if keep {
			upCells[i], downCells[i] = a, d
		}
		i++
	}
	if err := rd.Done(); err != nil {
		return nil, nil, err
	}
	return up, down, nil
}

// pairReader reads a pair form's envelope and shape, and checks that the
// rest can hold its cells (a byte a cell at least).
func pairReader(b []byte) (*synopsis.Reader, Config, error) {
	rd, err := synopsis.NewReader(b, synopsis.KindLDSPair, pairVersion)
	if err != nil {
		return nil, Config{}, err
	}
	cfg := readConfig(rd)
	if err := checkConfig(rd, cfg); err != nil {
		return nil, Config{}, err
	}
	if !rd.Need("cells", cfg.Rows*cfg.Cols) {
		return nil, Config{}, rd.Err()
	}
	return rd, cfg, nil
}

// readPairCells reads the cells from i on of a pair form from b, into up
// and down unless they are nil, until total or the first cell that is
// escaped or does not read, and returns the index it stopped at and the
// bytes read. It takes what readPairCell takes.
func readPairCells(b []byte, up, down []Cell, i, total int) (stop, n int) {
	for ; i < total; i++ {
		h, k := binary.Uvarint(b[n:])
		if k <= 0 {
			break
		}
		ac, dc := h>>2, h>>2
		var sum int64
		digest := uint64(1) // the ends did not agree on the cell
		switch h & pairEscape {
		case pairDiffers:
			var k2 int
			if dc, k2 = binary.Uvarint(b[n+k:]); k2 <= 0 || dc == ac {
				return i, n
			}
			k += k2
		case pairUsable:
			var k2 int
			if sum, k2 = binary.Varint(b[n+k:]); k2 <= 0 || ac == 0 {
				return i, n
			}
			k += k2
			digest = 0
		case pairEscape:
			return i, n
		}
		if up != nil {
			up[i] = Cell{Count: ac}
			down[i] = Cell{Count: dc, SumNS: sum, Digest: digest}
		}
		n += k
	}
	return i, n
}

// readPairCell reads one cell of a pair form into a and d, and says
// whether it could.
func readPairCell(rd *synopsis.Reader, a, d *Cell) bool {
	h := rd.Uvarint("cell", math.MaxUint64)
	flags := h & pairEscape
	a.Count, d.Count = h>>2, h>>2
	usable := flags == pairUsable
	switch flags {
	case pairDiffers:
		d.Count = rd.Uvarint("cell down count", math.MaxUint64)
		if rd.Err() == nil && d.Count == a.Count {
			rd.Fail("cell down count", "equal to the up count in a cell marked as differing")
		}
	case pairUsable:
		if a.Count == 0 {
			rd.Fail("cell", "an empty cell marked as usable")
		}
	case pairEscape:
		if h != pairEscape {
			rd.Fail("cell", fmt.Sprintf("%#x: an escaped cell carries no count of its own", h))
		}
		a.Count = rd.Uvarint("cell up count", math.MaxUint64)
		d.Count = rd.Uvarint("cell down count", math.MaxUint64)
		switch rd.Byte("cell usable") {
		case 0:
		case 1:
			usable = true
			if rd.Err() == nil && (a.Count != d.Count || a.Count == 0) {
				rd.Fail("cell usable", "a usable cell's counts are equal and not zero")
			}
		default:
			rd.Fail("cell usable", "must be 0 or 1")
		}
	}
	if usable {
		d.SumNS = rd.Varint("cell sum difference")
	} else {
		d.Digest = 1 // the ends did not agree on it
	}
	return rd.Err() == nil
}
