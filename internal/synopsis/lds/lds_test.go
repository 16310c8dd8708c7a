package lds

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/synopsistest"
)

func TestSingleFlowExact(t *testing.T) {
	cfg := Config{Rows: 4, Cols: 1000, K: 4, Seed: 3}
	up, _ := New(cfg)
	down, _ := New(cfg)
	r := rand.New(rand.NewPCG(1, 1))
	const flow = 0xabcdef
	var sum float64
	for i := 0; i < 500; i++ {
		id, ts := r.Uint64(), r.Int64N(1e9)
		d := 1000 + r.Int64N(100)
		up.Insert(flow, id, ts, 1)
		down.Insert(flow, id, ts+d, 1)
		sum += float64(d)
	}
	est, err := EstimateFlow(up, down, flow, 1, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	// The α rule keeps the cells within 10% of the least loaded: a subset
	// of the packets, so close to the mean but not exactly it.
	if math.Abs(est.MeanNS-sum/500) > 5 || est.UpPackets != 500 || est.Lost != 0 || est.Samples < 100 {
		t.Errorf("estimate %+v, want mean %.3f and 500 packets", est, sum/500)
	}
	if est.StddevNS < 15 || est.StddevNS > 45 { // uniform on 100 ns: σ ≈ 29
		t.Errorf("stddev %.1f", est.StddevNS)
	}
	if _, err := EstimateFlow(up, down, 0x1234, 1, DefaultOptions()); !errors.Is(err, ErrNoCell) {
		t.Errorf("unknown flow: %v", err)
	}
}

// A cell whose counts match but whose packets differ (a lost packet and a
// duplicate, or a packet from the previous epoch) must be left out: the
// digest catches it.
func TestDigestRejectsSwappedPackets(t *testing.T) {
	cfg := Config{Rows: 1, Cols: 1, K: 1, Seed: 1}
	up, _ := New(cfg)
	down, _ := New(cfg)
	up.Insert(7, 100, 500, 1)
	down.Insert(7, 100, 600, 1)
	up.Insert(7, 200, 900_000_000, 1) // lost
	down.Insert(7, 300, 10, 1)        // came from the previous epoch
	if _, err := EstimateFlow(up, down, 7, 1, DefaultOptions()); !errors.Is(err, ErrNoCell) {
		t.Fatalf("cell with swapped packets used: %v", err)
	}
	// So do their low 2 bytes.
	_ = up.SetDigestBytes(2)
	_ = down.SetDigestBytes(2)
	ub, _ := up.MarshalBinary()
	db, _ := down.MarshalBinary()
	u, _ := Decode(ub)
	d, _ := Decode(db)
	if _, err := EstimateFlow(u, d, 7, 1, DefaultOptions()); !errors.Is(err, ErrNoCell) {
		t.Fatalf("2-byte digests: cell with swapped packets used: %v", err)
	}
}

func TestLossAndCounts(t *testing.T) {
	cfg := Config{Rows: 3, Cols: 64, K: 3, Seed: 9}
	up, _ := New(cfg)
	down, _ := New(cfg)
	r := rand.New(rand.NewPCG(2, 2))
	for i := 0; i < 300; i++ {
		id := r.Uint64()
		up.Insert(5, id, 1, 1)
		if i != 0 {
			down.Insert(5, id, 101, 1)
		}
	}
	est, err := EstimateFlow(up, down, 5, 1, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if est.UpPackets != 300 || est.DownPackets != 299 || est.Lost != 1 || est.MeanNS != 100 || est.Usable != 6 {
		t.Errorf("%+v", est)
	}
}

func TestWeights(t *testing.T) {
	cfg := Config{Rows: 2, Cols: 4, K: 1, Seed: 9}
	up, _ := New(cfg)
	down, _ := New(cfg)
	for i := uint64(1); i <= 10; i++ {
		up.Insert(1, i, 0, 25)
		down.Insert(1, i, 300, 25)
	}
	est, err := EstimateFlow(up, down, 1, 25, DefaultOptions())
	if err != nil || est.MeanNS != 300 || est.UpPackets != 10 || est.Samples != 10 {
		t.Errorf("%+v %v", est, err)
	}
}

func TestMergeAndWire(t *testing.T) {
	cfg := DefaultConfig()
	whole, _ := New(cfg)
	a, _ := New(cfg)
	b, _ := New(cfg)
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 5000; i++ {
		f, id, ts := r.Uint64N(100), r.Uint64(), r.Int64N(1e9)
		whole.Insert(f, id, ts, 1)
		if i%2 == 0 {
			a.Insert(f, id, ts, 1)
		} else {
			b.Insert(f, id, ts, 1)
		}
	}
	if err := a.Merge(b); err != nil || !slices.Equal(a.cells, whole.cells) {
		t.Fatal("merge not exact", err)
	}
	bs, _ := whole.MarshalBinary()
	got, err := Decode(bs)
	if err != nil || !slices.Equal(got.cells, whole.cells) || got.cfg.Compatible(cfg) != nil {
		t.Fatal("wire round trip", err)
	}
	whole.SetPacked(true)
	ps, _ := whole.MarshalBinary()
	got, err = Decode(ps)
	if err != nil || !slices.Equal(got.cells, whole.cells) || got.cfg.Compatible(cfg) != nil {
		t.Fatal("packed wire round trip", err)
	}
	t.Logf("%d cells with 5000 packets: %d bytes, %d packed", len(whole.cells), len(bs), len(ps))
	for _, b := range [][]byte{bs, ps} {
		for _, bad := range [][]byte{b[:len(b)-1], append(append([]byte{}, b...), 1), b[:6], nil} {
			if _, err := Decode(bad); !errors.Is(err, synopsis.ErrFormat) {
				t.Errorf("bad input: %v", err)
			}
		}
	}
}

// TestPacked round-trips cells no probe makes (sums at the limits of
// int64, counts wrapped below zero, empty cells with sums) through the
// packed form, and checks that a dense sketch's packed form is smaller.
func TestPacked(t *testing.T) {
	cfg := Config{Rows: 2, Cols: 16, K: 2, RowSampleLog2: []uint8{1, 0}, Seed: 5}
	l, _ := New(cfg)
	odd := []Cell{
		{SumNS: math.MaxInt64, Count: 1, Digest: 1},
		{SumNS: math.MinInt64, Count: math.MaxUint64, Digest: math.MaxUint64},
		{SumNS: -5, Count: 0},
		{SumNS: math.MinInt64, Count: 0},
		{SumNS: 1e15, Count: 1 << 40, Digest: 7},
	}
	copy(l.cells, odd)
	copy(l.cells[cfg.Cols:], odd)
	for _, width := range DigestWidths {
		_ = l.SetDigestBytes(width)
		l.SetPacked(true)
		b, _ := l.MarshalBinary()
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("width %d: %v", width, err)
		}
		want := slices.Clone(l.cells)
		for i := range want {
			want[i].Digest &= math.MaxUint64 >> (64 - 8*width)
		}
		if !slices.Equal(got.cells, want) || got.DigestBytes() != width {
			t.Fatalf("width %d: cells %v, want %v", width, got.cells[:len(odd)], want[:len(odd)])
		}
	}
	dense, _ := New(DefaultConfig())
	r := rand.New(rand.NewPCG(9, 9))
	for range 400_000 {
		dense.Insert(r.Uint64N(20_000), r.Uint64(), r.Int64N(1e9), 1)
	}
	_ = dense.SetDigestBytes(4)
	plain, _ := dense.MarshalBinary()
	dense.SetPacked(true)
	packed, _ := dense.MarshalBinary()
	got, err := Decode(packed)
	want := slices.Clone(dense.cells)
	for i := range want {
		want[i].Digest &= math.MaxUint32
	}
	if err != nil || !slices.Equal(got.cells, want) {
		t.Fatal("dense packed round trip", err)
	}
	cells := float64(len(dense.cells))
	t.Logf("400,000 packets in 4 × 4,096 cells: %.2f bytes a cell plain, %.2f packed", float64(len(plain))/cells, float64(len(packed))/cells)
	if float64(len(packed)) > 0.85*float64(len(plain)) {
		t.Fatalf("packed %d bytes, plain %d: less than 15%% saved", len(packed), len(plain))
	}
}

// Shorter digests (wire version 2) give the per-flow estimates of full
// ones, on their own and against a full-width other side; version 1 stays
// what it was for 8 bytes.
func TestDigestWidths(t *testing.T) {
	cfg := Config{Rows: 4, Cols: 256, K: 4, RowSampleLog2: []uint8{3, 1, 0, 0}, Seed: 5}
	up, _ := New(cfg)
	down, _ := New(cfg)
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 40_000; i++ {
		f, id, ts := r.Uint64N(300), r.Uint64(), r.Int64N(1e9)
		up.Insert(f, id, ts, 1)
		switch {
		case r.IntN(100) == 0: // lost
		case r.IntN(200) == 0: // lost, and a packet of the previous epoch in its place
			down.Insert(f, r.Uint64(), r.Int64N(1e6), 1)
		default:
			down.Insert(f, id, ts+1000+int64(f), 1)
		}
	}
	encode := func(l *LDS, width int) *LDS {
		t.Helper()
		c := l.Clone()
		if err := c.SetDigestBytes(width); err != nil {
			t.Fatal(err)
		}
		b, _ := c.MarshalBinary()
		if want := map[bool]byte{true: 1, false: 2}[width == 8]; b[4] != want {
			t.Fatalf("%d-byte digests in wire version %d, want %d", width, b[4], want)
		}
		d, err := Decode(b)
		if err != nil || d.DigestBytes() != width {
			t.Fatalf("%d-byte digests: decoded %v bytes, %v", width, d.DigestBytes(), err)
		}
		t.Logf("%d-byte digests: %d bytes", width, len(b))
		return d
	}
	full := [2]*LDS{encode(up, 8), encode(down, 8)}
	for _, pair := range [][2]int{{4, 4}, {2, 2}, {8, 2}, {4, 8}} {
		u, d := encode(up, pair[0]), encode(down, pair[1])
		for f := uint64(0); f < 300; f++ {
			want, werr := EstimateFlow(full[0], full[1], f, 1, DefaultOptions())
			got, gerr := EstimateFlow(u, d, f, 1, DefaultOptions())
			if (werr == nil) != (gerr == nil) || got != want {
				t.Fatalf("digests of %v bytes, flow %d: %+v (%v), full digests %+v (%v)", pair, f, got, gerr, want, werr)
			}
		}
	}
	for _, w := range []int{0, 1, 3, 16} {
		if err := up.SetDigestBytes(w); err == nil {
			t.Errorf("a digest of %d bytes accepted", w)
		}
	}
	// Version 2 names 2 or 4; anything else is refused.
	l := up.Clone()
	_ = l.SetDigestBytes(2)
	b, _ := l.MarshalBinary()
	at := bytes.Index(b, binary.LittleEndian.AppendUint64(nil, cfg.Seed)) + 8
	for _, w := range []byte{0, 3, 8} {
		bad := slices.Clone(b)
		bad[at] = w
		if _, err := Decode(bad); !errors.Is(err, synopsis.ErrFormat) || !strings.Contains(err.Error(), "digest bytes") {
			t.Errorf("version 2 with %d-byte digests: %v", w, err)
		}
	}
}

func TestSize(t *testing.T) {
	// The paper's example (§3): 146,000 flows, 4.2% of them large, k = 1,
	// ε = e^-4.2: R = 4 and about 70,000 counters.
	rows, cols, err := Size(146_000, 6125.0/146_000, math.Exp(-4.2), 1)
	if err != nil || rows != 4 || rows*cols < 65_000 || rows*cols > 75_000 {
		t.Errorf("Size = %d × %d, %v", rows, cols, err)
	}
	if _, _, err := Size(0, 0.1, 0.01, 1); err == nil {
		t.Error("zero flows accepted")
	}
}

func FuzzDecode(f *testing.F) {
	l, _ := New(Config{Rows: 2, Cols: 8, K: 2, RowSampleLog2: []uint8{1, 0}, Seed: 4})
	for i := uint64(0); i < 30; i++ {
		l.Insert(i%5, i*0x9e3779b97f4a7c15, int64(i), 1)
	}
	b, _ := l.MarshalBinary()
	f.Add(b)
	// A header announcing the most cells the limits allow, and no cell.
	huge := append(synopsis.AppendHeader(nil, synopsis.KindLDS, version), MaxRows)
	huge = append(binary.AppendUvarint(huge, MaxCols), MaxK, 0)
	f.Add(binary.LittleEndian.AppendUint64(huge, 4))
	_ = l.SetDigestBytes(2)
	short, _ := l.MarshalBinary()
	f.Add(short)
	l.SetPacked(true)
	packed, _ := l.MarshalBinary()
	f.Add(packed)
	sparse, _ := New(Config{Rows: 2, Cols: 64, K: 2, RowSampleLog2: []uint8{2, 0}, Seed: 4})
	for i := uint64(0); i < 5; i++ {
		sparse.Insert(i, i*0x9e3779b97f4a7c15, int64(i), 1)
	}
	sparse.SetPacked(true)
	sparseB, _ := sparse.MarshalBinary()
	f.Add(sparseB)
	hugePacked := append(synopsis.AppendHeader(nil, synopsis.KindLDS, versionPacked), MaxRows)
	hugePacked = append(binary.AppendUvarint(hugePacked, MaxCols), MaxK, 0)
	f.Add(append(binary.LittleEndian.AppendUint64(hugePacked, 4), 4))
	f.Fuzz(func(t *testing.T, b []byte) {
		var l *LDS
		var cfg Config
		var err, cerr error
		// A cell takes at least 2 bytes on the wire (2 bits packed)
		// and 24 decoded; Check keeps none.
		perByte := 16
		if len(b) > 4 && b[4] == versionPacked {
			perByte = 4 * 24
		}
		if limit := uint64(perByte*len(b) + 16<<10); synopsistest.Allocated(limit, func() { l, err = Decode(b) }) > limit {
			t.Fatalf("decoding %d bytes allocated over %d", len(b), limit)
		}
		if limit := uint64(16 << 10); synopsistest.Allocated(limit, func() { cfg, cerr = Check(b) }) > limit {
			t.Fatalf("checking %d bytes allocated over %d", len(b), limit)
		}
		if (err == nil) != (cerr == nil) || err == nil && !reflect.DeepEqual(cfg, l.Config()) {
			t.Fatalf("Check says %v, %v; Decode %v", cfg, cerr, err)
		}
		// Packed cells read inline and field by field: the same.
		slowCells = true
		ls, serr0 := Decode(b)
		slowCells = false
		if (err == nil) != (serr0 == nil) || err == nil && !slices.Equal(ls.cells, l.cells) {
			t.Fatalf("read field by field: %v; inline: %v, or other cells", serr0, err)
		}
		// Shape is the weaker check: what decodes has its shape.
		var scfg Config
		var serr error
		if limit := uint64(16 << 10); synopsistest.Allocated(limit, func() { scfg, serr = Shape(b) }) > limit {
			t.Fatalf("reading the shape of %d bytes allocated over %d", len(b), limit)
		}
		if err == nil && (serr != nil || !reflect.DeepEqual(scfg, cfg)) {
			t.Fatalf("Shape says %v, %v of a sketch of %v", scfg, serr, cfg)
		}
		if serr != nil && !errors.Is(serr, synopsis.ErrFormat) {
			t.Fatalf("%v does not wrap ErrFormat", serr)
		}
		if err != nil {
			if !errors.Is(err, synopsis.ErrFormat) {
				t.Fatalf("%v does not wrap ErrFormat", err)
			}
			return
		}
		again, _ := l.MarshalBinary()
		l2, err := Decode(again)
		if err != nil || !slices.Equal(l2.cells, l.cells) {
			t.Fatal("re-encoded form decodes differently")
		}
		_, _ = EstimateFlow(l, l, 1, 1, DefaultOptions())
	})
}

// BenchmarkInsert inserts packets into an LDS whose rows take every
// packet, and into one with the default rows (sampling 1/64, 1/8, 1/2
// and all of the packets).
func BenchmarkInsert(b *testing.B) {
	ids := make([]uint64, 1<<16)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range ids {
		ids[i] = r.Uint64()
	}
	for name, cfg := range map[string]Config{"rows=all": {Rows: 4, Cols: 4096, K: 4, Seed: 1}, "rows=default": DefaultConfig()} {
		b.Run(name, func(b *testing.B) {
			l, _ := New(cfg)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := ids[i&(len(ids)-1)]
				l.Insert(id>>50, id, int64(i), 1)
			}
		})
	}
}

