package fridge

import (
	"fmt"
	"math"
	"time"
)

// MaxFridges bounds the fridges of a Set.
const MaxFridges = 16

// Part is the shape of one fridge of a Set.
type Part struct {
	// Entries is M_k, the slots of this fridge.
	Entries int `yaml:"entries"`
	// EntryProb is p_k, the share of all requests offered to the Set that
	// enter this fridge. The parts' shares add up to at most 1.
	EntryProb float64 `yaml:"entry_prob"`
}

// Lifetime is the part's average lifetime M_k/p_k in requests offered to
// the Set.
func (p Part) Lifetime() float64 { return float64(p.Entries) / p.EntryProb }

// SetConfig is the shape of a Set.
type SetConfig struct {
	Parts []Part `yaml:"parts"`
	// Seed keys the hash that routes a key to its fridge and slot.
	Seed uint64 `yaml:"seed"`
}

// Validate reports parameters out of range.
func (c SetConfig) Validate() error {
	if len(c.Parts) < 1 || len(c.Parts) > MaxFridges {
		return fmt.Errorf("fridge set of %d fridges: want 1 to %d", len(c.Parts), MaxFridges)
	}
	sum := 0.0
	for k, p := range c.Parts {
		if err := (Config{Entries: p.Entries, EntryProb: p.EntryProb}).Validate(); err != nil {
			return fmt.Errorf("fridge %d of the set: %w", k, err)
		}
		sum += p.EntryProb
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("fridge set entry probabilities add up to %v: a request enters at most one fridge, so at most 1", sum)
	}
	return nil
}

// Set is several fridges sharing one counter: a request goes to fridge k
// with probability p_k (by a hash of its key) or to none, and every request
// offered counts as an insertion for all of them, so fridge k's samples are
// corrected by p_k^-1·(1 − p_k/M_k)^-x with the Set's x (§2.3.2).
type Set struct {
	cfg  SetConfig
	tabs []table
	// fridge k takes lower hash bits in [upper[k-1], upper[k])
	upper   [MaxFridges]uint64
	counter uint64
	// pooled is PooledCorr(x) for x below pooledSmall, computed once:
	// most pairs are answered within a few requests.
	pooled [pooledSmall]float64
}

// pooledSmall is the number of insertions below which PooledCorr reads
// its value from a table instead of computing one exponential per fridge.
const pooledSmall = 256

// NewSet returns an empty Set.
func NewSet(cfg SetConfig) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s := &Set{}
	cum, prev := 0.0, uint64(0)
	for k, p := range cfg.Parts {
		cum += p.EntryProb
		u := min(threshold(cum), 1<<32)
		if u <= prev {
			return nil, fmt.Errorf("%w: fridge %d of the set: entry probability %v vanishes at 32-bit resolution",
				ErrConfig, k, p.EntryProb)
		}
		s.tabs = append(s.tabs, newTable(p.Entries, float64(u-prev)/(1<<32)))
		s.upper[k] = u
		prev = u
	}
	cfg.Parts = append([]Part(nil), cfg.Parts...)
	s.cfg = cfg
	for x := range s.pooled {
		s.pooled[x] = s.pooledCorr(uint64(x))
	}
	return s, nil
}

// Config is the Set's configuration.
func (s *Set) Config() SetConfig {
	c := s.cfg
	c.Parts = append([]Part(nil), c.Parts...)
	return c
}

// Len is the number of fridges.
func (s *Set) Len() int { return len(s.tabs) }

// EntryProb is the entry probability in effect for fridge k (its Part's
// rounded to a multiple of 2^-32), or 0 for an index out of range.
func (s *Set) EntryProb(k int) float64 {
	if k < 0 || k >= len(s.tabs) {
		return 0
	}
	return 1 / s.tabs[k].invP
}

// MemoryBytes is the memory of all entries (EntryBytes each).
func (s *Set) MemoryBytes() int {
	n := 0
	for i := range s.tabs {
		n += len(s.tabs[i].keys)
	}
	return n * EntryBytes
}

