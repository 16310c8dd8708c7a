package reconcile

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// epochCase is one side pair of an epoch with known truth.
type epochCase struct {
	up, down     *rda.RDA
	upTS, downTS map[uint64]int64 // what each probe's cache holds
	lost, extra  []uint64
	meanNS       float64 // over packets both sides saw
	stdNS        float64
}

// weibullNS draws a delay: 20 µs + Weibull(shape 0.65, scale 50 µs).
func weibullNS(r *rand.Rand) int64 {
	return 20_000 + int64(50_000*math.Pow(-math.Log(1-r.Float64()), 1/0.65))
}

// makeCase builds n common packets, lost packets only upstream and extra
// packets only downstream (sent in the previous epoch, seen early in this one).
func makeCase(t testing.TB, cfg rda.Config, n, lost, extra int, seed uint64) epochCase {
	r := rand.New(rand.NewPCG(seed, 99))
	c := epochCase{upTS: map[uint64]int64{}, downTS: map[uint64]int64{}}
	c.up, _ = rda.New(cfg)
	c.down, _ = rda.New(cfg)
	var sum, sq float64
	for i := 0; i < n+lost; i++ {
		id, ts := r.Uint64(), r.Int64N(999_000_000)
		c.up.Insert(id, ts)
		c.upTS[id] = ts
		if i >= n {
			c.lost = append(c.lost, id)
			continue
		}
		d := weibullNS(r)
		c.down.Insert(id, ts+d)
		c.downTS[id] = ts + d
		sum += float64(d)
		sq += float64(d) * float64(d)
	}
	for i := 0; i < extra; i++ {
		id, ts := r.Uint64(), r.Int64N(300_000)
		c.down.Insert(id, ts)
		c.downTS[id] = ts
		c.extra = append(c.extra, id)
	}
	c.meanNS = sum / float64(n)
	c.stdNS = math.Sqrt(sq/float64(n) - c.meanNS*c.meanNS)
	return c
}

// run peels, repairs with the caches and computes.
func (c epochCase) run(t testing.TB, method StddevMethod) (Difference, Estimate, error) {
	d, err := Peel(c.up, c.down)
	if err != nil {
		t.Fatal(err)
	}
	up, down := c.up.Clone(), c.down.Clone()
	u := NewUsable(up.Config(), d)
	Repair(up, d.Lost, c.upTS, u)
	Repair(down, d.Extra, c.downTS, u)
	est, err := Compute(up, down, u, method)
	return d, est, err
}

func sorted(s []uint64) []uint64 { s = slices.Clone(s); slices.Sort(s); return s }

func TestPeelRepairIsExact(t *testing.T) {
	cfg := rda.Config{Banks: 2, Buckets: 2000, Seed: 1, Check: true}
	for seed := uint64(1); seed <= 20; seed++ {
		c := makeCase(t, cfg, 50_000, 300, 300, seed)
		d, est, err := c.run(t, StddevCentered)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Complete() {
			t.Fatalf("seed %d: peeling incomplete with d=600, m=2000: %v", seed, d)
		}
		if !slices.Equal(sorted(d.Lost), sorted(c.lost)) || !slices.Equal(sorted(d.Extra), sorted(c.extra)) {
			t.Fatalf("seed %d: decoded %d lost/%d extra, want %d/%d", seed, len(d.Lost), len(d.Extra), len(c.lost), len(c.extra))
		}
		if rel := math.Abs(est.MeanNS-c.meanNS) / c.meanNS; rel > 1e-9 {
			t.Errorf("seed %d: mean %.6f, truth %.6f: relative error %.2e", seed, est.MeanNS, c.meanNS, rel)
		}
		if est.Count != 50_000 || est.UsableBuckets != est.Buckets-countEmpty(c) || est.ExcludedBuckets != 0 {
			t.Errorf("seed %d: count %.0f usable %d of %d, excluded %d", seed, est.Count, est.UsableBuckets, est.Buckets, est.ExcludedBuckets)
		}
	}
}

func countEmpty(c epochCase) int {
	n := 0
	for l := 0; l < c.up.Config().Banks; l++ {
		for _, b := range c.up.Buckets(l) {
			if b.Count == 0 {
				n++
			}
		}
	}
	return n
}

