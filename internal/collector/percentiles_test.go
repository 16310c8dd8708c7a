package collector

import (
	"bytes"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/exact"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// TestSampleJoinAcrossTheBoundary: a sampled packet sent near the end of
// an epoch and seen downstream in the next is matched there and counts in
// its own epoch's quantiles, also after both boundary records went through
// their stored form; one joined at another rate is not matched.
func TestSampleJoinAcrossTheBoundary(t *testing.T) {
	cfg, _ := sample.ForShift(7, 0)
	res := &owlv1.PathStats{Status: owlv1.ResultStatus_RESULT_STATUS_OK}
	b := &boundary{epoch: 1, res: res, sample: &sampleJoin{cfg: cfg, downCfg: cfg, delays: []int64{100, 200, 300},
		up: map[uint64]int64{42: 1_999_000, 43: 1_999_500}, down: map[uint64]int64{}}}
	b.sample.apply(res)
	if res.GetSampleDelays() != 3 || res.GetQuantiles()[0].GetValueNs() != 200 || !res.GetQuantiles()[0].GetExact() {
		t.Fatalf("before matching: %v", res)
	}
	nextRes := &owlv1.PathStats{Status: owlv1.ResultStatus_RESULT_STATUS_OK}
	next := &boundary{epoch: 2, res: nextRes, sample: &sampleJoin{cfg: cfg, downCfg: cfg, delays: []int64{50},
		up: map[uint64]int64{}, down: map[uint64]int64{42: 2_000_400, 99: 2_000_001}}}
	// Through the stored form.
	var err error
	if b, err = decodeBoundary(1, b.encode(), res); err != nil {
		t.Fatal(err)
	}
	if next, err = decodeBoundary(2, next.encode(), nextRes); err != nil {
		t.Fatal(err)
	}
	if !b.match(next) {
		t.Fatal("nothing matched")
	}
	if got := b.sample.delays; !slices.Equal(got, []int64{100, 200, 300, 1400}) {
		t.Errorf("delays %v, want the crosser's 1400 ns added", got)
	}
	if res.GetSampleDelays() != 4 || res.GetDelayMaxNs() != 1400 {
		t.Errorf("result not updated: %d delays, max %v", res.GetSampleDelays(), res.GetDelayMaxNs())
	}
	if _, ok := next.sample.down[99]; !ok || len(next.sample.down) != 1 {
		t.Errorf("next epoch's unmatched entries %v, want 99 left", next.sample.down)
	}
	otherSeed, _ := sample.ForShift(8, 0)
	later := &sampleJoin{cfg: otherSeed, downCfg: otherSeed, down: map[uint64]int64{43: 2_000_000}}
	if b.sample.match(later) {
		t.Errorf("matched entries sampled under another seed")
	}
}

// TestSampleJoinAcrossARateChange: when two neighbouring epochs were
// sampled at different rates, the earlier epoch's delays are those of
// every packet it sent that the lower rate keeps, crossers included (the
// ground truth of a generated two-epoch trace), whichever epoch is
// reconciled first and through the stored form of both records; the
// later epoch's own delays do not change.
func TestSampleJoinAcrossARateChange(t *testing.T) {
	const epochNS = 1_000_000
	rng := rand.New(rand.NewPCG(5, 6))
	type pkt struct {
		id           uint64
		sent, arrive int64 // absolute ns; arrive < 0: lost
	}
	var pkts [2][]pkt // by sending epoch
	for e := range 2 {
		for range 3000 {
			p := pkt{id: rng.Uint64(), sent: int64(e)*epochNS + rng.Int64N(epochNS), arrive: -1}
			if rng.Float64() >= 0.01 {
				p.arrive = p.sent + 20_000 + rng.Int64N(60_000) // a tenth cross
			}
			pkts[e] = append(pkts[e], p)
		}
	}
	for _, shifts := range [][2]int{{0, 1}, {1, 0}, {0, 3}, {2, 2}} {
		cfgs := [2]sample.Config{}
		for e := range 2 {
			cfgs[e], _ = sample.ForShift(7, shifts[e])
		}
		joins := [2]*sampleJoin{}
		for e := range 2 {
			up, _ := sample.New(cfgs[e])
			down, _ := sample.New(cfgs[e])
			start := int64(e) * epochNS
			for s := range 2 {
				for _, p := range pkts[s] {
					if s == e {
						up.Insert(p.id, p.sent-start)
					}
					if p.arrive >= start && p.arrive < start+epochNS {
						down.Insert(p.id, p.arrive-start)
					}
				}
			}
			j, err := sample.Join(up, down, 0)
			if err != nil {
				t.Fatal(err)
			}
			joins[e] = newSampleJoin(cfgs[e], j, start)
		}
		truth := func(e int, cfg sample.Config) (ds []int64) {
			for _, p := range pkts[e] {
				if cfg.Keeps(p.id) && p.arrive >= 0 && p.arrive < 2*epochNS {
					ds = append(ds, p.arrive-p.sent)
				}
			}
			slices.Sort(ds)
			return ds
		}
		lower := cfgs[0]
		if cfgs[1].Threshold < lower.Threshold {
			lower = cfgs[1]
		}
		want0, want1 := truth(0, lower), slices.Clone(joins[1].delays)
		for _, stored := range []bool{false, true} {
			a, b := joins[0], joins[1]
			if stored { // as a restarted collector reads them
				ra, errA := decodeSampleJoin(a.encode(nil))
				rb, errB := decodeSampleJoin(b.encode(nil))
				if errA != nil || errB != nil {
					t.Fatal(errA, errB)
				}
				a, b = ra, rb
			} else {
				a, b = cloneJoin(a), cloneJoin(b)
			}
			a.match(b)
			res := &owlv1.PathStats{}
			a.apply(res)
			if !slices.Equal(a.delays, want0) {
				t.Errorf("shifts %v, stored %t: epoch 0 has %d delays, the truth at rate %v %d", shifts, stored, len(a.delays), lower.Rate(), len(want0))
			}
			if res.GetSampleRate() != lower.Rate() || (shifts[1] > shifts[0]) != strings.Contains(res.GetSampleNote(), "next epoch") {
				t.Errorf("shifts %v: rate %v, note %q", shifts, res.GetSampleRate(), res.GetSampleNote())
			}
			if !slices.Equal(b.delays, want1) {
				t.Errorf("shifts %v: epoch 1's own delays changed", shifts)
			}
		}
	}
}

// cloneJoin is a deep copy of a join, for matching one twice.
func cloneJoin(sj *sampleJoin) *sampleJoin {
	c := *sj
	c.delays, c.keys = slices.Clone(sj.delays), slices.Clone(sj.keys)
	c.up, c.down = maps.Clone(sj.up), maps.Clone(sj.down)
	return &c
}

// FuzzBoundaryRecord: a boundary record from the store or a peer decodes
// or is refused, without panicking and within memory bounded by its
// size; what decodes encodes to a record that decodes to the same.
func FuzzBoundaryRecord(f *testing.F) {
	cfg, _ := sample.ForShift(7, 3)
	for _, bd := range []*boundary{
		{lost: map[uint64]int64{1: 2}, extra: map[uint64]int64{}},
		{lost: map[uint64]int64{}, extra: map[uint64]int64{5: 6}, sample: &sampleJoin{cfg: cfg, downCfg: cfg, delays: []int64{1, 5},
			up: map[uint64]int64{9: 10}, down: map[uint64]int64{}, narrowed: narrowedSides, ambiguous: 2}},
		{lost: map[uint64]int64{}, extra: map[uint64]int64{5: 6, 7: 8}, copies: map[uint64]bool{7: true}, sample: &sampleJoin{cfg: cfg, downCfg: cfg,
			delays: []int64{3}, up: map[uint64]int64{}, down: map[uint64]int64{}}},
	} {
		f.Add(bd.encode())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		bd, err := decodeBoundary(1, data, &owlv1.PathStats{})
		if err != nil {
			return
		}
		if n := 16*(len(bd.lost)+len(bd.extra)) + 8*len(bd.copies); n > len(data) {
			t.Fatalf("%d bytes of entries from %d bytes", n, len(data))
		}
		again, err := decodeBoundary(1, bd.encode(), &owlv1.PathStats{})
		if err != nil {
			t.Fatalf("re-encoded record refused: %v", err)
		}
		if !bytes.Equal(again.encode(), bd.encode()) {
			t.Fatal("re-encoded record decodes to other content")
		}
	})
}