// Insertions is the number of requests offered so far.
func (s *Set) Insertions() uint64 { return s.counter }

// route is the fridge a hash goes to, or −1: the number of fridges whose
// range ends at or below the hash's lower bits, counted without branches
// (which fridge a random hash picks is what a branch predictor cannot
// guess): up−u−1 wraps around, its top bit set, when u ≥ up (both are
// below 2^33).
func (s *Set) route(h uint64) int {
	u := h & 0xffffffff
	k := 0
	for _, up := range s.upper[:len(s.tabs)] {
		k += int((up - u - 1) >> 63)
	}
	if k == len(s.tabs) {
		return -1
	}
	return k
}

// Request offers a request with its key at time tNS: the counter counts
// it, and if it enters a fridge it overwrites its slot there.
func (s *Set) Request(key uint64, tNS int64) {
	s.counter++
	h := hash(key, s.cfg.Seed)
	k := s.route(h)
	if k < 0 {
		return
	}
	t := &s.tabs[k]
	t.put(t.index(h), key, tNS, s.counter)
}

// Offer is Request for traffic whose requests may be sent again (a TCP
// retransmission): when the key's slot holds the same key already, the
// waiting request is taken out and neither is kept, so that the pair
// gives no sample (Karn's rule: which copy the response answers cannot be
// told), and Offer says so. One look-up, where Response then Request
// would take two. The counter counts every request offered.
func (s *Set) Offer(key uint64, tNS int64) (again bool) {
	s.counter++
	h := hash(key, s.cfg.Seed)
	k := s.route(h)
	if k < 0 {
		return false
	}
	t := &s.tabs[k]
	i := t.index(h)
	if t.holds(i, key) {
		t.remove(i)
		return true
	}
	t.put(i, key, tNS, s.counter)
	return false
}

// Response looks for the request with the same key in its fridge; if it is
// still there it is removed and its sample returned, with its fridge's
// index.
func (s *Set) Response(key uint64, tNS int64) (Sample, bool) {
	h := hash(key, s.cfg.Seed)
	k := s.route(h)
	if k < 0 {
		return Sample{}, false
	}
	t := &s.tabs[k]
	smp, ok := t.take(t.index(h), key, tNS, s.counter)
	smp.Fridge = k
	return smp, ok
}

// Take is Response for a caller that weighs its samples with
// PooledCorr: it returns the delay and the insertions x only, and spends
// no exponential on the sample's own correction.
func (s *Set) Take(key uint64, tNS int64) (delayNS int64, x uint64, ok bool) {
	h := hash(key, s.cfg.Seed)
	k := s.route(h)
	if k < 0 {
		return 0, 0, false
	}
	t := &s.tabs[k]
	return t.delay(t.index(h), key, tNS, s.counter)
}

// Exchange is Take(respKey, tNS) then Offer(reqKey, tNS), for a packet
// that answers one request and is another (a TCP segment that carries
// data and an ACK): when both keys go to a fridge, both of their slots
// are read before either is decided on, so that the two reads from
// memory overlap.
func (s *Set) Exchange(respKey, reqKey uint64, tNS int64) (delayNS int64, x uint64, ok, again bool) {
	h1, h2 := hash(respKey, s.cfg.Seed), hash(reqKey, s.cfg.Seed)
	k1, k2 := s.route(h1), s.route(h2)
	if k1 < 0 || k2 < 0 {
		delayNS, x, ok = s.Take(respKey, tNS)
		return delayNS, x, ok, s.Offer(reqKey, tNS)
	}
	t1, t2 := &s.tabs[k1], &s.tabs[k2]
	i1, i2 := t1.index(h1), t2.index(h2)
	key1, key2 := t1.keys[i1], t2.keys[i2]
	if key1 == respKey {
		delayNS, x, ok = t1.delay(i1, respKey, tNS, s.counter)
		key2 = t2.keys[i2] // the same slot, if both keys share it, was emptied
	}
	s.counter++
	if key2 == reqKey && t2.holds(i2, reqKey) {
		t2.remove(i2)
		return delayNS, x, ok, true
	}
	t2.put(i2, reqKey, tNS, s.counter)
	return delayNS, x, ok, false
}

