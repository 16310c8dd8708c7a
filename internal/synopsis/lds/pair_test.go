package lds

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/synopsistest"
)

// pairTraffic fills two sketches as a path's two ends see an epoch:
// flows of Zipf-like sizes, 1% lost, some lost with a packet of the
// previous epoch in their place (a cell of equal counts that the digests
// tell apart), delays of a millisecond and more.
func pairTraffic(cfg Config, packets int, seed uint64) (up, down *LDS) {
	up, _ = New(cfg)
	down, _ = New(cfg)
	r := rand.New(rand.NewPCG(seed, seed))
	for range packets {
		f := uint64(math.Floor(math.Exp(r.Float64() * math.Log(500))))
		id, ts := r.Uint64(), r.Int64N(1e9)
		up.Insert(f, id, ts, 1)
		switch {
		case r.IntN(100) == 0:
		case r.IntN(200) == 0:
			down.Insert(f, r.Uint64(), r.Int64N(1e6), 1)
		default:
			down.Insert(f, id, ts+1_000_000+r.Int64N(5_000_000), 1)
		}
	}
	return up, down
}

// TestPairEstimatesAsTheSketches: every flow's estimate from the pair
// form is the estimate from the two sketches, field for field, at every
// digest width the probes send, and the pair form is smaller than the two.
func TestPairEstimatesAsTheSketches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		packets int
		widths  [2]int
	}{
		{"sampled rows, 4-byte digests", Config{Rows: 4, Cols: 512, K: 4, RowSampleLog2: []uint8{3, 1, 0, 0}, Seed: 5}, 5_000, [2]int{4, 4}},
		{"full rows, 8 and 2-byte digests", Config{Rows: 4, Cols: 1024, K: 4, Seed: 9}, 40_000, [2]int{8, 2}},
		{"one row, crowded", Config{Rows: 1, Cols: 64, K: 2, Seed: 1}, 2_000, [2]int{2, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, d := pairTraffic(tc.cfg, tc.packets, 3)
			_ = u.SetDigestBytes(tc.widths[0])
			_ = d.SetDigestBytes(tc.widths[1])
			ub, _ := u.MarshalBinary()
			db, _ := d.MarshalBinary()
			u, _ = Decode(ub) // what the collector holds: digests cut to their width
			d, _ = Decode(db)
			pb, err := AppendPair(nil, u, d)
			if err != nil {
				t.Fatal(err)
			}
			if !IsPair(pb) || IsPair(ub) {
				t.Fatal("IsPair does not tell the forms apart")
			}
			pu, pd, err := DecodePair(pb)
			if err != nil {
				t.Fatal(err)
			}
			estimated := 0
			for f := uint64(0); f < 600; f++ {
				want, werr := EstimateFlow(u, d, f, 1, DefaultOptions())
				got, gerr := EstimateFlow(pu, pd, f, 1, DefaultOptions())
				if (werr == nil) != (gerr == nil) || got != want {
					t.Fatalf("flow %d: from the pair form %+v (%v), from the sketches %+v (%v)", f, got, gerr, want, werr)
				}
				if werr == nil {
					estimated++
				}
			}
			if estimated < 20 {
				t.Fatalf("only %d flows estimated: the comparison says little", estimated)
			}
			t.Logf("%d flows estimated; sketches %d + %d bytes, pair form %d (%.0f%%)",
				estimated, len(ub), len(db), len(pb), 100*float64(len(pb))/float64(len(ub)+len(db)))
			if len(pb) >= (len(ub)+len(db))/2 {
				t.Errorf("pair form %d bytes, not under half the sketches' %d", len(pb), len(ub)+len(db))
			}
		})
	}
}