// TestStddevEstimators compares selective collapse (the paper's) with the
// centered estimator on the same repaired RDAs.
func TestStddevEstimators(t *testing.T) {
	cfg := rda.Config{Banks: 2, Buckets: 2000, Seed: 3, Check: true}
	var errCollapsed, errCentered, maxCentered float64
	const trials = 20
	for seed := uint64(1); seed <= trials; seed++ {
		c := makeCase(t, cfg, 20_000, 100, 100, seed)
		_, est, err := c.run(t, StddevCentered)
		if err != nil {
			t.Fatal(err)
		}
		pe := math.Abs(est.StddevCollapsedNS-c.stdNS) / c.stdNS
		ce := math.Abs(est.StddevCenteredNS-c.stdNS) / c.stdNS
		errCollapsed += pe / trials
		errCentered += ce / trials
		maxCentered = max(maxCentered, ce)
	}
	t.Logf("stddev relative error over %d epochs of 2·10⁴ packets: selective collapse %.2f%%, centered %.2f%% (max %.2f%%)",
		trials, 100*errCollapsed, 100*errCentered, 100*maxCentered)
	if errCentered >= errCollapsed {
		t.Errorf("centered (%.2f%%) not better than selective collapse (%.2f%%)", 100*errCentered, 100*errCollapsed)
	}
	if maxCentered > 0.10 {
		t.Errorf("centered stddev off by up to %.1f%%", 100*maxCentered)
	}
}

// TestIncompletePeelingIsNeverFoldedIn overloads the RDA: residual buckets
// are unusable, and the mean of the rest stays close.
func TestIncompletePeelingIsNeverFoldedIn(t *testing.T) {
	cfg := rda.Config{Banks: 2, Buckets: 500, Seed: 5, Check: true}
	c := makeCase(t, cfg, 30_000, 600, 600, 1)
	d, est, err := c.run(t, StddevCentered)
	if err != nil {
		t.Fatal(err)
	}
	if d.Complete() {
		t.Fatal("peeling of d=1200 in m=500 completed: the test needs an overload")
	}
	if est.UsableBuckets >= est.Buckets {
		t.Fatal("residual buckets counted as usable")
	}
	// Residual buckets hold lost packets with whole timestamps: folding any
	// in would move the mean by milliseconds.
	if rel := math.Abs(est.MeanNS-c.meanNS) / c.meanNS; rel > 0.05 {
		t.Errorf("mean off by %.2f%% with %v", 100*rel, d)
	}
}

// TestMissingTimestampsExcludeBuckets: when a probe cannot return a
// timestamp, that packet's buckets are left out, never half-repaired.
func TestMissingTimestampsExcludeBuckets(t *testing.T) {
	cfg := rda.Config{Banks: 2, Buckets: 1000, Seed: 7, Check: true}
	c := makeCase(t, cfg, 10_000, 50, 50, 2)
	for _, id := range c.lost[:10] {
		delete(c.upTS, id)
	}
	d, est, err := c.run(t, StddevCentered)
	if err != nil || !d.Complete() {
		t.Fatal(err, d)
	}
	if rel := math.Abs(est.MeanNS-c.meanNS) / c.meanNS; rel > 0.01 {
		t.Errorf("mean off by %.3f%%", 100*rel)
	}
	if est.UsableBuckets > est.Buckets-countEmpty(c)-10 || est.ExcludedBuckets < 10 {
		t.Errorf("usable %d, excluded %d: the buckets of 10 unrepaired packets should be out", est.UsableBuckets, est.ExcludedBuckets)
	}
}

func TestPeelRejectsMismatch(t *testing.T) {
	a, _ := rda.New(rda.Config{Banks: 2, Buckets: 10, Seed: 1})
	b, _ := rda.New(rda.Config{Banks: 2, Buckets: 20, Seed: 1})
	if _, err := Peel(a, b); err == nil {
		t.Error("different sizes peeled")
	}
}