func TestReset(t *testing.T) {
	cfg := Config{Rows: 2, Cols: 64, K: 2, Seed: 3}
	l, _ := New(cfg)
	for i := range uint64(100) {
		l.Insert(i%7, i, int64(i), 1)
	}
	l.Reset()
	empty, _ := New(cfg)
	a, _ := l.MarshalBinary()
	b, _ := empty.MarshalBinary()
	if !bytes.Equal(a, b) {
		t.Error("a reset sketch differs from a new one")
	}
}

// TestUnmarshalReuses decodes sketches into one LDS, each over a fuller
// one: the cells come out as Decode's (digests of emptied cells cleared),
// the cells' memory is reused, and a failed decode leaves no cells.
func TestUnmarshalReuses(t *testing.T) {
	cfg := DefaultConfig()
	full, _ := New(cfg)
	sparse, _ := New(cfg)
	r := rand.New(rand.NewPCG(5, 5))
	for i := range 20_000 {
		f, id, ts := r.Uint64N(100), r.Uint64(), r.Int64N(1e9)
		full.Insert(f, id, ts, 1)
		if i < 50 {
			sparse.Insert(f, id, ts, 1)
		}
	}
	fullB, _ := full.MarshalBinary()
	sparseB, _ := sparse.MarshalBinary()
	var l LDS
	if err := l.UnmarshalBinary(fullB); err != nil || !slices.Equal(l.cells, full.cells) {
		t.Fatalf("full sketch: %v", err)
	}
	first := &l.cells[0]
	if err := l.UnmarshalBinary(sparseB); err != nil || !slices.Equal(l.cells, sparse.cells) {
		t.Fatalf("sparse sketch over a full one: %v", err)
	}
	if &l.cells[0] != first {
		t.Error("the cells were allocated again")
	}
	if l.Config().Compatible(cfg) != nil {
		t.Errorf("config %+v", l.Config())
	}
	if err := l.UnmarshalBinary(fullB[:len(fullB)/2]); !errors.Is(err, synopsis.ErrFormat) || len(l.cells) != 0 {
		t.Fatalf("truncated: %v, %d cells left", err, len(l.cells))
	}
	if err := l.UnmarshalBinary(fullB); err != nil || !slices.Equal(l.cells, full.cells) {
		t.Fatalf("after a failure: %v", err)
	}
}

