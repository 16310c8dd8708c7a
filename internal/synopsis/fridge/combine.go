package fridge

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// DefaultBinsPerOctave is the width of Combine's delay bins: 1/8 octave,
// 9% apart.
const DefaultBinsPerOctave = 8

// maxBinsPerOctave bounds Combine's bins.
const maxBinsPerOctave = 64

// Weighted is a delay with the number of request/response pairs it stands
// for, ready for a weighted quantile sketch.
type Weighted struct {
	DelayNS int64
	Weight  float64
}

// binStats is what one delay bin holds for each fridge.
type binStats struct {
	f, v []float64 // f̂_k = Σ corr, V̂_k = Σ corr², by fridge
	inv  float64   // Σ_k 1/V̂_k once weight has computed it
}

// Combine weighs a batch of samples from a Set (or a lone Fridge) by
// inverse variance (§2.3.2). In each delay bin, binsPerOctave to the
// octave (log-spaced; delays ≤ 0 share one bin), fridge k's estimate of
// the count is f̂_k = Σ corr and its variance estimate V̂_k = Σ corr², and
// its weight ŵ_k = (1/V̂_k)/Σ_j(1/V̂_j) over the fridges with a sample in
// the bin. Each sample comes out weighing ŵ_k·corr, so that the weights
// of a bin add up to its estimated count Σ_k ŵ_k·f̂_k.
//
// A fridge with no sample in a bin is left out of that bin's weights: its
// estimate there is 0 and so is its V̂, which in the paper's formula would
// give it all the weight while knowing least (V̂ = 0 means no evidence,
// not no variance). Leaving it out treats its variance as unbounded.
//
// The weights are estimated from the samples they weigh. Where a fridge's
// samples in a bin survived far fewer insertions than their delay implies
// (responses after the traffic stopped or slowed, as in a retired Set),
// its V̂ is small, its weight near 1, and its estimate, unbiased only
// through rare large corrections, far too low: on the dissertation's
// synthetic traces the top percentiles came out up to 3 octaves low
// (docs/evaluation.md). Set.Pooled needs no weights and does not have
// this fault; Combine is the paper's method, kept for comparison.
//
// A single fridge's samples come out with weight corr.
func Combine(samples []Sample, binsPerOctave int) ([]Weighted, error) {
	bins, err := combineBins(samples, binsPerOctave)
	if err != nil {
		return nil, err
	}
	out := make([]Weighted, len(samples))
	for i, s := range samples {
		out[i] = Weighted{DelayNS: s.DelayNS, Weight: bins.stats[bins.binOf[i]].weight(s.Fridge) * s.Corr}
	}
	return out, nil
}

// combined is the per-bin statistics of a batch, by bin index.
type combined struct {
	binsPerOctave int
	fridges       int
	stats         map[int]*binStats
	binOf         []int // bin of each sample
}

// binOf is the bin of a delay: floor(binsPerOctave·log2(d)), or −1 for
// d ≤ 0 (d = 1 ns is bin 0).
func binOf(delayNS int64, binsPerOctave int) int {
	if delayNS <= 0 {
		return -1
	}
	return int(math.Floor(float64(binsPerOctave) * math.Log2(float64(delayNS))))
}

func combineBins(samples []Sample, binsPerOctave int) (*combined, error) {
	if binsPerOctave < 1 || binsPerOctave > maxBinsPerOctave {
		return nil, fmt.Errorf("combining fridge samples: %d bins per octave out of range [1, %d]", binsPerOctave, maxBinsPerOctave)
	}
	c := &combined{binsPerOctave: binsPerOctave, stats: make(map[int]*binStats)}
	for i, s := range samples {
		if s.Fridge < 0 || s.Fridge >= MaxFridges {
			return nil, fmt.Errorf("combining fridge samples: sample %d from fridge %d, want 0 to %d", i, s.Fridge, MaxFridges-1)
		}
		if !(s.Corr >= 1 && s.Corr2 >= 1) || math.IsInf(s.Corr2, 0) {
			return nil, fmt.Errorf("combining fridge samples: sample %d has correction %v (square %v), want finite and ≥ 1", i, s.Corr, s.Corr2)
		}
		c.fridges = max(c.fridges, s.Fridge+1)
	}
	c.binOf = make([]int, len(samples))
	for i, s := range samples {
		b := binOf(s.DelayNS, binsPerOctave)
		c.binOf[i] = b
		st := c.stats[b]
		if st == nil {
			st = &binStats{f: make([]float64, c.fridges), v: make([]float64, c.fridges)}
			c.stats[b] = st
		}
		st.f[s.Fridge] += s.Corr
		st.v[s.Fridge] += s.Corr2
	}
	return c, nil
}

