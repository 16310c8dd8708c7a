package ptp

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/facebook/time/phc"
	fbptp "github.com/facebook/time/ptp/protocol"
	"golang.org/x/sys/unix"
)

func TestMeasureFormula(t *testing.T) {
	// The local clock is θ ahead of the reference; the request takes dUp,
	// the answer dDown. Reference times ride the TAI scale (UTC + 37 s).
	base := time.Unix(1_800_000_000, 0)
	const utc = 37 * time.Second
	for _, tc := range []struct {
		name             string
		theta, dUp, dDwn time.Duration
		fault            time.Duration
	}{
		{"symmetric", 300 * time.Microsecond, 20 * time.Microsecond, 20 * time.Microsecond, 0},
		{"asymmetric", -5 * time.Millisecond, 10 * time.Microsecond, 90 * time.Microsecond, 0},
		{"fault", 0, 15 * time.Microsecond, 15 * time.Microsecond, 300 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref3 := base                           // request leaves (reference time)
			ref4 := ref3.Add(tc.dUp)               // reaches the grandmaster
			ref1 := ref4.Add(7 * time.Microsecond) // answer leaves
			ref2 := ref1.Add(tc.dDwn)              // answer arrives
			local := func(r time.Time) time.Time { return r.Add(tc.theta) }
			m := measure(local(ref3), local(ref2), ref4.Add(utc), ref1.Add(utc), 0, 0, utc, int64(tc.fault))
			wantOffset := tc.theta + tc.fault + (tc.dDwn-tc.dUp)/2
			if time.Duration(m.offsetNS) != wantOffset {
				t.Errorf("offset %v, want %v", time.Duration(m.offsetNS), wantOffset)
			}
			if want := (tc.dUp + tc.dDwn) / 2; time.Duration(m.delayNS) != want {
				t.Errorf("delay %v, want %v", time.Duration(m.delayNS), want)
			}
			// The bound (the delay) covers the asymmetry error.
			if err := time.Duration(m.offsetNS) - tc.theta - tc.fault; err.Abs() > time.Duration(m.delayNS) {
				t.Errorf("error %v beyond the bound %v", err, time.Duration(m.delayNS))
			}
		})
	}
}

func TestFilterFitsDriftAndSkipsQueuedExchanges(t *testing.T) {
	// 20 ppm of frequency error, 2 µs exchanges, and every third exchange
	// queued 400 µs on the way back (its offset off by 200 µs).
	rng := rand.New(rand.NewPCG(1, 2))
	f := newFilter(16, int64(4*time.Second))
	const slope = 20e-6
	const offset0 = 1_000_000.0
	var at int64
	for i := range 40 {
		at = int64(i) * int64(time.Second)
		truth := offset0 + slope*float64(at)
		d := int64(2000 + rng.IntN(200))
		o := int64(truth) + int64(rng.IntN(401)) - 200
		if i%3 == 0 {
			d += 400_000
			o += 200_000
		}
		f.add(sample{atNS: at, offsetNS: o, boundNS: d})
	}
	fit, ok := f.estimate()
	if !ok {
		t.Fatal("no estimate")
	}
	truth := offset0 + slope*float64(at)
	if e := math.Abs(float64(fit.corr.at(at)) - truth); e > float64(fit.boundNS) || e > 1000 {
		t.Errorf("offset error %.0f ns, bound %d ns", e, fit.boundNS)
	}
	if math.Abs(fit.corr.slope-slope) > 2e-6 {
		t.Errorf("slope %.2f ppm, want 20", fit.corr.slope*1e6)
	}
	if fit.boundNS > 10_000 {
		t.Errorf("bound %d ns includes the queued exchanges", fit.boundNS)
	}
	// Extrapolated half a second on, still within the bound.
	later := at + int64(500*time.Millisecond)
	if e := math.Abs(float64(fit.corr.at(later)) - (offset0 + slope*float64(later))); e > float64(fit.boundNS) {
		t.Errorf("extrapolated error %.0f ns beyond bound %d", e, fit.boundNS)
	}
}

func TestSystemStates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		k     KernelTime
		err   error
		state State
		unc   time.Duration
	}{
		{"synchronized", KernelTime{State: unix.TIME_OK, MaxError: 16 * time.Millisecond, EstError: time.Millisecond}, nil, StateSynchronized, 16 * time.Millisecond},
		{"unsync flag", KernelTime{State: unix.TIME_OK, Unsync: true, MaxError: 16 * time.Second}, nil, StateUnsynchronized, 16 * time.Second},
		{"time error", KernelTime{State: unix.TIME_ERROR}, nil, StateUnsynchronized, 0},
		{"adjtimex fails", KernelTime{}, errors.New("boom"), StateUnknown, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSystem(time.Second, 0, func() (KernelTime, error) { return tc.k, tc.err })
			st := s.Status()
			if st.State != tc.state || time.Duration(st.UncertaintyNS) != tc.unc || st.Source != "system" {
				t.Errorf("status %+v, want state %v uncertainty %v", st, tc.state, tc.unc)
			}
			if got := s.Correct(12345); got != 12345 {
				t.Errorf("system clock moved a timestamp: %d", got)
			}
		})
	}
	// The real kernel answers without privileges.
	if _, err := ReadKernel(); err != nil {
		t.Errorf("adjtimex: %v", err)
	}
}