// samplePair is both sides' samples (rate 1/4) of an epoch until 2,000
// packets are sampled upstream, 1% of them lost, each delivered one 5 ms
// × (1 + an exponential) + shiftNS later.
func samplePair(seed uint64, shiftNS int64) (cfg sample.Config, up, down *sample.Sample) {
	cfg, _ = sample.ForShift(7, 2)
	up, _ = sample.New(cfg)
	down, _ = sample.New(cfg)
	rng := rand.New(rand.NewPCG(seed, seed))
	for up.Len() < 2000 {
		id, at := rng.Uint64(), rng.Int64N(1e9)
		if up.Insert(id, at) && rng.IntN(100) > 0 {
			down.Insert(id, at+int64(5e6*(1+rng.ExpFloat64()))+shiftNS)
		}
	}
	return cfg, up, down
}

// BenchmarkSampleJoin is the collector's work per path and epoch for the
// samples: join two sides of 2,000 sampled packets (1% lost), the
// quantiles with their intervals, and the delay sketch.
func BenchmarkSampleJoin(b *testing.B) {
	_, up, down := samplePair(1, 0)
	wk := &worker{cfg: testConfig(b), now: time.Now}
	pr := &pairing{up: &side{sample: up}, down: &side{sample: down}}
	b.ReportAllocs()
	for b.Loop() {
		w := &epochWork{epoch: 1, pr: pr, res: &owlv1.PathStats{}}
		wk.estimateSample(w)
		if w.res.GetSampleDelays() == 0 {
			b.Fatal("no delays")
		}
	}
}