func TestSize(t *testing.T) {
	if Size(0, 64, 1<<20) != 64 || Size(1000, 64, 1<<20) != 2500 || Size(1<<30, 64, 1<<20) != 1<<20 {
		t.Error("Size")
	}
}

// TestPeelSmallRDAs is the decoding rate the collector's sampled floor
// (16 buckets per bank) stands on: 2,000 set differences of d packets
// each into RDAs of 2 banks. Two banks peel unless two of the packets
// share their buckets in both, about d²/m² of epochs: at 16 buckets one
// or two differences decode in ≥ 99% of epochs, 4 in ≥ 96% and 6 (the
// most Size sizes to 16) in ≥ 92%; the rest take a rebuild.
func TestPeelSmallRDAs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		m, d int
		want float64
	}{{16, 1, 0.99}, {16, 2, 0.99}, {16, 4, 0.96}, {16, 6, 0.92}, {32, 6, 0.98}} {
		const trials = 2000
		ok := 0
		for range trials {
			cfg := rda.Config{Banks: 2, Buckets: c.m, Seed: rng.Uint64(), Check: true}
			up, _ := rda.New(cfg)
			down, _ := rda.New(cfg)
			for i := range 200 {
				id := rng.Uint64()
				up.Insert(id, int64(i))
				if i >= c.d {
					down.Insert(id, int64(i)+5)
				}
			}
			if d, err := Peel(up, down); err == nil && d.Complete() && len(d.Lost) == c.d {
				ok++
			}
		}
		if got := float64(ok) / trials; got < c.want {
			t.Errorf("%d buckets, %d lost: %.3f of epochs decoded, want ≥ %.2f", c.m, c.d, got, c.want)
		}
	}
}

// BenchmarkPeel peels a set difference of 10⁴ packets (5,000 lost, 5,000
// extra) from RDAs of 2 banks × 25,000 buckets.
func BenchmarkPeel(b *testing.B) {
	cfg := rda.Config{Banks: 2, Buckets: 25_000, Seed: 1, Check: true}
	c := makeCase(b, cfg, 100_000, 5000, 5000, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, _ := Peel(c.up, c.down)
		if !d.Complete() {
			b.Fatal("incomplete")
		}
	}
}

// TestEpochTellsLostCopy: packets sent twice, 50 ms apart (further than
// any delay), one copy lost. When the second is lost, the first arrived
// before the second was sent: the policy tells, and the epoch's mean
// stays exact with every bucket usable. When the first is lost, either
// could have been: it does not guess, and leaves their buckets out.
func TestEpochTellsLostCopy(t *testing.T) {
	for _, firstLost := range []bool{false, true} {
		cfg := rda.Config{Banks: 2, Buckets: 64, Seed: 3}
		r := rand.New(rand.NewPCG(5, 6))
		var l Local
		l.RDA = cfg
		var sum float64
		n := 0
		send := func(id uint64, ts int64, delivered bool) {
			l.Packets[Upstream] = append(l.Packets[Upstream], Packet{id, Entry{OffsetNS: ts, Weight: 1}})
			if delivered {
				d := weibullNS(r)
				l.Packets[Downstream] = append(l.Packets[Downstream], Packet{id, Entry{OffsetNS: ts + d, Weight: 1}})
				sum += float64(d)
				n++
			}
		}
		for i := range 2000 {
			ts := r.Int64N(900_000_000)
			send(r.Uint64(), ts, true)
			if i < 20 {
				id := r.Uint64()
				send(id, ts, !firstLost)
				send(id, ts+50_000_000, firstLost)
			}
		}
		build := func(s Side) *rda.RDA {
			x, err := l.Rebuild(context.Background(), s, 1024)
			if err != nil {
				t.Fatal(err)
			}
			return x
		}
		out, err := Epoch(context.Background(), Input{Up: build(Upstream), Down: build(Downstream)}, &l, Limits{MinBuckets: 64, MaxBuckets: 1 << 16, MaxRebuilds: 4})
		if err != nil {
			t.Fatal(err)
		}
		want, rel := sum/float64(n), 1e-9
		unresolved := 0
		if firstLost {
			unresolved, rel = 20, 0.01
		}
		if !out.Repaired || out.Unresolved != unresolved || (out.Estimate.ExcludedBuckets == 0) == firstLost || out.Lost != 20 || math.Abs(out.Estimate.MeanNS-want) > rel*want {
			t.Errorf("first lost %t: repaired %t, %d unresolved, %d buckets left out, %d lost; mean %.3f ns, want %.3f",
				firstLost, out.Repaired, out.Unresolved, out.Estimate.ExcludedBuckets, out.Lost, out.Estimate.MeanNS, want)
		}
	}
}