// fakeTime is a settable clock for the sources' own reads of time.
type fakeTime struct{ ns int64 }

func (f *fakeTime) now() time.Time { return time.Unix(0, f.ns) }

func TestPHCCorrectsSoftwareTimestamps(t *testing.T) {
	// The system clock runs 5 ms + 10 ppm ahead of the PHC; each reading
	// takes 3 µs.
	ft := &fakeTime{ns: 1_800_000_000e9}
	fail := false
	offsetAt := func(sysNS int64) time.Duration {
		return 5*time.Millisecond + time.Duration(10e-6*float64(sysNS-1_800_000_000e9))
	}
	read := func() (phc.SysoffResult, error) {
		if fail {
			return phc.SysoffResult{}, errors.New("device gone")
		}
		sys := time.Unix(0, ft.ns)
		return phc.SysoffResult{SysTime: sys, PHCTime: sys.Add(-offsetAt(ft.ns)), Offset: offsetAt(ft.ns), Delay: 3 * time.Microsecond}, nil
	}
	cfg := DefaultConfig()
	cfg.Source, cfg.Device = "phc", "/dev/ptp7"
	p, err := NewPHC(cfg, read)
	if err != nil {
		t.Fatal(err)
	}
	p.now = ft.now
	if st := p.Status(); st.State != StateAcquiring {
		t.Fatalf("before any reading: %+v", st)
	}
	for range 10 {
		p.measure()
		ft.ns += int64(time.Second)
	}
	st := p.Status()
	if st.State != StateSynchronized || st.Source != "phc" || st.Reference != "/dev/ptp7" || !st.Corrected {
		t.Fatalf("status %+v", st)
	}
	ts := ft.ns + int64(300*time.Millisecond)
	want := ts - int64(offsetAt(ts))
	if e := abs(p.Correct(ts) - want); e > st.UncertaintyNS {
		t.Errorf("corrected timestamp off by %d ns, uncertainty %d ns", e, st.UncertaintyNS)
	}
	if st.UncertaintyNS < int64(cfg.ReferenceError) || st.UncertaintyNS > int64(10*time.Microsecond) {
		t.Errorf("uncertainty %d ns: want the reference error and the read window, no more", st.UncertaintyNS)
	}
	// The device goes away: holdover, then unsynchronized.
	fail = true
	ft.ns += int64(5 * time.Second)
	p.measure()
	if st := p.Status(); st.State != StateHoldover || st.UncertaintyNS <= int64(cfg.ReferenceError) {
		t.Errorf("after a failed read: %+v", st)
	}
	ft.ns += int64(cfg.Holdover)
	p.measure()
	if st := p.Status(); st.State != StateUnsynchronized {
		t.Errorf("after the holdover: %+v", st)
	}
}

func TestOverSummarizesAnEpoch(t *testing.T) {
	b := newBase(0)
	pub := func(at int64, s State, unc int64) {
		b.publish(Status{Source: "ptp", State: s, AtNS: at, UncertaintyNS: unc, OffsetNS: at})
	}
	pub(100, StateSynchronized, 10)
	pub(900, StateSynchronized, 12)
	pub(1200, StateHoldover, 50)
	pub(1500, StateSynchronized, 11)
	pub(2100, StateUnsynchronized, 99)
	st := b.Over(1000, 2000)
	if st.State != StateHoldover || st.UncertaintyNS != 50 || st.OffsetNS != 1500 {
		t.Errorf("over [1000, 2000): %+v", st)
	}
	if st := b.Over(0, 1000); st.State != StateSynchronized || st.UncertaintyNS != 12 {
		t.Errorf("over [0, 1000): %+v", st)
	}
	if st := b.Over(3000, 4000); st.State != StateUnsynchronized {
		t.Errorf("over [3000, 4000): %+v", st)
	}
	if st := b.Over(0, 50); st.AtNS != 100 {
		t.Errorf("before everything: %+v", st)
	}
	// The ring keeps the newest statuses.
	for i := range 2 * historyLen {
		pub(int64(10_000+i), StateSynchronized, 1)
	}
	if st := b.Over(0, 10_000+2*historyLen); st.UncertaintyNS != 1 {
		t.Errorf("after wrapping: %+v", st)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"source", func(c *Config) { c.Source = "gps" }},
		{"ptp without server", func(c *Config) { c.Source = "ptp" }},
		{"ptp timestamping", func(c *Config) { c.Source, c.Server, c.Timestamping = "ptp", "gm", "both" }},
		{"phc without device", func(c *Config) { c.Source = "phc" }},
		{"interval", func(c *Config) { c.Interval = time.Millisecond }},
		{"window", func(c *Config) { c.Window = 0 }},
		{"drift", func(c *Config) { c.DriftPPM = -1 }},
		{"holdover", func(c *Config) { c.Holdover = time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			if err := c.Validate(); err == nil {
				t.Errorf("%+v validated", c)
			}
		})
	}
}

