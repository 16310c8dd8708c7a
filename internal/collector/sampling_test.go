package collector

import (
	"testing"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// SamplingFor takes the sample at the target's rate where it gives a
// large flow enough delays; above that, a sample dense enough for the
// large flows where it takes fewer bytes than the LDS and the target's
// sample, within half of max_entries, and the LDS otherwise; a path
// that samples densely goes back only past denseSlack. With "always",
// an older probe's reports (no names) or costs not yet seen, the LDS
// stays on at the target's rate.
func TestSamplingFor(t *testing.T) {
	cfg := DefaultConfig()
	always := DefaultConfig()
	always.Flows.LDS = ldsAlways
	const maxEntries = 16384
	// Bytes per entry of a sample of 32-bit keys above the rate, and LDS
	// bytes per packet as docs/benchmarks.md measured them at 20 k, 50 k
	// and 1 M packets/s (2 × 4,096 cells).
	cost := SampleCost{EntryBytes: 6.6, LDSPacketBytes: 48553.0 / 20_000}
	for _, c := range []struct {
		name      string
		cfg       Config
		peak      uint64
		cost      SampleCost
		off       bool
		named     bool
		wantShift int
		wantOff   bool
	}{
		{"10 k: the target's rate covers", cfg, 10_000, cost, false, true, 3, true},
		{"10 k, no names", cfg, 10_000, cost, true, false, 3, false},
		{"20 k: dense", cfg, 20_000, cost, false, true, 3, true},
		{"20 k, costs unseen", cfg, 20_000, SampleCost{}, false, true, 4, false},
		{"20 k, always", always, 20_000, cost, false, true, 4, false},
		{"20 k, no names", cfg, 20_000, cost, true, false, 4, false},
		{"50 k: dense", cfg, 50_000, SampleCost{EntryBytes: 6.6, LDSPacketBytes: 63444.0 / 50_000}, false, true, 3, true},
		{"100 k: over half of max_entries", cfg, 100_000, SampleCost{EntryBytes: 6.6, LDSPacketBytes: 69749.0 / 100_000}, false, true, 7, false},
		{"1 M: the LDS", cfg, 1_000_000, SampleCost{EntryBytes: 6.6, LDSPacketBytes: 76607.0 / 1_000_000}, false, true, 10, false},
		// 60 k packets, LDS 0.85 bytes a packet: dense 7,500 × 6.6 = 49.5 KB
		// against 51 + 7.4 = 58.4 KB; at 0.7 a packet 42 + 7.4 = 49.4 KB:
		// dense only for a path already dense, within denseSlack.
		{"60 k, dense cheaper", cfg, 60_000, SampleCost{EntryBytes: 6.6, LDSPacketBytes: 0.85}, false, true, 3, true},
		{"60 k, LDS a little cheaper, LDS on", cfg, 60_000, SampleCost{EntryBytes: 6.6, LDSPacketBytes: 0.7}, false, true, 6, false},
		{"60 k, LDS a little cheaper, dense", cfg, 60_000, SampleCost{EntryBytes: 6.6, LDSPacketBytes: 0.7}, true, true, 3, true},
		{"60 k, LDS far cheaper, dense", cfg, 60_000, SampleCost{EntryBytes: 6.6, LDSPacketBytes: 0.3}, true, true, 6, false},
	} {
		target := sample.ShiftFor(c.peak, 1000)
		shift, off := c.cfg.SamplingFor(c.peak, target, c.cost, c.off, c.named, maxEntries)
		if shift != c.wantShift || off != c.wantOff {
			t.Errorf("%s: shift %d off %t, want %d and %t", c.name, shift, off, c.wantShift, c.wantOff)
		}
	}
	if got := denseShift(128, 16); got != 3 {
		t.Errorf("denseShift(128, 16) = %d, want 3", got)
	}
	if got := denseShift(8, 16); got != -1 {
		t.Errorf("denseShift(8, 16) = %d, want -1", got)
	}
}

// A path of 20,000 packets an epoch whose upstream reports show the LDS
// taking more than a sample dense enough for its large flows samples at
// 1/8 (16 delays of a 128-packet flow) with no LDS, and a probe that
// connects then is told so in its assignment; once the epochs are five
// times busier the LDS is back, at the target's rate.
func TestDenseSampleInPlaceOfLDS(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	ps := c.paths["p"]
	s, err := sample.New(sample.Config{Seed: 1, Threshold: 1 << 61})
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); s.Len() < 1250; id++ {
		s.Insert(id, int64(id))
	}
	up := &side{sample: s, Pending: store.Pending{Report: &owlv1.EpochReport{Counters: &owlv1.Counters{Packets: 20_000},
		Lds: make([]byte, 48_553), Sample: make([]byte, 1250*7)}}}
	noteSampleCost(ps, up)
	c.worker.noteSampleRate(ps, 20_000, samplingNamed)
	a := c.pathConfig("b").GetPaths()[0]
	if a.GetSampleShift() != 3 || !a.GetLdsOff() {
		t.Fatalf("20,000 packets: rate 1/%d, lds_off %t; want 1/8 and no LDS", 1<<a.GetSampleShift(), a.GetLdsOff())
	}
	for range 8 {
		c.worker.noteSampleRate(ps, 100_000, samplingNamed)
	}
	if a := c.pathConfig("b").GetPaths()[0]; a.GetSampleShift() != 7 || a.GetLdsOff() {
		t.Errorf("100,000 packets: rate 1/%d, lds_off %t; want 1/128 and the LDS", 1<<a.GetSampleShift(), a.GetLdsOff())
	}
}