func TestLostCopy(t *testing.T) {
	e := func(ns ...int64) []Entry {
		var out []Entry
		for _, x := range ns {
			out = append(out, Entry{OffsetNS: x})
		}
		return out
	}
	for _, c := range []struct {
		up, down []Entry
		lost     int64
		ok       bool
	}{
		{e(100, 200), e(150), 200, true},           // the second copy was lost
		{e(200, 100), e(250), 0, false},            // either could have been: no guess
		{e(100, 200, 300), e(150, 250), 300, true}, // the last one
		{e(100, 200), e(50), 0, false},             // arrived before any was sent
		{e(100, 200), e(150, 250), 0, false},       // not one fewer
	} {
		lost, ok := lostCopy(c.up, c.down)
		if ok != c.ok || ok && lost.OffsetNS != c.lost {
			t.Errorf("lostCopy(%v, %v) = %v, %t; want %d, %t", c.up, c.down, lost, ok, c.lost, c.ok)
		}
	}
}

// cacheGone is a Local whose upstream probe lost the epoch's cache:
// it cannot rebuild, and fetches nothing when fetchToo.
type cacheGone struct {
	*Local
	fetchToo bool
}

var errCacheGone = errors.New("no cache for the epoch")

func (c cacheGone) Rebuild(ctx context.Context, s Side, buckets int) (*rda.RDA, error) {
	if s == Upstream {
		return nil, errCacheGone
	}
	return c.Local.Rebuild(ctx, s, buckets)
}

func (c cacheGone) Fetch(ctx context.Context, s Side, ids []uint64) (map[uint64][]Entry, error) {
	if s == Upstream && c.fetchToo {
		return nil, errCacheGone
	}
	return c.Local.Fetch(ctx, s, ids)
}

// TestEpochPeelsWhenRebuildFails: 8 packets lost of 200, both RDAs at 16
// buckets, which Size deems too few (20); the upstream probe cannot
// rebuild. Epoch peels at 16 instead of giving up: most epochs decode
// (exact when the timestamps come, unrepaired when they do not either);
// the others fail with both the incomplete peel and the rebuild's error.
func TestEpochPeelsWhenRebuildFails(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const trials, lost = 300, 8
	for _, fetchToo := range []bool{false, true} {
		decoded := 0
		for range trials {
			l := &Local{RDA: rda.Config{Banks: 2, Buckets: 16, Seed: rng.Uint64(), Check: true}}
			var sum float64
			for i := range 200 {
				id, ts := rng.Uint64(), rng.Int64N(900_000_000)
				l.Packets[Upstream] = append(l.Packets[Upstream], Packet{id, Entry{OffsetNS: ts, Weight: 1}})
				if i >= lost {
					d := weibullNS(rng)
					l.Packets[Downstream] = append(l.Packets[Downstream], Packet{id, Entry{OffsetNS: ts + d, Weight: 1}})
					sum += float64(d)
				}
			}
			up, _ := l.Rebuild(context.Background(), Upstream, 16)
			down, _ := l.Rebuild(context.Background(), Downstream, 16)
			out, err := Epoch(context.Background(), Input{Up: up, Down: down}, cacheGone{l, fetchToo}, Limits{MinBuckets: 16, MaxBuckets: 1 << 16, MaxRebuilds: 4})
			if err != nil {
				if !errors.Is(err, errCacheGone) || out.Peeled {
					t.Fatalf("fetch fails too %t: %v (peeled %t)", fetchToo, err, out.Peeled)
				}
				continue
			}
			decoded++
			want := sum / float64(200-lost)
			if !out.Diff.Complete() || out.Lost != lost || out.Repaired == fetchToo || out.Buckets != 16 {
				t.Fatalf("fetch fails too %t: complete %t, lost %d, repaired %t, %d buckets", fetchToo, out.Diff.Complete(), out.Lost, out.Repaired, out.Buckets)
			}
			if !fetchToo && math.Abs(out.Estimate.MeanNS-want) > 1e-9*want {
				t.Fatalf("mean %.3f ns, want %.3f", out.Estimate.MeanNS, want)
			}
		}
		t.Logf("fetch fails too %t: %d of %d epochs decoded at 16 buckets", fetchToo, decoded, trials)
		if decoded < trials*3/4 {
			t.Errorf("fetch fails too %t: %d of %d epochs decoded at 16 buckets, want ≥ 3/4", fetchToo, decoded, trials)
		}
	}
}