// TestExactStddevFromTheSample: at rate 1, when the sample holds as many
// delays as the exact RDA count, the result's standard deviation is the
// sample's; when the counts differ (a packet left out), RDA's stays.
func TestExactStddevFromTheSample(t *testing.T) {
	cfg, _ := sample.ForShift(7, 0)
	delays := []int64{1_000_000, 1_000_300, 1_000_400, 1_000_900}
	for _, tc := range []struct {
		samples uint64
		exact   bool
	}{{4, true}, {5, false}} {
		res := &owlv1.PathStats{Estimator: "rda", Decoded: true, Samples: tc.samples, StddevNs: 123, RdaBuckets: 256}
		(&sampleJoin{cfg: cfg, delays: delays}).apply(res)
		const mean, std = 1_000_400, 324.037034920393 // of delays (population)
		if math.Abs(res.GetSampleMeanNs()-mean) > 1e-6 || math.Abs(res.GetSampleStddevNs()-std) > 1e-6 {
			t.Errorf("sample mean %v, stddev %v; want %v, %v", res.GetSampleMeanNs(), res.GetSampleStddevNs(), mean, std)
		}
		switch {
		case res.GetStddevExact() != tc.exact:
			t.Errorf("RDA count %d: stddev_exact %t", tc.samples, res.GetStddevExact())
		case tc.exact && res.GetStddevNs() != res.GetSampleStddevNs():
			t.Errorf("exact: stddev %v, the sample's %v", res.GetStddevNs(), res.GetSampleStddevNs())
		case !tc.exact && res.GetStddevNs() != 123:
			t.Errorf("not exact: RDA's stddev replaced by %v", res.GetStddevNs())
		}
	}
}

// TestSampledStddevAroundTheExactMean: where RDA's mean is exact and a
// sampled join holds at least as many delays as the RDA has buckets, the
// standard deviation is the delays' spread around that mean; with fewer
// delays, or a mean that is not exact, RDA's estimate stays.
func TestSampledStddevAroundTheExactMean(t *testing.T) {
	cfg, _ := sample.ForShift(7, 2)
	r := rand.New(rand.NewPCG(4, 4))
	delays := make([]int64, 300)
	for i := range delays {
		delays[i] = 1_000_000 + int64(r.ExpFloat64()*200_000)
	}
	slices.Sort(delays)
	const exactMean = 1_190_000.0
	var sq float64
	for _, d := range delays {
		sq += (float64(d) - exactMean) * (float64(d) - exactMean)
	}
	want := math.Sqrt(sq / float64(len(delays)))
	for _, tc := range []struct {
		name     string
		buckets  uint32
		unusable uint32
		sampled  bool
	}{{"more delays than buckets", 256, 0, true}, {"as many", 300, 0, true}, {"fewer", 512, 0, false}, {"a bucket left out", 256, 1, false}} {
		res := &owlv1.PathStats{Estimator: "rda", Decoded: true, MeanNs: exactMean, Samples: 1200, StddevNs: 123, RdaBuckets: tc.buckets, UnusableBuckets: tc.unusable}
		(&sampleJoin{cfg: cfg, delays: delays}).apply(res)
		switch {
		case res.GetStddevFromSample() != tc.sampled || res.GetStddevExact():
			t.Errorf("%s: stddev_from_sample %t, stddev_exact %t", tc.name, res.GetStddevFromSample(), res.GetStddevExact())
		case tc.sampled && math.Abs(res.GetStddevNs()-want) > 1e-6*want:
			t.Errorf("%s: stddev %v, want the spread around the exact mean %v (the sample's own: %v)", tc.name, res.GetStddevNs(), want, res.GetSampleStddevNs())
		case !tc.sampled && res.GetStddevNs() != 123:
			t.Errorf("%s: RDA's stddev replaced by %v", tc.name, res.GetStddevNs())
		}
	}
}