// TestPairEscapedCounts: counts too large for the flags' room travel
// escaped, usable or not.
func TestPairEscapedCounts(t *testing.T) {
	cfg := Config{Rows: 1, Cols: 4, K: 1, Seed: 1}
	u, _ := New(cfg)
	d, _ := New(cfg)
	u.cells[0], d.cells[0] = Cell{SumNS: 5, Count: 1 << 62, Digest: 7}, Cell{SumNS: 9, Count: 1 << 62, Digest: 7}
	u.cells[1], d.cells[1] = Cell{Count: math.MaxUint64, Digest: 1}, Cell{Count: 3, Digest: 1}
	u.cells[2], d.cells[2] = Cell{SumNS: 1, Count: 2, Digest: 4}, Cell{SumNS: 8, Count: 2, Digest: 4}
	b, err := AppendPair(nil, u, d)
	if err != nil {
		t.Fatal(err)
	}
	pu, pd, err := DecodePair(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		up, down uint64
		sum      int64
		usable   bool
	}{{1 << 62, 1 << 62, 4, true}, {math.MaxUint64, 3, 0, false}, {2, 2, 7, true}, {0, 0, 0, false}}
	for i, w := range want {
		a, c := pu.cells[i], pd.cells[i]
		if a.Count != w.up || c.Count != w.down || (c.Digest == a.Digest) != w.usable || w.usable && c.SumNS-a.SumNS != w.sum {
			t.Errorf("cell %d: up %+v down %+v, want %+v", i, a, c, w)
		}
	}
}

// TestPairRejects: what a pair form cannot be is refused, with the field.
func TestPairRejects(t *testing.T) {
	cfg := Config{Rows: 1, Cols: 2, K: 1, Seed: 1}
	head := appendConfig(synopsis.AppendHeader(nil, synopsis.KindLDSPair, pairVersion), cfg)
	u, _ := New(cfg)
	good, _ := AppendPair(nil, u, u)
	other, _ := New(Config{Rows: 1, Cols: 4, K: 1, Seed: 1})
	if _, err := AppendPair(nil, u, other); !errors.Is(err, synopsis.ErrMismatch) {
		t.Errorf("sketches of two shapes: %v", err)
	}
	for _, tc := range []struct {
		name, field string
		b           []byte
	}{
		{"truncated", "cells", good[:len(good)-1]},
		{"trailing", "trailing", append(slices.Clone(good), 0)},
		{"differing counts that are equal", "down count", append(slices.Clone(head), 4<<2|pairDiffers, 4, 0)},
		{"an empty usable cell", "marked as usable", append(slices.Clone(head), pairUsable, 0, 0)},
		{"an escape with a count", "escaped", append(slices.Clone(head), 4<<2|pairEscape, 0)},
		{"an escape's usable flag", "cell usable", append(slices.Clone(head), pairEscape, 1, 1, 2, 0)},
		{"an escaped usable cell of two counts", "counts are equal", append(slices.Clone(head), pairEscape, 1, 2, 1, 0, 0)},
		{"another kind", "expected LDS pair", append([]byte("OWLS\x01"), good[5:]...)},
	} {
		_, _, err := DecodePair(tc.b)
		if !errors.Is(err, synopsis.ErrFormat) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.field)
		}
	}
}