// TestEpochMatchesSideWithoutCache: the upstream probe lost the epoch's
// cache and its RDA is of another size than the downstream one's, larger
// (32 against 64, 8 packets lost of 200) or too small for the count
// difference (24 against 16, 12 lost: Size asks 30). The downstream side
// is rebuilt at the upstream size and the epoch peels there; before,
// the rebuild to the larger size failed and the epoch was left to the
// LDA's estimate.
func TestEpochMatchesSideWithoutCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const trials = 200
	for _, c := range []struct{ up, down, lost int }{{32, 64, 8}, {24, 16, 12}} {
		decoded := 0
		for range trials {
			l := &Local{RDA: rda.Config{Banks: 2, Buckets: c.up, Seed: rng.Uint64(), Check: true}}
			var sum float64
			for i := range 200 {
				id, ts := rng.Uint64(), rng.Int64N(900_000_000)
				l.Packets[Upstream] = append(l.Packets[Upstream], Packet{id, Entry{OffsetNS: ts, Weight: 1}})
				if i >= c.lost {
					d := weibullNS(rng)
					l.Packets[Downstream] = append(l.Packets[Downstream], Packet{id, Entry{OffsetNS: ts + d, Weight: 1}})
					sum += float64(d)
				}
			}
			up, _ := l.Rebuild(context.Background(), Upstream, c.up)
			down, _ := l.Rebuild(context.Background(), Downstream, c.down)
			out, err := Epoch(context.Background(), Input{Up: up, Down: down}, cacheGone{Local: l}, Limits{MinBuckets: 16, MaxBuckets: 1 << 16, MaxRebuilds: 4})
			if err != nil {
				if !errors.Is(err, errCacheGone) {
					t.Fatalf("%+v: %v", c, err)
				}
				continue
			}
			decoded++
			want := sum / float64(200-c.lost)
			if !out.Diff.Complete() || out.Lost != c.lost || !out.Repaired || out.Buckets != c.up {
				t.Fatalf("%+v: complete %t, lost %d, repaired %t, %d buckets", c, out.Diff.Complete(), out.Lost, out.Repaired, out.Buckets)
			}
			if math.Abs(out.Estimate.MeanNS-want) > 1e-9*want {
				t.Fatalf("%+v: mean %.3f ns, want %.3f", c, out.Estimate.MeanNS, want)
			}
		}
		t.Logf("%+v: %d of %d epochs decoded at the upstream size", c, decoded, trials)
		if decoded < trials*3/4 {
			t.Errorf("%+v: %d of %d epochs decoded at the upstream size, want ≥ 3/4", c, decoded, trials)
		}
	}
}

// cycleIDs are two IDs that share their buckets in both banks of cfg: a
// stopping set that no peeling at this size can open.
func cycleIDs(t *testing.T, cfg rda.Config, rng *rand.Rand) (uint64, uint64) {
	r, _ := rda.New(cfg)
	seen := map[[2]int]uint64{}
	for range 100_000 {
		id := rng.Uint64()
		at := [2]int{r.Index(0, id), r.Index(1, id)}
		if other, ok := seen[at]; ok {
			return other, id
		}
		seen[at] = id
	}
	t.Fatal("no two IDs share both buckets")
	return 0, 0
}