// Reset empties the fridges and restarts the counter.
func (s *Set) Reset() {
	for i := range s.tabs {
		s.tabs[i].reset()
	}
	s.counter = 0
}

// Sizing sizes a Set from what its user knows: the memory, the delays to
// expect and, at each epoch, the request rate. See Config for the rule.
type Sizing struct {
	// MemoryBytes is the budget for all entries (EntryBytes each).
	MemoryBytes int `yaml:"memory_bytes"`
	// Fridges is the number of fridges; the memory is split evenly.
	Fridges int `yaml:"fridges"`
	// MinDelay and MaxDelay are the range of delays to measure well.
	MinDelay time.Duration `yaml:"min_delay"`
	MaxDelay time.Duration `yaml:"max_delay"`
	// Seed keys the Set's hash.
	Seed uint64 `yaml:"seed"`
}

// DefaultSizing is 96 KiB (4,096 entries) in 4 fridges for delays from
// 10 µs to 10 s.
func DefaultSizing() Sizing {
	return Sizing{MemoryBytes: 4096 * EntryBytes, Fridges: 4, MinDelay: 10 * time.Microsecond,
		MaxDelay: 10 * time.Second, Seed: 0x66726964676573}
}

// Validate reports parameters out of range.
func (z Sizing) Validate() error {
	if z.Fridges < 1 || z.Fridges > MaxFridges {
		return fmt.Errorf("fridge sizing: %d fridges out of range [1, %d]", z.Fridges, MaxFridges)
	}
	if per := z.MemoryBytes / EntryBytes / z.Fridges; per < 2 || per > MaxEntries {
		return fmt.Errorf("fridge sizing: %d bytes give %d entries per fridge, want 2 to %d", z.MemoryBytes, per, MaxEntries)
	}
	if z.MinDelay <= 0 || z.MaxDelay < z.MinDelay {
		return fmt.Errorf("fridge sizing: delay range [%v, %v] is empty or not positive", z.MinDelay, z.MaxDelay)
	}
	return nil
}