// pkt is a listed packet of flow 1.
func pkt(id uint64, off int64) exact.Packet {
	return exact.Packet{ID: id, OffsetNS: off, Flow: 1, Weight: 1}
}

// sendList hands c a report of path p's epoch that lists packets ps.
func sendList(t *testing.T, c *Collector, probe string, epoch int64, role owlv1.Role, ps ...exact.Packet) {
	t.Helper()
	r := report("p", epoch, role, nil)
	r.List, _ = (&exact.List{Packets: ps}).MarshalBinary()
	if err := c.report(probe, r); err != nil {
		t.Fatal(err)
	}
}

// TestDuplicatedCrosserCountsByItsEarlierCopy: a packet sent at the end
// of epoch 1 and seen twice downstream in epoch 2 counts in epoch 1's
// delays by its earlier copy, as the ground truth and RDA count it. The
// sides send exact lists, so nothing asks a probe.
func TestDuplicatedCrosserCountsByItsEarlierCopy(t *testing.T) {
	c := newTest(t, testConfig(t))
	send := func(probe string, epoch int64, role owlv1.Role, ps ...exact.Packet) {
		sendList(t, c, probe, epoch, role, ps...)
	}
	send("a", 1, owlv1.Role_ROLE_UPSTREAM, pkt(10, 100), pkt(11, 999_999_000))
	send("b", 1, owlv1.Role_ROLE_DOWNSTREAM, pkt(10, 5_100))
	send("a", 2, owlv1.Role_ROLE_UPSTREAM, pkt(20, 100))
	send("b", 2, owlv1.Role_ROLE_DOWNSTREAM, pkt(20, 5_100), pkt(11, 400), pkt(11, 900))
	waitResult(t, c, "p", 2, anyResult)
	r := waitResult(t, c, "p", 1, func(r *owlv1.PathStats) bool { return r.GetSampleDelays() == 2 })
	if r.GetDelayMinNs() != 1_400 { // the other delay is 5,000 ns
		t.Errorf("crosser's delay %v ns, want 1400 (its earlier copy)", r.GetDelayMinNs())
	}
}

// TestCrossersAtARateChange: epoch 1 sends exact lists (rate 1), epoch 2
// samples at 1/2 (the collector lowered the rate); epoch 1's packet that
// crossed into epoch 2 is kept at 1/2, so epoch 1's result is narrowed to
// that rate and holds its delay, rather than claiming every packet at
// rate 1 without it.
func TestCrossersAtARateChange(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	half, _ := sample.ForShift(cfg.Params.Sample.Seed, 1)
	var in, out []uint64 // identities the half rate keeps, and not
	for id := uint64(1); len(in) < 4 || len(out) < 4; id++ {
		if half.Keeps(id) {
			in = append(in, id)
		} else {
			out = append(out, id)
		}
	}
	send := func(probe string, epoch int64, role owlv1.Role, ps ...exact.Packet) {
		sendList(t, c, probe, epoch, role, ps...)
	}
	ldaUp, ldaDown := ldaPair(t, cfg.Params.LDA, 2, 1000, 1)
	sendSample := func(probe string, epoch int64, role owlv1.Role, ps ...exact.Packet) {
		s, _ := sample.New(half)
		for _, p := range ps {
			s.Insert(p.ID, p.OffsetNS)
		}
		l := ldaUp
		if role == owlv1.Role_ROLE_DOWNSTREAM {
			l = ldaDown
		}
		r := report("p", epoch, role, l)
		r.Sample, _ = s.MarshalBinary()
		if err := c.report(probe, r); err != nil {
			t.Fatal(err)
		}
	}
	// Epoch 1: in[0] and out[0] delivered within it (1,000 and 2,000 ns),
	// in[1] and out[1] cross into epoch 2 (1,500 and 2,500 ns).
	send("a", 1, owlv1.Role_ROLE_UPSTREAM, pkt(in[0], 100), pkt(out[0], 200), pkt(in[1], 999_999_000), pkt(out[1], 999_999_100))
	send("b", 1, owlv1.Role_ROLE_DOWNSTREAM, pkt(in[0], 1_100), pkt(out[0], 2_200))
	sendSample("a", 2, owlv1.Role_ROLE_UPSTREAM, pkt(in[2], 100), pkt(out[2], 100))
	sendSample("b", 2, owlv1.Role_ROLE_DOWNSTREAM, pkt(in[2], 3_100), pkt(out[2], 3_100), pkt(in[1], 500), pkt(out[1], 1_600))
	r := waitResult(t, c, "p", 1, func(r *owlv1.PathStats) bool { return r.GetSampleRate() == 0.5 })
	if r.GetSampleDelays() != 2 || r.GetDelayMinNs() != 1_000 || r.GetDelayMaxNs() != 1_500 {
		t.Errorf("epoch 1: %d delays, min %v, max %v; want those of the two packets the half rate keeps, 1000 and 1500 ns",
			r.GetSampleDelays(), r.GetDelayMinNs(), r.GetDelayMaxNs())
	}
	if !strings.Contains(r.GetSampleNote(), "next epoch") || r.GetQuantiles()[0].GetExact() {
		t.Errorf("epoch 1 narrowed without saying so: note %q, quantiles %v", r.GetSampleNote(), r.GetQuantiles())
	}
}