// TestPeelCountsCopies: a residual of copies of one ID (two copies
// downstream and none upstream: its ID field cancels; three: it hashes
// to its own bucket) counts in Copies; two distinct lost IDs that share
// both their buckets leave a residual that does not.
func TestPeelCountsCopies(t *testing.T) {
	cfg := rda.Config{Banks: 2, Buckets: 64, Seed: 11, Check: true}
	rng := rand.New(rand.NewPCG(1, 2))
	x, y := cycleIDs(t, cfg, rng)
	for _, c := range []struct {
		name       string
		up, down   []uint64
		wantCopies bool
	}{
		{"two copies downstream", nil, []uint64{x, x}, true},
		{"three copies downstream", nil, []uint64{x, x, x}, true},
		{"three copies upstream, one downstream", []uint64{x, x, x}, []uint64{x}, true},
		{"two lost sharing their buckets", []uint64{x, y}, nil, false},
	} {
		up, _ := rda.New(cfg)
		down, _ := rda.New(cfg)
		for i := range 300 {
			id, ts := rng.Uint64(), int64(i)*1000
			up.Insert(id, ts)
			down.Insert(id, ts+5000)
		}
		for i, id := range c.up {
			up.Insert(id, int64(i))
		}
		for i, id := range c.down {
			down.Insert(id, int64(i)+7)
		}
		d, err := Peel(up, down)
		if err != nil {
			t.Fatal(err)
		}
		if d.Complete() || (d.Copies > 0) != c.wantCopies {
			t.Errorf("%s: complete %t, %d residual buckets, %d look like copies", c.name, d.Complete(), len(d.Residual[0])+len(d.Residual[1]), d.Copies)
		}
	}
}

// countRepeats is Local counting its Repeated calls.
type countRepeats struct {
	*Local
	repeated int
}

func (c *countRepeats) Repeated(ctx context.Context, s Side) (map[uint64][]Entry, error) {
	c.repeated++
	return c.Local.Repeated(ctx, s)
}

// TestEpochRebuildsCyclesFirst: an epoch whose residual is two lost IDs
// sharing their buckets is rebuilt larger without asking the probes for
// repeated IDs (which made each sort its whole cache); one whose
// residual is copies of an ID asks for them before any rebuild. Both end
// exact.
func TestEpochRebuildsCyclesFirst(t *testing.T) {
	cfg := rda.Config{Banks: 2, Buckets: 64, Seed: 11, Check: true}
	rng := rand.New(rand.NewPCG(3, 4))
	x, y := cycleIDs(t, cfg, rng)
	for _, c := range []struct {
		name         string
		lost, copies []uint64 // sent and not received; received twice, never sent in the epoch
		wantRepeated int
		wantRebuilds int
	}{
		{"cycle", []uint64{x, y}, nil, 0, 1},
		{"copies", nil, []uint64{x}, 2, 0},
	} {
		l := &Local{RDA: cfg}
		var sum float64
		n := 0
		for i := range 300 {
			id, ts := rng.Uint64(), int64(i)*3_000_000
			l.Packets[Upstream] = append(l.Packets[Upstream], Packet{id, Entry{OffsetNS: ts, Weight: 1}})
			d := weibullNS(rng)
			l.Packets[Downstream] = append(l.Packets[Downstream], Packet{id, Entry{OffsetNS: ts + d, Weight: 1}})
			sum += float64(d)
			n++
		}
		for _, id := range c.lost {
			l.Packets[Upstream] = append(l.Packets[Upstream], Packet{id, Entry{OffsetNS: 5_000_000, Weight: 1}})
		}
		for _, id := range c.copies {
			for k := range 2 {
				l.Packets[Downstream] = append(l.Packets[Downstream], Packet{id, Entry{OffsetNS: int64(1000 + k), Weight: 1}})
			}
		}
		up, _ := l.Rebuild(context.Background(), Upstream, 64)
		down, _ := l.Rebuild(context.Background(), Downstream, 64)
		r := &countRepeats{Local: l}
		out, err := Epoch(context.Background(), Input{Up: up, Down: down}, r, Limits{MinBuckets: 64, MaxBuckets: 1 << 16, MaxRebuilds: 4})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := sum / float64(n)
		if r.repeated != c.wantRepeated || out.Rebuilds != c.wantRebuilds || !out.Diff.Complete() || !out.Repaired ||
			math.Abs(out.Estimate.MeanNS-want) > 1e-9*want {
			t.Errorf("%s: %d repeated fetches (want %d), %d rebuilds (want %d), complete %t, repaired %t, mean %.1f ns (want %.1f)",
				c.name, r.repeated, c.wantRepeated, out.Rebuilds, c.wantRebuilds, out.Diff.Complete(), out.Repaired, out.Estimate.MeanNS, want)
		}
	}
}