func FuzzDecodePair(f *testing.F) {
	u, d := pairTraffic(Config{Rows: 2, Cols: 8, K: 2, RowSampleLog2: []uint8{1, 0}, Seed: 4}, 60, 1)
	b, _ := AppendPair(nil, u, d)
	f.Add(b)
	huge := appendConfig(synopsis.AppendHeader(nil, synopsis.KindLDSPair, pairVersion), Config{Rows: MaxRows, Cols: MaxCols, K: MaxK, Seed: 1})
	f.Add(huge)
	f.Fuzz(func(t *testing.T, b []byte) {
		var pu, pd *LDS
		var err error
		// A cell takes at least a byte and 2 × 24 decoded.
		if limit := uint64(64*len(b) + 16<<10); synopsistest.Allocated(limit, func() { pu, pd, err = DecodePair(b) }) > limit {
			t.Fatalf("decoding %d bytes allocated over %d", len(b), limit)
		}
		if err != nil && !errors.Is(err, synopsis.ErrFormat) {
			t.Fatalf("%v does not wrap ErrFormat", err)
		}
		// The loop over common cells reads as the field-by-field reader
		// does, and a check takes what decoding takes.
		su, sd, serr := decodePairByField(b)
		if (serr == nil) != (err == nil) || (CheckPair(b) == nil) != (err == nil) {
			t.Fatalf("DecodePair: %v, field by field: %v, CheckPair: %v", err, serr, CheckPair(b))
		}
		if err != nil {
			return
		}
		if !slices.Equal(su.cells, pu.cells) || !slices.Equal(sd.cells, pd.cells) {
			t.Fatal("DecodePair's cells are not those read field by field")
		}
		again, err := AppendPair(nil, pu, pd)
		if err != nil {
			t.Fatal(err)
		}
		au, ad, err := DecodePair(again)
		if err != nil || !slices.Equal(au.cells, pu.cells) || !slices.Equal(ad.cells, pd.cells) {
			t.Fatalf("re-encoded pair form decodes differently: %v", err)
		}
		_, _ = EstimateFlow(pu, pd, 1, 1, DefaultOptions())
	})
}

// decodePairByField is DecodePair with every cell read by readPairCell.
func decodePairByField(b []byte) (up, down *LDS, err error) {
	rd, cfg, err := pairReader(b)
	if err != nil {
		return nil, nil, err
	}
	up, _ = New(cfg)
	down, _ = New(cfg)
	for i := range up.cells {
		if !readPairCell(rd, &up.cells[i], &down.cells[i]) {
			break
		}
	}
	if err := rd.Done(); err != nil {
		return nil, nil, err
	}
	return up, down, nil
}

// TestPairEscapedAmongCommon: escaped cells between common ones, and a
// damaged cell after them, read as field by field.
func TestPairEscapedAmongCommon(t *testing.T) {
	cfg := Config{Rows: 2, Cols: 8, K: 2, RowSampleLog2: []uint8{0, 0}, Seed: 3}
	u, d := pairTraffic(cfg, 200, 2)
	u.cells[3].Count, d.cells[3].Count = 1<<62, 1<<62+5
	u.cells[9].Count, d.cells[9].Count, d.cells[9].Digest = 1<<63, 1<<63, u.cells[9].Digest
	b, err := AppendPair(nil, u, d)
	if err != nil {
		t.Fatal(err)
	}
	pu, pd, err := DecodePair(b)
	su, sd, serr := decodePairByField(b)
	if err != nil || serr != nil || !slices.Equal(pu.cells, su.cells) || !slices.Equal(pd.cells, sd.cells) {
		t.Fatalf("decoded (%v) not as field by field (%v)", err, serr)
	}
	if pu.cells[9].Count != 1<<63 || pd.cells[3].Count != 1<<62+5 {
		t.Errorf("escaped cells read as %d and %d", pu.cells[9].Count, pd.cells[3].Count)
	}
	if err := CheckPair(b); err != nil {
		t.Errorf("CheckPair: %v", err)
	}
	// The last cell marked as differing with equal counts.
	bad := append(b[:len(b):len(b)], 0)
	bad[len(b)-1] = 1<<2 | pairDiffers
	bad = append(bad, 1)
	if _, _, err := DecodePair(bad); err == nil || CheckPair(bad) == nil {
		t.Errorf("a trailing damaged cell was taken: %v", err)
	}
}

// BenchmarkDecodePair reads the pair form of two sketches of 4 × 4,096
// cells that saw 5,000 packets, as a collector stores them.
func BenchmarkDecodePair(b *testing.B) {
	cfg := Config{Rows: 4, Cols: 4096, K: 4, RowSampleLog2: []uint8{6, 3, 0, 0}, Seed: 1}
	u, d := pairTraffic(cfg, 5000, 1)
	p, err := AppendPair(nil, u, d)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := DecodePair(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := CheckPair(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("field-by-field", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := decodePairByField(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