// TestDecodeCellErrors cuts a sketch within its cells: the error names
// the field and byte it stopped at, as field-by-field reading does, for
// Decode and Check alike; a varint of more than 64 bits is refused.
func TestDecodeCellErrors(t *testing.T) {
	empty, _ := New(Config{Rows: 1, Cols: 4, K: 1, Seed: 2})
	b, _ := empty.MarshalBinary()
	head := len(b) - 4*2 // four empty cells of two bytes
	b = binary.AppendVarint(b[:head], 1<<40)
	sumLen := len(b) - head
	b = binary.AppendUvarint(b, 1)
	b = binary.LittleEndian.AppendUint64(b, 0xfeed)
	b = append(b, 0, 0, 0, 0, 0, 0)
	if l, err := Decode(b); err != nil || l.cells[0] != (Cell{SumNS: 1 << 40, Count: 1, Digest: 0xfeed}) {
		t.Fatalf("whole: %v", err)
	}
	for cut := head + 8; cut < len(b); cut++ {
		want := fmt.Sprintf("cell digest at byte %d: truncated", head+sumLen+1)
		if at := head + sumLen + 9; cut >= at {
			field := [2]string{"cell sum", "cell count"}[(cut-at)%2]
			want = fmt.Sprintf("%s at byte %d: truncated", field, cut)
		}
		_, err := Decode(b[:cut])
		_, cerr := Check(b[:cut])
		if !errors.Is(err, synopsis.ErrFormat) || !strings.Contains(err.Error(), want) || cerr == nil || err.Error() != cerr.Error() {
			t.Fatalf("cut at %d: Decode %v, Check %v; want %q", cut, err, cerr, want)
		}
	}
	over := append(slices.Clone(b[:head+sumLen]), bytes.Repeat([]byte{0xff}, 10)...)
	over = append(over, make([]byte, 16)...)
	if _, err := Decode(over); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("cell count at byte %d: varint overflows", head+sumLen)) {
		t.Errorf("overlong count: %v", err)
	}
}