// Config sizes the Set for ratePerSec requests/s (the caller passes the
// rate it measured over the previous epoch).
//
// The rule: the memory is split evenly into the fridges, and their average
// lifetimes M_k/p_k, in requests, are spread geometrically from
// rate·MinDelay to rate·MaxDelay, the first fridge shortest: a response
// at delay d is best caught by the fridge whose lifetime is the rate·d
// requests offered meanwhile (§2.2.3). Since a request enters at most one
// fridge, Σ p_k ≤ 1, so Σ M_k/lifetime_k ≤ 1: when the short end cannot be
// met (the memory outlasts rate·MinDelay requests), the shortest lifetime
// is raised until the shares add up to exactly 1 (every request enters
// some fridge) and the others are spread from it to rate·MaxDelay. When
// even rate·MaxDelay requests fit in the memory, or the rate is not
// positive (no traffic seen yet), every lifetime is the whole memory and
// every request enters some fridge.
//
// The corrections count requests, not time, so a rate other than the one
// the Set was sized for never biases its estimates: it moves the range of
// delays where their variance is low (at twice the rate, lifetimes last
// half as long in seconds, and the longest delays survive less often, with
// larger corrections). The caller re-sizes between epochs with a new Set;
// responses to requests of the old epoch still find them in the old Set,
// whose x stays exact because nothing is inserted there any more, so the
// old Set should answer responses (new Set first) for MaxDelay after the
// switch; weigh its samples with Pooled, not Combine, since their x no
// longer grows with their delay.
func (z Sizing) Config(ratePerSec float64) (SetConfig, error) {
	if err := z.Validate(); err != nil {
		return SetConfig{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if math.IsNaN(ratePerSec) || math.IsInf(ratePerSec, 0) {
		return SetConfig{}, fmt.Errorf("%w: fridge sizing for a request rate of %v/s", ErrConfig, ratePerSec)
	}
	entries := z.MemoryBytes / EntryBytes
	parts := make([]Part, z.Fridges)
	for k := range parts {
		parts[k].Entries = entries / z.Fridges
		if k < entries%z.Fridges {
			parts[k].Entries++
		}
	}
	lifetimes := sizeLifetimes(parts, entries, ratePerSec*z.MinDelay.Seconds(), ratePerSec*z.MaxDelay.Seconds())
	for k := range parts {
		parts[k].EntryProb = math.Max(minEntryProb, float64(parts[k].Entries)/lifetimes[k])
	}
	return SetConfig{Parts: parts, Seed: z.Seed}, nil
}

// NewSized is NewSet(z.Config(ratePerSec)).
func NewSized(z Sizing, ratePerSec float64) (*Set, error) {
	cfg, err := z.Config(ratePerSec)
	if err != nil {
		return nil, err
	}
	return NewSet(cfg)
}

// sizeLifetimes returns the lifetimes of Config's rule for lifetimes
// wanted from lo to hi requests.
func sizeLifetimes(parts []Part, entries int, lo, hi float64) []float64 {
	shares := func(lo float64) float64 {
		s := 0.0
		for k, l := range geometric(lo, hi, len(parts)) {
			s += float64(parts[k].Entries) / l
		}
		return s
	}
	if !(hi > float64(entries)) {
		return geometric(float64(entries), float64(entries), len(parts))
	}
	if shares(lo) <= 1 {
		return geometric(lo, hi, len(parts))
	}
	// shares falls as lo rises; at lo = hi it is entries/hi < 1.
	a, b := math.Log(math.Max(lo, 1e-300)), math.Log(hi)
	for range 100 {
		m := (a + b) / 2
		if shares(math.Exp(m)) > 1 {
			a = m
		} else {
			b = m
		}
	}
	return geometric(math.Exp(b), hi, len(parts))
}

// geometric is n values spread geometrically from lo to hi (hi alone when
// n is 1).
func geometric(lo, hi float64, n int) []float64 {
	out := make([]float64, n)
	if n == 1 {
		out[0] = hi
		return out
	}
	for k := range out {
		out[k] = lo * math.Pow(hi/lo, float64(k)/float64(n-1))
	}
	return out
}

// PooledCorr is the correction of a sample that survived x insertions in
// any fridge of the Set: 1/Σ_k p_k·(1 − p_k/M_k)^x. Since the counter is
// shared, a pair whose request was followed by x others is reported by
// fridge k with probability p_k·(1 − p_k/M_k)^x, and by the Set with the
// sum of these (a request enters one fridge at most), whichever fridge it
// entered; so 1/sum is the Horvitz–Thompson correction of the Set as one
// sampler. Its variance for pairs of equal x is that of the
// inverse-variance combination with exact variances, with no weights to
// estimate; PooledCorr is never above the sample's own Corr.
func (s *Set) PooledCorr(x uint64) float64 {
	if x < pooledSmall {
		return s.pooled[x]
	}
	return s.pooledCorr(x)
}

// pooledCorr computes PooledCorr(x).
func (s *Set) pooledCorr(x uint64) float64 {
	q := 0.0
	for i := range s.tabs {
		t := &s.tabs[i]
		q += math.Exp(-float64(x)*t.logStay) / t.invP
	}
	if !(q >= 1/maxCorrection) {
		return maxCorrection
	}
	return 1 / q
}

// Pooled weighs samples of this Set by PooledCorr instead of Combine's
// per-bin weights: each comes out weighing the number of pairs it stands
// for, unbiased whatever the delays and the traffic. Samples must come
// from this Set (or one of the same configuration).
func (s *Set) Pooled(samples []Sample) []Weighted {
	out := make([]Weighted, len(samples))
	for i, smp := range samples {
		out[i] = Weighted{DelayNS: smp.DelayNS, Weight: s.PooledCorr(smp.Insertions)}
	}
	return out
}
