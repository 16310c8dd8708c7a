package evaluate

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/owl-latency/owl/internal/synopsis/fridge"
)

// FridgeConfig is the synthetic setup of Zheng's dissertation (§2.4):
// requests at a constant rate, a share of them answered after a delay
// log-uniform between MinDelay and a maximum T, requests and responses
// interleaved in time order; for each T and memory size, a single fridge,
// a Set and the simple array of equal memory measure the delays.
type FridgeConfig struct {
	RatePerSec float64         // requests/s
	Requests   int             // requests per trace
	Answered   float64         // share of requests answered
	MinDelay   time.Duration   // lower end of the log-uniform delays
	MaxDelays  []time.Duration // the T of each trace
	// Entries are the memory sizes, in fridge entries (fridge.EntryBytes
	// each); the simple array gets as many bytes.
	Entries []int
	// FridgeLifetime is the single fridge's average lifetime as a share of
	// the requests offered in T: p = M/(FridgeLifetime·rate·T) (§2.2.3).
	FridgeLifetime float64
	// SetFridges is the number of fridges in a Set.
	SetFridges int
	// Seeds is the number of traces per T; errors are averaged over them.
	Seeds int
	Seed  uint64
	// KeepSending goes on sending requests, never answered, at the same
	// rate until the last response, as on a link whose traffic goes on;
	// without it the responses to the last requests come after the traffic
	// stopped, as in the dissertation's traces.
	KeepSending bool
	// NoCorrection counts every fridge sample once (correction 1), which
	// turns the fridges into sampled simple arrays: for checking that the
	// comparison notices.
	NoCorrection bool
}

// DefaultFridgeConfig is the dissertation's setting: 10⁶ requests/s, 40%
// answered, 1.25 M requests (0.5 M delays) per trace; delays from 1 µs to
// T = 1, 10 and 100 ms; 2^8, 2^10 and 2^12 entries; a single fridge whose
// lifetime is the requests of T/2; Sets of 4 fridges; 3 seeds (the
// dissertation uses 10).
func DefaultFridgeConfig() FridgeConfig {
	return FridgeConfig{RatePerSec: 1e6, Requests: 1_250_000, Answered: 0.4, MinDelay: time.Microsecond,
		MaxDelays: []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond},
		Entries:   []int{1 << 8, 1 << 10, 1 << 12}, FridgeLifetime: 0.5, SetFridges: 4, Seeds: 3, Seed: 1}
}

// Validate reports parameters out of range.
func (c FridgeConfig) Validate() error {
	switch {
	case !(c.RatePerSec > 0 && c.RatePerSec <= 1e9):
		return fmt.Errorf("fridge evaluation: rate %v requests/s out of (0, 10⁹]", c.RatePerSec)
	case c.Requests < 1 || c.Seeds < 1:
		return fmt.Errorf("fridge evaluation: %d requests × %d seeds: want at least 1 of each", c.Requests, c.Seeds)
	case !(c.FridgeLifetime > 0) || c.SetFridges < 1:
		return fmt.Errorf("fridge evaluation: fridge lifetime %v of T and %d fridges per set: want both positive", c.FridgeLifetime, c.SetFridges)
	case !(c.Answered > 0 && c.Answered <= 1):
		return fmt.Errorf("fridge evaluation: answered share %v out of (0, 1]", c.Answered)
	case c.MinDelay <= 0 || len(c.MaxDelays) == 0 || len(c.Entries) == 0:
		return fmt.Errorf("fridge evaluation: need a positive minimum delay (%v), maximum delays and memory sizes", c.MinDelay)
	}
	for _, t := range c.MaxDelays {
		if t <= c.MinDelay {
			return fmt.Errorf("fridge evaluation: maximum delay %v not above the minimum %v", t, c.MinDelay)
		}
	}
	return nil
}

// The methods of a FridgeRow.
const (
	MethodSimple      = "simple"
	MethodFridge      = "fridge"
	MethodSetCombined = "set, §2.3.2 weights"
	MethodSetPooled   = "set, pooled"
	MethodSetDefault  = "set 10µs–10s, pooled"
)

// FridgeRow is one method's accuracy at one T and memory size: the mean,
// over the seeds, of |log2(estimate/truth)| at three percentiles and of
// the largest such gap between the 5th and the 95th.
type FridgeRow struct {
	MaxDelay    time.Duration
	Entries     int // fridge entries of the memory
	MemoryBytes int
	Method      string
	Samples     float64 // matched responses per trace
	P50, P95    float64
	P99, MaxGap float64
}