// TestSkipVarint: skipVarint measures what binary.Varint reads, and
// fails where it fails.
func TestSkipVarint(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	cases := [][]byte{nil, {0x80}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
		bytes.Repeat([]byte{0x80}, 11), bytes.Repeat([]byte{0x80}, 10)}
	for range 2000 {
		b := binary.AppendVarint(nil, int64(r.Uint64())>>r.IntN(64))
		cases = append(cases, b, b[:len(b)-1], append(b, 7))
	}
	for _, b := range cases {
		if _, want := binary.Varint(b); skipVarint(b) != want {
			t.Fatalf("% x: skipVarint %d, binary.Varint %d", b, skipVarint(b), want)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	l, _ := New(Config{Rows: 4, Cols: 512, K: 4, Seed: 1})
	r := rand.New(rand.NewPCG(1, 1))
	for range 5000 {
		l.Insert(r.Uint64N(100), r.Uint64(), r.Int64N(1e9), 1)
	}
	_ = l.SetDigestBytes(4)
	w, _ := l.MarshalBinary()
	b.SetBytes(int64(len(w)))
	for b.Loop() {
		if _, err := Check(w); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStandardErrorAgainstTruth: StddevNS/√Observed is the standard error
// of a flow's mean from sampling alone. Every packet's delay is drawn
// alike (colliding flows add no bias), and each flow's estimate is
// compared with the true mean of its delivered packets: the errors, in
// standard errors, have an rms about 1 and none is far out. The same
// errors in units of StddevNS/√Samples (the count scaled back from the
// rows' sampling) reached 8 standard errors without loss and 23 with 1%.
func TestStandardErrorAgainstTruth(t *testing.T) {
	for _, loss := range []float64{0, 0.01} {
		var zs []float64
		for trial := range 30 {
			cfg := Config{Rows: 4, Cols: 1024, K: 4, RowSampleLog2: []uint8{6, 3, 1, 0}, Seed: uint64(trial + 1)}
			up, _ := New(cfg)
			down, _ := New(cfg)
			r := rand.New(rand.NewPCG(uint64(trial), 9))
			type acc struct{ n, sum, sq float64 }
			truth := map[uint64]*acc{}
			for range 60_000 {
				f := uint64(math.Floor(math.Exp(r.Float64() * math.Log(300))))
				id, ts := r.Uint64(), r.Int64N(1e9)
				up.Insert(f, id, ts, 1)
				if r.Float64() < loss {
					continue
				}
				d := int64(1e6 + 3e5*r.NormFloat64())
				down.Insert(f, id, ts+d, 1)
				a := truth[f]
				if a == nil {
					a = &acc{}
					truth[f] = a
				}
				a.n, a.sum, a.sq = a.n+1, a.sum+float64(d), a.sq+float64(d)*float64(d)
			}
			for f, a := range truth {
				est, err := EstimateFlow(up, down, f, 1, DefaultOptions())
				if a.n < 300 || err != nil {
					continue
				}
				if est.Observed <= 0 || est.Observed > est.Samples {
					t.Fatalf("flow %d: %v packets observed, %v samples", f, est.Observed, est.Samples)
				}
				m := a.sum / a.n
				sd := math.Sqrt(a.sq/a.n - m*m)
				zs = append(zs, (est.MeanNS-m)/(sd/math.Sqrt(est.Observed)))
			}
		}
		var s2, worst float64
		for _, z := range zs {
			s2, worst = s2+z*z, max(worst, math.Abs(z))
		}
		rms := math.Sqrt(s2 / float64(len(zs)))
		t.Logf("loss %.2f: %d flow-epochs, errors of rms %.2f, worst %.2f standard errors", loss, len(zs), rms, worst)
		if len(zs) < 500 || rms > 1.2 || worst > 5 {
			t.Errorf("loss %.2f: %d flow-epochs, errors of rms %.2f and worst %.2f standard errors, want rms ≤ 1.2 and none beyond 5", loss, len(zs), rms, worst)
		}
	}
}

// BenchmarkDecode decodes a busy path's sketch (2 × 4,096 cells, 500,000
// packets) in the plain and the packed wire forms, and, packed, one of
// the default shape that saw an epoch of 5,000 packets (owl-load's).
func BenchmarkDecode(b *testing.B) {
	sparse, _ := New(DefaultConfig())
	rs := rand.New(rand.NewPCG(9, 9))
	for range 5_000 {
		sparse.Insert(rs.Uint64N(100), rs.Uint64(), rs.Int64N(1e9), 1)
	}
	sparse.SetPacked(true)
	sw, _ := sparse.MarshalBinary()
	b.Run("sparse/packed=true", func(b *testing.B) {
		reuse, _ := Decode(sw)
		b.SetBytes(int64(len(sw)))
		for b.Loop() {
			if err := reuse.UnmarshalBinary(sw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode/sparse/packed=true", func(b *testing.B) {
		buf := make([]byte, 0, 1<<20)
		for b.Loop() {
			buf, _ = sparse.AppendBinary(buf[:0])
		}
	})
	cfg, _ := DefaultConfig().Select(0b1100)
	l, _ := New(cfg)
	r := rand.New(rand.NewPCG(9, 9))
	for range 500_000 {
		l.Insert(r.Uint64N(50_000), r.Uint64(), r.Int64N(1e9), 1)
	}
	_ = l.SetDigestBytes(4)
	for _, packed := range []bool{false, true} {
		l.SetPacked(packed)
		wire, _ := l.MarshalBinary()
		b.Run(fmt.Sprintf("packed=%v", packed), func(b *testing.B) {
			var reuse *LDS
			b.SetBytes(int64(len(wire)))
			for b.Loop() {
				if reuse == nil {
					reuse, _ = Decode(wire)
				} else if err := reuse.UnmarshalBinary(wire); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("encode/packed=%v", packed), func(b *testing.B) {
			buf := make([]byte, 0, 1<<20)
			for b.Loop() {
				buf, _ = l.AppendBinary(buf[:0])
			}
		})
	}
}

// BenchmarkEstimateFlow estimates one flow of 200 over a pair of sketches
// of the default shape with 1% loss (a collector does this for each top
// flow of each path-epoch).
func BenchmarkEstimateFlow(b *testing.B) {
	up, _ := New(DefaultConfig())
	down, _ := New(DefaultConfig())
	r := rand.New(rand.NewPCG(4, 4))
	for range 200_000 {
		f, id, t := r.Uint64N(200), r.Uint64(), r.Int64N(1e9)
		up.Insert(f, id, t, 1)
		if r.Float64() >= 0.01 {
			down.Insert(f, id, t+1e5, 1)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := EstimateFlow(up, down, uint64(i%200), 1, DefaultOptions()); err != nil && !errors.Is(err, ErrNoCell) {
			b.Fatal(err)
		}
	}
}

// TestPackedIntoUsedCells: a sparse packed sketch decoded into the cells
// of a busy one (a collector's reused sketches) reads as decoded afresh:
// its runs of empty cells clear what was there.
func TestPackedIntoUsedCells(t *testing.T) {
	cfg := Config{Rows: 2, Cols: 512, K: 2, RowSampleLog2: []uint8{4, 0}, Seed: 5}
	busy, _ := New(cfg)
	sparse, _ := New(cfg)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		busy.Insert(r.Uint64N(300), r.Uint64(), r.Int64N(1e9), 1)
		if i%100 == 0 {
			sparse.Insert(r.Uint64N(300), r.Uint64(), r.Int64N(1e9), 1)
		}
	}
	busy.SetPacked(true)
	sparse.SetPacked(true)
	bw, _ := busy.MarshalBinary()
	sw, _ := sparse.MarshalBinary()
	reused, err := Decode(bw)
	if err != nil {
		t.Fatal(err)
	}
	if err := reused.UnmarshalBinary(sw); err != nil {
		t.Fatal(err)
	}
	fresh, _ := Decode(sw)
	if !slices.Equal(reused.cells, fresh.cells) || !slices.Equal(fresh.cells, sparse.cells) {
		t.Error("the sparse sketch read into used cells differs from it")
	}
}

// TestPackedEmptyCellsOfLongCodes: empty cells longer than a Peek (a
// count order of 56: 58 zero bits each) read one by one, as the form
// says, and do not stop the reading.
func TestPackedEmptyCellsOfLongCodes(t *testing.T) {
	w := synopsis.BitWriter{}
	w.Bits(56, 6) // count order
	w.Bits(0, 6)  // residual order
	w.Bits(0, 64) // center
	for range 3 {
		w.ExpGolomb(0, 56)
		w.ExpGolomb(0, 0)
	}
	b := w.Done()
	done := make(chan bool, 1)
	cells := make([]Cell, 3)
	go func() { done <- readPacked(b, cells, 1, 3, 2) }()
	select {
	case ok := <-done:
		if !ok || cells[0] != (Cell{}) || cells[2] != (Cell{}) {
			t.Errorf("read %v: %v", ok, cells)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading three long empty cells did not end")
	}
}