// fakeGM answers SPTP delay requests on loopback the way ptp4u does: a
// SYNC carrying T4 and an ANNOUNCE carrying T1, on the TAI scale. Its
// timestamps are read in user space, which keeps them in causal order with
// the client's kernel timestamps, so the client's bound still holds.
func fakeGM(t *testing.T) string {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	const utc = 37 * time.Second
	go func() {
		buf := make([]byte, 1500)
		for {
			n, addr, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			t4 := time.Now().Add(utc)
			var req fbptp.SyncDelayReq
			if err := fbptp.FromBytes(buf[:n], &req); err != nil {
				continue
			}
			sync := &fbptp.SyncDelayReq{
				Header: fbptp.Header{
					SdoIDAndMsgType: fbptp.NewSdoIDAndMsgType(fbptp.MessageSync, 0),
					Version:         fbptp.Version,
					MessageLength:   uint16(binary.Size(fbptp.Header{}) + binary.Size(fbptp.SyncDelayReqBody{})),
					FlagField:       fbptp.FlagUnicast,
					SequenceID:      req.SequenceID,
				},
				SyncDelayReqBody: fbptp.SyncDelayReqBody{OriginTimestamp: fbptp.NewTimestamp(t4)},
			}
			b, _ := fbptp.Bytes(sync)
			t1 := time.Now().Add(utc)
			conn.WriteToUDP(b, addr)
			ann := &fbptp.Announce{
				Header: fbptp.Header{
					SdoIDAndMsgType: fbptp.NewSdoIDAndMsgType(fbptp.MessageAnnounce, 0),
					Version:         fbptp.Version,
					MessageLength:   uint16(binary.Size(fbptp.Header{}) + binary.Size(fbptp.AnnounceBody{})),
					FlagField:       fbptp.FlagUnicast | fbptp.FlagPTPTimescale,
					SequenceID:      req.SequenceID,
				},
				AnnounceBody: fbptp.AnnounceBody{OriginTimestamp: fbptp.NewTimestamp(t1), CurrentUTCOffset: int16(utc / time.Second), GrandmasterIdentity: 0x42},
			}
			b, _ = fbptp.Bytes(ann)
			conn.WriteToUDP(b, addr)
		}
	}()
	return conn.LocalAddr().String()
}

func TestClientMeasuresAnArtificialOffset(t *testing.T) {
	gm := fakeGM(t)
	for _, correct := range []bool{true, false} {
		name := "corrected"
		if !correct {
			name = "reported only"
		}
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Source, cfg.Server, cfg.Interval, cfg.Correct = "ptp", gm, 20*time.Millisecond, correct
			cfg.Fault = 300 * time.Microsecond
			c, err := NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			deadline := time.Now().Add(10 * time.Second)
			for c.Status().State != StateSynchronized || c.measurements() < cfg.Window {
				if time.Now().After(deadline) {
					t.Fatalf("not synchronized: %+v", c.Status())
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			st := c.Status()
			t.Logf("%+v", st)
			if e := abs(st.OffsetNS - int64(cfg.Fault)); e > st.UncertaintyNS || e > int64(200*time.Microsecond) {
				t.Errorf("measured offset %v, want the fault %v within %v", time.Duration(st.OffsetNS), cfg.Fault, time.Duration(st.UncertaintyNS))
			}
			now := time.Now().UnixNano()
			e := abs(c.Correct(now) - now)
			if correct && e > st.UncertaintyNS {
				t.Errorf("corrected timestamp off by %v, beyond the uncertainty %v", time.Duration(e), time.Duration(st.UncertaintyNS))
			}
			if !correct && (e != int64(cfg.Fault) || st.UncertaintyNS < int64(cfg.Fault)) {
				t.Errorf("uncorrected: timestamp off by %v, uncertainty %v; want the fault in both", time.Duration(e), time.Duration(st.UncertaintyNS))
			}
		})
	}
}

func TestClientHoldsOverWhenTheGrandmasterIsSilent(t *testing.T) {
	// A socket that never answers.
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cfg := DefaultConfig()
	cfg.Source, cfg.Server, cfg.Interval = "ptp", conn.LocalAddr().String(), 20*time.Millisecond
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Status(); st.State != StateAcquiring || st.Detail == "" {
		t.Errorf("silent grandmaster: %+v", st)
	}
	if _, err := NewClient(Config{Source: "ptp", Server: "no-such-host.invalid", Interval: time.Second, Window: 4}); err == nil {
		t.Error("unresolvable grandmaster accepted")
	}
}

// BenchmarkCorrect is the per-packet cost of a fitted correction (offset
// and frequency) on a capture timestamp.
func BenchmarkCorrect(b *testing.B) {
	cfg := DefaultConfig()
	tr := newTracker(cfg, "ptp", "bench")
	for i := range 16 {
		tr.measured(sample{atNS: int64(i) * 1e9, offsetNS: 300_000 + int64(i)*20, boundNS: 5000}, 5000)
	}
	ts := int64(17e9)
	var sink int64
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sink += tr.Correct(ts + int64(i))
	}
	if sink == 0 {
		b.Fatal("no correction")
	}
}