// fridgeTrace is one synthetic trace: requests every gapNS ns and the
// responses in time order.
type fridgeTrace struct {
	gapNS  int64
	reqs   []uint64 // key of request i, sent at i·gapNS
	resps  []fridgeResp
	truth  *fridge.CDF
	delays int
}

type fridgeResp struct {
	tNS int64
	key uint64
}

func newFridgeTrace(c FridgeConfig, maxDelay time.Duration, seed uint64) (*fridgeTrace, error) {
	r := rand.New(rand.NewPCG(seed, 0xf1d6e))
	tr := &fridgeTrace{gapNS: int64(math.Round(1e9 / c.RatePerSec)), reqs: make([]uint64, c.Requests)}
	lo, span := float64(c.MinDelay), math.Log(float64(maxDelay)/float64(c.MinDelay))
	var truth []fridge.Weighted
	for i := range tr.reqs {
		tr.reqs[i] = r.Uint64()
		if r.Float64() >= c.Answered {
			continue
		}
		d := int64(lo * math.Exp(r.Float64()*span))
		tr.resps = append(tr.resps, fridgeResp{tNS: int64(i)*tr.gapNS + d, key: tr.reqs[i]})
		truth = append(truth, fridge.Weighted{DelayNS: d, Weight: 1})
	}
	slices.SortFunc(tr.resps, func(a, b fridgeResp) int { return cmp.Compare(a.tNS, b.tNS) })
	if n := len(tr.resps); c.KeepSending && n > 0 {
		for t := int64(len(tr.reqs)) * tr.gapNS; t <= tr.resps[n-1].tNS; t += tr.gapNS {
			tr.reqs = append(tr.reqs, r.Uint64())
		}
	}
	var err error
	if tr.truth, err = fridge.NewCDF(truth); err != nil {
		return nil, fmt.Errorf("fridge evaluation: truth of seed %d: %w", seed, err)
	}
	tr.delays = len(truth)
	return tr, nil
}

// rttMatcher is what the fridges and the simple array share.
type rttMatcher interface {
	Request(key uint64, tNS int64)
	Response(key uint64, tNS int64) (fridge.Sample, bool)
}

var (
	_ rttMatcher = (*fridge.Fridge)(nil)
	_ rttMatcher = (*fridge.Set)(nil)
	_ rttMatcher = (*fridge.Simple)(nil)
)

// replay plays the trace through m in time order (a request before a
// response of the same nanosecond) and returns the samples.
func (tr *fridgeTrace) replay(m rttMatcher) []fridge.Sample {
	var out []fridge.Sample
	next := 0
	for _, rs := range tr.resps {
		for ; next < len(tr.reqs) && int64(next)*tr.gapNS <= rs.tNS; next++ {
			m.Request(tr.reqs[next], int64(next)*tr.gapNS)
		}
		if s, ok := m.Response(rs.key, rs.tNS); ok {
			out = append(out, s)
		}
	}
	return out
}

// fridgeErrors are one estimate's errors against the truth.
type fridgeErrors struct{ p50, p95, p99, gap float64 }

// gapSteps is the resolution of the largest gap: percentiles 5 to 95 in
// steps of 0.25.
const gapSteps = 360

func compareCDF(truth *fridge.CDF, ws []fridge.Weighted) fridgeErrors {
	est, err := fridge.NewCDF(ws)
	if err != nil {
		inf := math.Inf(1)
		return fridgeErrors{inf, inf, inf, inf}
	}
	e := func(q float64) float64 { return math.Abs(math.Log2(est.Quantile(q) / truth.Quantile(q))) }
	out := fridgeErrors{p50: e(0.5), p95: e(0.95), p99: e(0.99)}
	for i := 0; i <= gapSteps; i++ {
		out.gap = max(out.gap, e(0.05+0.9*float64(i)/gapSteps))
	}
	return out
}

// RunFridge runs the comparison and returns its rows, by T, then memory,
// then method.
func RunFridge(c FridgeConfig) ([]FridgeRow, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var rows []FridgeRow
	for _, maxDelay := range c.MaxDelays {
		acc := make(map[int]map[string]*FridgeRow)
		for s := range c.Seeds {
			tr, err := newFridgeTrace(c, maxDelay, c.Seed+uint64(s))
			if err != nil {
				return nil, err
			}
			for _, m := range c.Entries {
				if acc[m] == nil {
					acc[m] = make(map[string]*FridgeRow)
				}
				if err := runFridgeMemory(c, tr, maxDelay, m, c.Seed+uint64(s), acc[m]); err != nil {
					return nil, err
				}
			}
		}
		for _, m := range c.Entries {
			for _, method := range []string{MethodSimple, MethodFridge, MethodSetCombined, MethodSetPooled, MethodSetDefault} {
				r := acc[m][method]
				n := float64(c.Seeds)
				r.Samples, r.P50, r.P95, r.P99, r.MaxGap = r.Samples/n, r.P50/n, r.P95/n, r.P99/n, r.MaxGap/n
				rows = append(rows, *r)
			}
		}
	}
	return rows, nil
}