// A boundary record stored before samples carried keys (version 2, packet
// IDs) is read with its IDs turned into keys, so that its crossers still
// match the next epoch's keyed entries.
func TestSampleRecordOfIDs(t *testing.T) {
	cfg, _ := sample.ForShift(7, 1)
	ids := []uint64{11, 12, 13}
	old := &sampleJoin{cfg: cfg, downCfg: cfg, delays: []int64{100, 200}, keys: ids[:2],
		up: map[uint64]int64{ids[2]: 5}, down: map[uint64]int64{ids[0]: 9}}
	cur := old.encode(nil)
	// Versions 2 and 3 had no key width after the flags.
	b := append(slices.Clone(cur[:26]), cur[27:]...)
	b[0] = sampleRecordIDs
	sj, err := decodeSampleJoin(b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sj.keys, []uint64{cfg.Key(ids[0]), cfg.Key(ids[1])}) || sj.up[cfg.Key(ids[2])] != 5 || sj.down[cfg.Key(ids[0])] != 9 || len(sj.up) != 1 {
		t.Errorf("keys %x, up %v, down %v: want the IDs' keys", sj.keys, sj.up, sj.down)
	}
	b[0] = sampleRecordKeys
	if sj, _ := decodeSampleJoin(b); !slices.Equal(sj.keys, ids[:2]) || sj.width() != sample.KeyBits {
		t.Errorf("a record of keys changed them: %x", sj.keys)
	}
	old.keyBits = 35
	if sj, err := decodeSampleJoin(old.encode(nil)); err != nil || sj.width() != 35 || !slices.Equal(sj.keys, ids[:2]) {
		t.Errorf("a record of 35-bit keys read back as %d bits (%v)", sj.width(), err)
	}
}

// TestCrossersAtAKeyWidthChange: neighbouring epochs whose joins have keys
// of different widths (their rates differ, or a probe sends full keys)
// match their crossers at the narrower width, in either order, through
// the stored form; a crosser of another packet is not matched.
func TestCrossersAtAKeyWidthChange(t *testing.T) {
	cfg, _ := sample.ForShift(7, 0)
	const a, b, other = 0x1234_5678_9abc_0000, 0x0fed_cba9_8765_0000, 0x1234_5678_9abd_0000
	narrow := func(k uint64) uint64 { return k & keyMask(35) }
	for _, wideFirst := range []bool{true, false} {
		w1, w2, k1, k2 := 48, 35, func(k uint64) uint64 { return k }, narrow
		if !wideFirst {
			w1, w2, k1, k2 = 35, 48, narrow, func(k uint64) uint64 { return k }
		}
		res := &owlv1.PathStats{Status: owlv1.ResultStatus_RESULT_STATUS_OK}
		first := &boundary{epoch: 1, res: res, sample: &sampleJoin{cfg: cfg, downCfg: cfg, keyBits: w1, delays: []int64{100}, keys: []uint64{k1(other)},
			up: map[uint64]int64{k1(a): 1_999_000, k1(b): 1_999_100}, down: map[uint64]int64{}}}
		nextRes := &owlv1.PathStats{Status: owlv1.ResultStatus_RESULT_STATUS_OK}
		next := &boundary{epoch: 2, res: nextRes, sample: &sampleJoin{cfg: cfg, downCfg: cfg, keyBits: w2,
			up: map[uint64]int64{}, down: map[uint64]int64{k2(a): 2_000_400, k2(b ^ 1<<40): 2_000_500}}}
		var err error
		if first, err = decodeBoundary(1, first.encode(), res); err != nil {
			t.Fatal(err)
		}
		if next, err = decodeBoundary(2, next.encode(), nextRes); err != nil {
			t.Fatal(err)
		}
		if !first.match(next) {
			t.Fatalf("wide first %t: nothing matched", wideFirst)
		}
		if got := first.sample.delays; !slices.Equal(got, []int64{100, 1400}) {
			t.Errorf("wide first %t: delays %v, want a's 1400 ns added", wideFirst, got)
		}
		if first.sample.width() != 35 || len(first.sample.up) != 1 || len(next.sample.down) != 1 {
			t.Errorf("wide first %t: width %d, %d unmatched up, %d down", wideFirst, first.sample.width(), len(first.sample.up), len(next.sample.down))
		}
	}
}