// TestPeelFailureRate: with two banks, a difference of d IDs in m
// buckets per bank fails to peel when some IDs close a cycle through
// their buckets, with probability 1 − √(1 − (d/m)²) (a random bipartite
// graph's cycles, Poisson): 8.3% at the 2.5 × d that Size gives for
// d = |up − down|, 2.0% at twice that. With three banks of the same
// cells in all (a third fewer a bank), the least that stops peeling is
// two IDs sharing all three buckets, about d²/2m³: 0.05%. Peeling is
// measured against both.
func TestPeelFailureRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const trials, d = 4000, 200
	for _, m := range []int{Size(d, 1, rda.MaxBuckets), 2 * Size(d, 1, rda.MaxBuckets)} {
		failed := peelFailures(t, rng, rda.Config{Banks: 2, Buckets: m, Check: true}, d, trials)
		c := float64(d) / float64(m)
		want := 1 - math.Sqrt(1-c*c)
		got := float64(failed) / trials
		sd := math.Sqrt(want * (1 - want) / trials)
		t.Logf("%d IDs in 2 × %d buckets: %.2f%% failed to peel, %.2f%% expected", d, m, 100*got, 100*want)
		if math.Abs(got-want) > 4*sd {
			t.Errorf("%d IDs in 2 × %d buckets: %.2f%% failed to peel, want %.2f%% ± %.2f", d, m, 100*got, 100*want, 400*sd)
		}
	}
	m := (2*Size(d, 1, rda.MaxBuckets) + 2) / 3
	failed := peelFailures(t, rng, rda.Config{Banks: 3, Buckets: m, Check: true}, d, trials)
	want := float64(d) * d / 2 / math.Pow(float64(m), 3) * trials
	t.Logf("%d IDs in 3 × %d buckets: %d of %d failed to peel, %.1f expected", d, m, failed, trials, want)
	if float64(failed) > 4*want+4 {
		t.Errorf("%d IDs in 3 × %d buckets: %d of %d failed to peel, want about %.1f", d, m, failed, trials, want)
	}
}

// peelFailures is how many of trials differences of d random IDs (lost
// upstream) in RDAs of cfg, each with a seed of its own, do not peel.
func peelFailures(t *testing.T, rng *rand.Rand, cfg rda.Config, d, trials int) int {
	failed := 0
	for range trials {
		cfg.Seed = rng.Uint64()
		up, _ := rda.New(cfg)
		down, _ := rda.New(cfg)
		for range d {
			up.Insert(rng.Uint64(), rng.Int64N(1e9))
		}
		diff, err := Peel(up, down)
		if err != nil {
			t.Fatal(err)
		}
		if !diff.Complete() {
			failed++
		}
	}
	return failed
}