// runFridgeMemory plays one trace through every method at m entries and
// adds their errors to acc, by method.
func runFridgeMemory(c FridgeConfig, tr *fridgeTrace, maxDelay time.Duration, m int, seed uint64, acc map[string]*FridgeRow) error {
	add := func(method string, samples []fridge.Sample, ws []fridge.Weighted) {
		if c.NoCorrection && method != MethodSimple {
			for i := range ws {
				ws[i].Weight = 1
			}
		}
		r := acc[method]
		if r == nil {
			r = &FridgeRow{MaxDelay: maxDelay, Entries: m, MemoryBytes: m * fridge.EntryBytes, Method: method}
			acc[method] = r
		}
		e := compareCDF(tr.truth, ws)
		r.Samples += float64(len(samples))
		r.P50, r.P95, r.P99, r.MaxGap = r.P50+e.p50, r.P95+e.p95, r.P99+e.p99, r.MaxGap+e.gap
	}
	simple, err := fridge.NewSimple(fridge.SimpleEntries(m), seed)
	if err != nil {
		return err
	}
	samples := tr.replay(simple)
	add(MethodSimple, samples, weighCorr(samples))

	p, err := fridge.TuneEntryProb(m, c.RatePerSec, time.Duration(c.FridgeLifetime*float64(maxDelay)))
	if err != nil {
		return err
	}
	f, err := fridge.New(fridge.Config{Entries: m, EntryProb: p, Seed: seed})
	if err != nil {
		return err
	}
	samples = tr.replay(f)
	add(MethodFridge, samples, weighCorr(samples))

	z := fridge.Sizing{MemoryBytes: m * fridge.EntryBytes, Fridges: c.SetFridges, MinDelay: c.MinDelay, MaxDelay: maxDelay, Seed: seed}
	set, err := fridge.NewSized(z, c.RatePerSec)
	if err != nil {
		return fmt.Errorf("fridge evaluation: set for T = %v, %d entries: %w", maxDelay, m, err)
	}
	samples = tr.replay(set)
	ws, err := fridge.Combine(samples, fridge.DefaultBinsPerOctave)
	if err != nil {
		return err
	}
	add(MethodSetCombined, samples, ws)
	add(MethodSetPooled, samples, set.Pooled(samples))

	z.MinDelay, z.MaxDelay = fridge.DefaultSizing().MinDelay, fridge.DefaultSizing().MaxDelay
	if set, err = fridge.NewSized(z, c.RatePerSec); err != nil {
		return fmt.Errorf("fridge evaluation: default set, %d entries: %w", m, err)
	}
	samples = tr.replay(set)
	add(MethodSetDefault, samples, set.Pooled(samples))
	return nil
}

// weighCorr weighs each sample by its own correction.
func weighCorr(samples []fridge.Sample) []fridge.Weighted {
	out := make([]fridge.Weighted, len(samples))
	for i, s := range samples {
		out[i] = fridge.Weighted{DelayNS: s.DelayNS, Weight: s.Corr}
	}
	return out
}

// WriteFridgeTable prints the rows under a line that states the setup.
func WriteFridgeTable(w io.Writer, c FridgeConfig, rows []FridgeRow) error {
	corr := ""
	if c.NoCorrection {
		corr = "; corrections forced to 1"
	}
	if c.KeepSending {
		corr += "; requests go on until the last response"
	}
	if _, err := fmt.Fprintf(w, "%d requests at %.3g/s, %.0f%% answered after log-uniform delays from %v to T; fridge lifetime %g·T; "+
		"sets of %d fridges; |log2(estimate/truth)| averaged over %d seeds%s\n",
		c.Requests, c.RatePerSec, 100*c.Answered, c.MinDelay, c.FridgeLifetime, c.SetFridges, c.Seeds, corr); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "T\tentries\tbytes\tmethod\tsamples\tp50 err\tp95 err\tp99 err\tmax gap 5–95%\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%v\t%d\t%d\t%s\t%.0f\t%.3f\t%.3f\t%.3f\t%.3f\t\n",
			r.MaxDelay, r.Entries, r.MemoryBytes, r.Method, r.Samples, r.P50, r.P95, r.P99, r.MaxGap)
	}
	return tw.Flush()
}