// TestSampleRecordPacked: a join of 2,000 sampled packets a side stored
// in version 5 (delays as differences, keys in their width's bytes) reads
// back as in version 4, in at most 3 bytes a delay besides its key's
// bytes (16 in version 4); a delay that would
// overflow, a key with bits past its width and a truncated record are
// refused.
func TestSampleRecordPacked(t *testing.T) {
	cfg, up, down := samplePair(2, -2e6)
	for _, bits := range []int{sample.KeyBits, 34, sample.MinKeyBits} {
		_ = up.SetKeyBits(bits)
		_ = down.SetKeyBits(bits)
		j, err := sample.Join(up, down, 0)
		if err != nil {
			t.Fatal(err)
		}
		sj := newSampleJoin(cfg, j, 1e9)
		wide, packed := sj.encodeWide(nil), sj.encode(nil)
		// The two versions differ in the delays and keys only.
		n, kb := len(sj.delays), (bits+7)/8
		if per := float64(len(packed)-len(wide)+16*n) / float64(n); packed[0] != sampleRecord || per > float64(kb+3) {
			t.Errorf("%d-bit keys: version %d, %.1f bytes a delay and key, more than %d", bits, packed[0], per, kb+3)
		}
		a, errA := decodeSampleJoin(wide)
		b, errB := decodeSampleJoin(packed)
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if !slices.Equal(a.delays, sj.delays) || !slices.Equal(b.delays, sj.delays) || !slices.Equal(a.keys, sj.keys) || !slices.Equal(b.keys, sj.keys) ||
			!maps.Equal(b.up, sj.up) || !maps.Equal(b.down, sj.down) || b.width() != bits {
			t.Errorf("%d-bit keys: version 5 read back other delays, keys or entries", bits)
		}
		t.Logf("%d-bit keys: %d delays, %d bytes (version 4: %d)", bits, len(sj.delays), len(packed), len(wide))
	}
	cfg1, _ := sample.ForShift(7, 0)
	sj := &sampleJoin{cfg: cfg1, downCfg: cfg1, keyBits: 16, delays: []int64{-5, math.MaxInt64 - 1}, keys: []uint64{1 << 48, 2 << 48}, up: map[uint64]int64{}, down: map[uint64]int64{}}
	b := sj.encode(nil)
	if r, err := decodeSampleJoin(b); err != nil || !slices.Equal(r.delays, sj.delays) {
		t.Fatalf("extreme delays: %v %v", r, err)
	}
	head := 1 + 8 + 8 + 8 + 1 + 1 + 4 + 4
	over := slices.Clone(b)
	over[head] = 0x0a // first delay 5: the difference to the second overflows
	if _, err := decodeSampleJoin(over); err == nil {
		t.Error("a record whose delays overflow decoded")
	}
	for cut := range len(b) {
		if _, err := decodeSampleJoin(b[:cut]); err == nil {
			t.Errorf("the record cut at %d of %d bytes decoded", cut, len(b))
		}
	}
	sj.keyBits = 20 // keys in 3 bytes: set a bit past the 20th
	sj.keys = []uint64{1 << 44, 2 << 44}
	wide := sj.encode(nil)
	k := head + 1 // after the first delay (one byte: -5)
	wide[k+2] |= 0x80
	if _, err := decodeSampleJoin(wide); err == nil {
		t.Error("a key with bits past its width decoded")
	}
}