// TestEpochCountsBoundaryCopies: of the packets only the downstream side
// saw in an epoch, those its probe reports as boundary copies (first
// copy in the epoch before) are duplicates, the others reordered; every
// one stays among the boundary records for matching, the copies marked.
func TestEpochCountsBoundaryCopies(t *testing.T) {
	l, r, build := deliveredEpoch(t, 7, 8)
	var copies, late []uint64
	for i := range 12 {
		id := r.Uint64()
		l.Packets[Downstream] = append(l.Packets[Downstream], Packet{id, Entry{OffsetNS: r.Int64N(5_000_000), Weight: 1}})
		if i < 5 {
			copies = append(copies, id)
		} else {
			late = append(late, id)
		}
	}
	// A reported copy the epoch did not see downstream alone changes
	// nothing.
	reported := append(slices.Clone(copies), l.Packets[Downstream][0].ID)
	out, err := Epoch(context.Background(), Input{Up: build(Upstream), Down: build(Downstream), DownCopies: reported}, l,
		Limits{MinBuckets: 64, MaxBuckets: 1 << 16, MaxRebuilds: 4})
	if err != nil {
		t.Fatal(err)
	}
	if out.Duplicates != 5 || out.Reordered != 7 || len(out.BoundaryExtra) != 12 || len(out.BoundaryCopies) != 5 {
		t.Fatalf("%d duplicates, %d reordered, %d boundary extras of which %d copies; want 5, 7, 12, 5",
			out.Duplicates, out.Reordered, len(out.BoundaryExtra), len(out.BoundaryCopies))
	}
	for _, id := range copies {
		if !out.BoundaryCopies[id] {
			t.Errorf("copy %x not marked", id)
		}
	}
	for _, id := range late {
		if _, extra := out.BoundaryExtra[id]; !extra || out.BoundaryCopies[id] {
			t.Errorf("reordered %x: among the extras %t, marked a copy %t", id, extra, out.BoundaryCopies[id])
		}
	}
}

// TestEpochKeepsUpstreamCopies: a packet the downstream side saw twice in
// the epoch and the upstream side once, whose other upstream copy came
// just before the epoch (the upstream probe's boundary copies), is a
// duplicate whose later downstream copy waits among the boundary records,
// marked, for the epoch before's loss of the first.
func TestEpochKeepsUpstreamCopies(t *testing.T) {
	l, r, build := deliveredEpoch(t, 9, 10)
	x, y := r.Uint64(), r.Uint64() // x's other copy crossed; y was duplicated on the way
	for _, id := range []uint64{x, y} {
		l.Packets[Upstream] = append(l.Packets[Upstream], Packet{id, Entry{OffsetNS: 50_000, Weight: 1}})
		l.Packets[Downstream] = append(l.Packets[Downstream], Packet{id, Entry{OffsetNS: 100_000, Weight: 1}},
			Packet{id, Entry{OffsetNS: 250_000, Weight: 1}})
	}
	out, err := Epoch(context.Background(), Input{Up: build(Upstream), Down: build(Downstream), StartNS: 1e9, UpCopies: []uint64{x}}, l,
		Limits{MinBuckets: 64, MaxBuckets: 1 << 16, MaxRebuilds: 4})
	if err != nil {
		t.Fatal(err)
	}
	if out.Duplicates != 2 || out.Reordered != 0 || len(out.BoundaryCopies) != 1 || !out.BoundaryCopies[x] || out.BoundaryExtra[x] != 1e9+250_000 {
		t.Errorf("%d duplicates, %d reordered, copies %v, boundary extras %v; want 2, 0, x marked at 1e9+250000 (x %x)",
			out.Duplicates, out.Reordered, out.BoundaryCopies, out.BoundaryExtra, x)
	}
}

// deliveredEpoch is an epoch of 2,000 packets both sides saw (Weibull
// delays) drawn from a PCG of seeds s1 and s2, which it returns for more,
// and a function that builds a side's RDA of 256 buckets from the
// epoch's packets as they are then.
func deliveredEpoch(t *testing.T, s1, s2 uint64) (*Local, *rand.Rand, func(Side) *rda.RDA) {
	t.Helper()
	r := rand.New(rand.NewPCG(s1, s2))
	l := &Local{RDA: rda.Config{Banks: 2, Buckets: 256, Seed: 3}}
	for range 2000 {
		id, ts := r.Uint64(), r.Int64N(900_000_000)
		l.Packets[Upstream] = append(l.Packets[Upstream], Packet{id, Entry{OffsetNS: ts, Weight: 1}})
		l.Packets[Downstream] = append(l.Packets[Downstream], Packet{id, Entry{OffsetNS: ts + weibullNS(r), Weight: 1}})
	}
	build := func(s Side) *rda.RDA {
		b, err := l.Rebuild(context.Background(), s, 256)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return l, r, build
}
