package lda

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/synopsistest"
)

// pair fills an upstream and a downstream LDA with n packets of the given
// delays; lost[i] drops packet i downstream.
func pair(t testing.TB, cfg Config, n int, delay func(i int) int64, lost func(i int) bool) (*LDA, *LDA, float64) {
	t.Helper()
	up, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	down, _ := New(cfg)
	r := rand.New(rand.NewPCG(1, 2))
	var sum float64
	var delivered int
	for i := 0; i < n; i++ {
		id := r.Uint64()
		ts := int64(i) * 1000
		up.Insert(id, ts)
		if lost != nil && lost(i) {
			continue
		}
		d := delay(i)
		down.Insert(id, ts+d)
		sum += float64(d)
		delivered++
	}
	return up, down, sum / float64(delivered)
}

func TestEstimateNoLossIsExact(t *testing.T) {
	cfg := DefaultConfig()
	up, down, mean := pair(t, cfg, 20000, func(i int) int64 { return 1000 + int64(i%977) }, nil)
	est, err := EstimatePair(up, down, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(est.MeanNS-mean) > 1e-9*mean {
		t.Errorf("mean %.6f, want %.6f", est.MeanNS, mean)
	}
	if est.Samples != 20000 || est.UpPackets != 20000 || est.DownPackets != 20000 || est.LostPackets != 0 {
		t.Errorf("counts %+v", est)
	}
}

func TestEstimateSkipsRowsWithLoss(t *testing.T) {
	cfg := DefaultConfig()
	// Lost packets would have had an enormous delay: if a row with a loss
	// were used, the mean would be far off.
	lost := func(i int) bool { return i%100 == 7 }
	up, down, mean := pair(t, cfg, 20000, func(i int) int64 { return 5000 }, lost)
	est, err := EstimatePair(up, down, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if est.MeanNS != mean {
		t.Errorf("mean %.3f, want exactly %.3f", est.MeanNS, mean)
	}
	if est.LostPackets != 200 {
		t.Errorf("lost %.1f, want 200", est.LostPackets)
	}
	if est.Samples >= 19800 || est.Samples < 15000 {
		t.Errorf("effective sample size %d for 19800 delivered with 200 lost over 2048 rows", est.Samples)
	}
	if est.StddevNS > 1e-6 {
		t.Errorf("stddev %.3f of a constant delay", est.StddevNS)
	}
}

func TestSamplingBanks(t *testing.T) {
	cfg := Config{Rows: 64, BankSampleLog2: []uint8{2, 5}, Seed: 9}
	l, _ := New(cfg)
	r := rand.New(rand.NewPCG(3, 4))
	const n = 1 << 18
	for i := 0; i < n; i++ {
		l.Insert(r.Uint64(), 1)
	}
	var banks [2]uint64
	for j := range banks {
		for _, c := range l.cells[j*cfg.Rows : (j+1)*cfg.Rows] {
			banks[j] += c.count
		}
	}
	for j, want := range []float64{1.0/4 - 1.0/32, 1.0 / 32} {
		if got := float64(banks[j]) / n; math.Abs(got-want) > 0.1*want {
			t.Errorf("bank %d sampled %.4f of packets, want %.4f", j, got, want)
		}
		if p := cfg.BankProbability(j); math.Abs(p-want) > 1e-12 {
			t.Errorf("BankProbability(%d) = %g, want %g", j, p, want)
		}
	}
	if cfg.SampledFraction() != 0.25 {
		t.Errorf("sampled fraction %g", cfg.SampledFraction())
	}
}

func TestStddevEstimators(t *testing.T) {
	// Delays uniform in [base, base+w): σ = w/√12. A large base makes the
	// paper's estimator noisy (it squares whole delays) but not the
	// centered one.
	const w = 100_000
	want := w / math.Sqrt(12)
	for _, base := range []int64{0, 1_000_000} {
		r := rand.New(rand.NewPCG(5, uint64(base)))
		delays := make([]int64, 50000)
		for i := range delays {
			delays[i] = base + r.Int64N(w)
		}
		up, down, _ := pair(t, DefaultConfig(), len(delays), func(i int) int64 { return delays[i] }, func(i int) bool { return i%200 == 0 })
		centered, _ := EstimatePair(up, down, DefaultOptions())
		collapsed, _ := EstimatePair(up, down, Options{Bounds: DefaultDelayBounds(), Stddev: StddevCollapsed})
		ce := math.Abs(centered.StddevNS-want) / want
		pe := math.Abs(collapsed.StddevNS-want) / want
		t.Logf("base %d: centered %.0f (err %.2f%%), collapsed %.0f (err %.2f%%), want %.0f", base, centered.StddevNS, 100*ce, collapsed.StddevNS, 100*pe, want)
		if ce > 0.05 {
			t.Errorf("base %d: centered stddev off by %.1f%%", base, 100*ce)
		}
		if base == 0 && pe > 0.10 {
			t.Errorf("collapsed stddev off by %.1f%% with no base delay", 100*pe)
		}
	}
}

// A row that holds a lost packet and a packet the upstream side never saw
// in this epoch has matching counts; its timestamp sums are off by up to an
// epoch. The delay bounds keep it out.
func TestDelayBoundsRejectSwappedRows(t *testing.T) {
	cfg := Config{Rows: 2, BankSampleLog2: []uint8{0}, Seed: 1}
	up, _ := New(cfg)
	down, _ := New(cfg)
	// Find two IDs in the same row.
	var ids []uint64
	row0 := -1
	for id := uint64(1); len(ids) < 3; id++ {
		h := synopsis.Hash(id, cfg.Seed)
		r := int((uint64(uint32(h)) * 2) >> 32)
		if row0 < 0 {
			row0 = r
		}
		if r == row0 {
			ids = append(ids, id)
		}
	}
	up.Insert(ids[0], 100_000)
	down.Insert(ids[0], 110_000)
	up.Insert(ids[1], 900_000_000) // lost near the end of the epoch
	down.Insert(ids[2], 5_000)     // sent in the previous epoch
	est, err := EstimatePair(up, down, DefaultOptions())
	if !errors.Is(err, ErrNoSamples) || est.Samples != 0 {
		t.Fatalf("swapped row used: %+v, %v", est, err)
	}
	wide := DefaultOptions()
	wide.Bounds = DelayBounds{MinNS: math.MinInt64 / 4, MaxNS: math.MaxInt64 / 4}
	if est, _ := EstimatePair(up, down, wide); est.Samples != 2 {
		t.Fatalf("without bounds the swapped row should count: %+v", est)
	}
}

func TestMergeIsExact(t *testing.T) {
	cfg := DefaultConfig()
	whole, _ := New(cfg)
	shards := []*LDA{}
	for range 3 {
		s, _ := New(cfg)
		shards = append(shards, s)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 10000; i++ {
		id, ts := r.Uint64(), r.Int64N(1e9)
		whole.Insert(id, ts)
		shards[i%3].Insert(id, ts)
	}
	for _, s := range shards[1:] {
		if err := shards[0].Merge(s); err != nil {
			t.Fatal(err)
		}
	}
	for i := range whole.cells {
		if whole.cells[i] != shards[0].cells[i] {
			t.Fatalf("cell %d: merged %+v, whole %+v", i, shards[0].cells[i], whole.cells[i])
		}
	}
	other := cfg
	other.Seed++
	o, _ := New(other)
	if err := whole.Merge(o); !errors.Is(err, synopsis.ErrMismatch) {
		t.Errorf("merge of another seed: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{Rows: 0, BankSampleLog2: []uint8{0}},
		{Rows: 3, BankSampleLog2: []uint8{0}},
		{Rows: MaxRows + 2, BankSampleLog2: []uint8{0}},
		{Rows: 8},
		{Rows: 8, BankSampleLog2: []uint8{3, 3}},
		{Rows: 8, BankSampleLog2: []uint8{0, 64}},
		{Rows: 8, BankSampleLog2: make([]uint8, MaxBanks+1)},
	}
	for _, c := range bad {
		if _, err := New(c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

func TestWireRoundTrip(t *testing.T) {
	up, _, _ := pair(t, DefaultConfig(), 5000, func(i int) int64 { return 10 }, nil)
	b, err := up.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.cfg.Compatible(up.cfg); err != nil {
		t.Fatal(err)
	}
	for i := range up.cells {
		if up.cells[i] != got.cells[i] {
			t.Fatalf("cell %d differs", i)
		}
	}
	t.Logf("%d packets: %d bytes on the wire for %d cells", 5000, len(b), len(up.cells))
}

func TestDecodeRejects(t *testing.T) {
	l, _, _ := pair(t, Config{Rows: 16, BankSampleLog2: []uint8{0, 2}, Seed: 3}, 100, func(int) int64 { return 1 }, nil)
	good, _ := l.MarshalBinary()
	huge := append([]byte{}, good[:5]...)
	huge = append(huge, 0xff, 0xff, 0xff, 0x7f) // rows far beyond MaxRows
	manyBanks := append([]byte{}, good...)
	manyBanks[6] = 200
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"header only", good[:5]},
		{"bad magic", append([]byte("XWL"), good[3:]...)},
		{"other kind", append([]byte("OWLR"), good[4:]...)},
		{"future version", append([]byte("OWLL\x09"), good[5:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(append([]byte{}, good...), 0)},
		{"oversized rows", huge},
		{"too many banks", manyBanks},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Decode(tt.b); !errors.Is(err, synopsis.ErrFormat) {
				t.Errorf("got %v, want a format error", err)
			}
		})
	}
}

func TestEstimateRejectsMismatch(t *testing.T) {
	a, _ := New(DefaultConfig())
	c := DefaultConfig()
	c.Rows = 512
	b, _ := New(c)
	if _, err := EstimatePair(a, b, DefaultOptions()); !errors.Is(err, synopsis.ErrMismatch) {
		t.Errorf("got %v, want a mismatch", err)
	}
}

func FuzzDecode(f *testing.F) {
	l, _, _ := pair(f, Config{Rows: 8, BankSampleLog2: []uint8{0, 3}, Seed: 3}, 50, func(int) int64 { return 1 }, nil)
	good, _ := l.MarshalBinary()
	f.Add(good)
	f.Add(good[:7])
	d, _, _ := pair(f, DefaultConfig(), 300, func(int) int64 { return 1 }, nil)
	big, _ := d.MarshalBinary()
	f.Add(big)
	// A header announcing the most cells the limits allow, and no cell.
	huge := synopsis.AppendHeader(nil, synopsis.KindLDA, version)
	huge = binary.AppendUvarint(huge, MaxRows)
	huge = append(huge, MaxBanks, 0, 1, 2, 3, 4, 5, 6, 7)
	f.Add(binary.LittleEndian.AppendUint64(huge, 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		var l *LDA
		var err error
		// A cell takes at least 2 bytes on the wire and 16 decoded.
		if limit := uint64(16*len(b) + 16<<10); synopsistest.Allocated(limit, func() { l, err = Decode(b) }) > limit {
			t.Fatalf("decoding %d bytes allocated over %d", len(b), limit)
		}
		if err != nil {
			if !errors.Is(err, synopsis.ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		// What decodes re-encodes to a form that decodes to the same.
		again, _ := l.MarshalBinary()
		l2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded form rejected: %v", err)
		}
		if err := l2.cfg.Compatible(l.cfg); err != nil || !slices.Equal(l2.cells, l.cells) {
			t.Fatalf("re-encoded form decodes differently")
		}
		// Into a used LDA of more cells and other banks (a collector's
		// reused ones): the same LDA, nothing left of what it held.
		reused, _ := New(Config{Rows: 512, BankSampleLog2: []uint8{0, 1, 2}, Seed: 9})
		for i := range reused.cells {
			reused.cells[i] = cell{sumNS: 5, count: 1}
		}
		if err := reused.UnmarshalBinary(b); err != nil || !slices.Equal(reused.cells, l.cells) ||
			reused.cfg.Compatible(l.cfg) != nil || reused.bankOf != l.bankOf {
			t.Fatalf("decoded into a used LDA: %v, not what Decode gives", err)
		}
		_, _ = EstimatePair(l, l, DefaultOptions())
	})
}

func BenchmarkInsert(b *testing.B) {
	l, _ := New(DefaultConfig())
	ids := make([]uint64, 1<<16)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range ids {
		ids[i] = r.Uint64()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.Insert(ids[i&(len(ids)-1)], int64(i))
	}
}

func BenchmarkEstimate(b *testing.B) {
	up, down, _ := pair(b, DefaultConfig(), 100000, func(i int) int64 { return int64(i % 1000) }, func(i int) bool { return i%100 == 0 })
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, _ = EstimatePair(up, down, DefaultOptions())
	}
}

// BenchmarkDecode: an epoch of 5,000 packets, as a collector decodes
// each report's LDA.
func BenchmarkDecode(b *testing.B) {
	up, _, _ := pair(b, DefaultConfig(), 5000, func(i int) int64 { return int64(i) * 200_000 }, func(int) bool { return false })
	w, _ := up.MarshalBinary()
	b.SetBytes(int64(len(w)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(w); err != nil {
			b.Fatal(err)
		}
	}
}

// An LDA sized by RowsFor to an epoch's loss keeps at least the share of
// its packets the rule promises (e^(−1/2), three fifths, at the sized
// difference) usable, and its mean stays within a few standard errors of
// the delivered packets' true mean, from 1 to 500 losses in 100,000
// packets.
func TestRowsForKeepsMostPacketsUsable(t *testing.T) {
	const n = 100_000
	for _, d := range []int{1, 10, 100, 500} {
		cfg := DefaultConfig()
		cfg.Rows = RowsFor(d, 32, 1024)
		r := rand.New(rand.NewPCG(uint64(d), 3))
		lost := map[int]bool{}
		for len(lost) < d {
			lost[r.IntN(n)] = true
		}
		delays := make([]int64, n)
		for i := range delays {
			delays[i] = 20_000 + int64(r.ExpFloat64()*5_000) // ≈ 5 µs of spread
		}
		up, down, mean := pair(t, cfg, n, func(i int) int64 { return delays[i] }, func(i int) bool { return lost[i] })
		est, err := EstimatePair(up, down, DefaultOptions())
		if err != nil {
			t.Fatalf("%d lost, %d rows: %v", d, cfg.Rows, err)
		}
		usable := float64(est.Samples) / float64(n-d)
		if usable < math.Exp(-0.5) {
			t.Errorf("%d lost, %d rows: %.2f of the packets usable, want at least %.2f", d, cfg.Rows, usable, math.Exp(-0.5))
		}
		if se := 5_000 / math.Sqrt(float64(est.Samples)); math.Abs(est.MeanNS-mean) > 4*se {
			t.Errorf("%d lost, %d rows: mean %.1f ns, true %.1f (standard error %.1f)", d, cfg.Rows, est.MeanNS, mean, se)
		}
		t.Logf("%d lost: %d rows, %.3f usable, mean error %.2f ns", d, cfg.Rows, usable, est.MeanNS-mean)
	}
}