// weight is ŵ_k of fridge k in the bin.
func (st *binStats) weight(k int) float64 {
	if st.inv == 0 {
		for _, v := range st.v {
			if v > 0 {
				st.inv += 1 / v
			}
		}
	}
	return (1 / st.v[k]) / st.inv
}

// estimate is the combined count of bin b and its variance 1/Σ_k(1/V̂_k),
// the variance of the inverse-variance weighted mean.
func (c *combined) estimate(b int) (count, variance float64) {
	st := c.stats[b]
	if st == nil {
		return 0, 0
	}
	inv := 0.0
	for _, v := range st.v {
		if v > 0 {
			inv += 1 / v
		}
	}
	for k, v := range st.v {
		if v > 0 {
			count += (1 / v) / inv * st.f[k]
		}
	}
	return count, 1 / inv
}

// CDF is the distribution of weighted delays (eq. 2.3), linear between
// the delays it holds.
type CDF struct {
	delayNS []float64
	cum     []float64 // share of the weight at or below delayNS[i]
	total   float64
}

// NewCDF builds the distribution of ws, which it does not modify. It
// fails when ws holds no positive weight or a weight that is negative or
// not finite.
func NewCDF(ws []Weighted) (*CDF, error) {
	s := make([]Weighted, 0, len(ws))
	for i, w := range ws {
		if !(w.Weight >= 0) || math.IsInf(w.Weight, 0) {
			return nil, fmt.Errorf("delay distribution: weight %d is %v, want finite and ≥ 0", i, w.Weight)
		}
		if w.Weight > 0 {
			s = append(s, w)
		}
	}
	if len(s) == 0 {
		return nil, fmt.Errorf("delay distribution of %d samples: no positive weight", len(ws))
	}
	slices.SortFunc(s, func(a, b Weighted) int { return cmp.Compare(a.DelayNS, b.DelayNS) })
	c := &CDF{}
	for _, w := range s {
		c.total += w.Weight
		if n := len(c.delayNS); n > 0 && c.delayNS[n-1] == float64(w.DelayNS) {
			c.cum[n-1] = c.total
			continue
		}
		c.delayNS = append(c.delayNS, float64(w.DelayNS))
		c.cum = append(c.cum, c.total)
	}
	for i := range c.cum {
		c.cum[i] /= c.total
	}
	return c, nil
}

// Total is the sum of the weights: the estimated number of pairs.
func (c *CDF) Total() float64 { return c.total }

// Quantile is the delay in ns at which the distribution reaches q,
// interpolated linearly between the delays held; the smallest delay for
// q at or below its share, the largest for q ≥ 1.
func (c *CDF) Quantile(q float64) float64 {
	if math.IsNaN(q) {
		return math.NaN()
	}
	j, _ := slices.BinarySearch(c.cum, q)
	switch {
	case j == 0:
		return c.delayNS[0]
	case j >= len(c.cum):
		return c.delayNS[len(c.delayNS)-1]
	}
	f0, f1 := c.cum[j-1], c.cum[j]
	return c.delayNS[j-1] + (q-f0)/(f1-f0)*(c.delayNS[j]-c.delayNS[j-1])
}

// At is the share of the weight at or below delayNS, interpolated
// linearly between the delays held.
func (c *CDF) At(delayNS float64) float64 {
	j, found := slices.BinarySearch(c.delayNS, delayNS)
	switch {
	case found:
		return c.cum[j]
	case j == 0:
		return 0
	case j >= len(c.delayNS):
		return 1
	}
	d0, d1 := c.delayNS[j-1], c.delayNS[j]
	return c.cum[j-1] + (delayNS-d0)/(d1-d0)*(c.cum[j]-c.cum[j-1])
}

// Quantiles is the delays in ns at which the distribution of ws reaches
// each of qs.
func Quantiles(ws []Weighted, qs []float64) ([]float64, error) {
	c, err := NewCDF(ws)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(qs))
	for i, q := range qs {
		out[i] = c.Quantile(q)
	}
	return out, nil
}
