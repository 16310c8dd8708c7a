// Package fridge matches requests with their responses (TCP SYN and
// SYN-ACK, DNS query and answer, ...) in a fixed memory and reports their
// delays without the bias against long delays that a plain hash-indexed
// array has. It is the fridge of Zheng's dissertation (2024, chapter 2).
//
// A fridge-(M, p) is a hash-indexed array of M entries. A request enters
// with probability p (decided by a hash of its key, so that runs repeat)
// and always overwrites its slot; a global counter stamps every request
// offered. When a response finds its request, the x requests offered since
// could each have evicted it with probability p/M, so the sample survived
// with probability q = p·(1 − p/M)^x and counts as 1/q samples (Lemma 2.1:
// the sum of 1/q over the samples of a delay is an unbiased estimate of how
// many pairs had that delay). A long delay survives rarely and weighs much
// when it does.
//
// A Set splits the memory into fridges of different average lifetimes M/p,
// each good for a different range of delays, sharing one counter.
// Set.Pooled weighs each of its samples by the probability that the Set
// as a whole reports a pair with its x; Combine is the dissertation's
// inverse-variance weighting per delay bin (§2.3.2), which goes wrong when
// responses come after the traffic stops. Simple is the always-overwrite
// array without correction, for comparison.
//
// None of the types is safe for concurrent use: one goroutine owns each.
package fridge

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// EntryBytes is the memory of one fridge entry: the request's key, its
// time and the counter's stamp, 8 bytes each.
const EntryBytes = 24

// MaxEntries bounds the entries of one fridge.
const MaxEntries = 1 << 28

// minEntryProb is the smallest entry probability the 32-bit entry decision
// represents.
const minEntryProb = 1.0 / (1 << 32)

// maxCorrection caps a correction factor so that its square stays finite.
// Reaching it takes a survival probability below 10⁻¹⁵⁰, which random keys
// never give: only repeated or adversarial keys do.
const maxCorrection = 1e150

// Config is the shape of one fridge.
type Config struct {
	// Entries is M, the slots of the array (at least 2: with one slot no
	// eviction of another entry is ever observed).
	Entries int `yaml:"entries"`
	// EntryProb is p, the probability that a request enters, in
	// [2^-32, 1]. The average lifetime of an entry is Entries/EntryProb
	// requests offered.
	EntryProb float64 `yaml:"entry_prob"`
	// Seed keys the hash of the request keys.
	Seed uint64 `yaml:"seed"`
}

// DefaultConfig is 4,096 entries (96 KiB) with entry probability 1/16, a
// lifetime of 65,536 requests: 65 ms at 10⁶ requests/s. Use TuneEntryProb
// for the rate and delays at hand.
func DefaultConfig() Config { return Config{Entries: 4096, EntryProb: 1.0 / 16, Seed: 0x667269646765} }

// Validate reports parameters out of range.
func (c Config) Validate() error {
	if c.Entries < 2 || c.Entries > MaxEntries {
		return fmt.Errorf("fridge entries %d out of range [2, %d]", c.Entries, MaxEntries)
	}
	if !(c.EntryProb >= minEntryProb && c.EntryProb <= 1) {
		return fmt.Errorf("fridge entry probability %v out of range [2^-32, 1]", c.EntryProb)
	}
	return nil
}

// TuneEntryProb is the entry probability of §2.2.3 for a fridge of
// entries slots: the one that makes the average lifetime M/p equal to the
// requests offered during delay at ratePerSec requests/s, so that a
// response at that delay finds its request after about one lifetime
// (correction about e/p). Delays below it are measured with little
// variance, delays far above it rarely survive. It is 1 when the memory
// outlasts the delay anyway.
func TuneEntryProb(entries int, ratePerSec float64, delay time.Duration) (float64, error) {
	lifetime := ratePerSec * delay.Seconds()
	if entries < 2 || !(lifetime > 0) || math.IsInf(lifetime, 0) {
		return 0, fmt.Errorf("tuning a fridge of %d entries for %v at %v requests/s: need ≥ 2 entries and a positive delay and rate",
			entries, delay, ratePerSec)
	}
	return math.Max(minEntryProb, math.Min(1, float64(entries)/lifetime)), nil
}

// Sample is a response matched with its request.
type Sample struct {
	// DelayNS is the response's time minus the request's.
	DelayNS int64
	// Insertions is x, the requests offered to the fridge (or the Set)
	// after this one and up to the response.
	Insertions uint64
	// Corr is the correction factor 1/q = p^-1·(1 − p/M)^-x: how many pairs
	// the sample stands for.
	Corr float64
	// Corr2 is Corr², the sample's part of the variance estimate V̂.
	Corr2 float64
	// Fridge is the index of the fridge in its Set (0 for a lone Fridge).
	Fridge int
}

// when is the rest of an entry beside its key: the request's time and
// the counter's stamp. stamp 0 marks an empty slot: the counter stamps the
// first request 1.
type when struct {
	tNS   int64
	stamp uint64
}

// table is the array of one fridge and what its corrections need. The
// keys are an array of their own, a third of the entries' memory: a
// look-up that finds another key (most do) reads nothing else, and the
// keys stay in the processor's caches where the whole entries would not.
type table struct {
	keys  []uint64
	whens []when
	n     uint64  // len(keys)
	invP  float64 // 1/p of the realised entry probability
	// logStay is −ln(1 − p/M): a sample's correction is invP·exp(x·logStay).
	logStay float64
}

func newTable(entries int, p float64) table {
	return table{keys: make([]uint64, entries), whens: make([]when, entries), n: uint64(entries), invP: 1 / p,
		logStay: -math.Log1p(-p / float64(entries))}
}

// index maps the upper 32 bits of a hash onto the slots.
func (t *table) index(h uint64) uint64 { return ((h >> 32) * t.n) >> 32 }

// put overwrites slot i with a request.
func (t *table) put(i, key uint64, tNS int64, stamp uint64) {
	t.keys[i] = key
	t.whens[i] = when{tNS: tNS, stamp: stamp}
}

// holds says whether slot i holds the request for key.
func (t *table) holds(i, key uint64) bool { return t.keys[i] == key && t.whens[i].stamp != 0 }

// remove empties slot i and returns what it held.
func (t *table) remove(i uint64) when {
	w := t.whens[i]
	t.keys[i], t.whens[i] = 0, when{}
	return w
}

// delay removes the request for key from slot i if it is there and
// returns its delay and the insertions since; now is the counter's value
// at the response.
func (t *table) delay(i uint64, key uint64, tNS int64, now uint64) (delayNS int64, x uint64, ok bool) {
	if !t.holds(i, key) {
		return 0, 0, false
	}
	w := t.remove(i)
	if tNS < w.tNS {
		// A response before its request: clocks that went back, or a key
		// reused. No delay to report.
		return 0, 0, false
	}
	return tNS - w.tNS, now - w.stamp, true
}

// take is delay with the sample's correction.
func (t *table) take(i uint64, key uint64, tNS int64, now uint64) (Sample, bool) {
	d, x, ok := t.delay(i, key, tNS, now)
	if !ok {
		return Sample{}, false
	}
	corr := t.invP * math.Exp(float64(x)*t.logStay)
	if !(corr <= maxCorrection) {
		corr = maxCorrection
	}
	return Sample{DelayNS: d, Insertions: x, Corr: corr, Corr2: corr * corr}, true
}

func (t *table) reset() {
	clear(t.keys)
	clear(t.whens)
}

// hash mixes a key with a seed (the splitmix64 finalizer). Its lower 32
// bits decide entry, its upper 32 bits the slot, independently.
func hash(key, seed uint64) uint64 {
	z := key ^ seed
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// threshold is the 32-bit entry threshold closest to p, at least 1.
func threshold(p float64) uint64 {
	return uint64(math.Max(1, math.Min(1<<32, math.Round(p*(1<<32)))))
}

// ErrConfig is wrapped by every configuration error of this package.
var ErrConfig = errors.New("invalid fridge configuration")

// Fridge is one fridge-(M, p).
type Fridge struct {
	cfg     Config
	tab     table
	thresh  uint64 // a request enters when its hash's lower 32 bits are below
	counter uint64 // requests offered so far
}

// New returns an empty fridge.
func New(cfg Config) (*Fridge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	th := threshold(cfg.EntryProb)
	return &Fridge{cfg: cfg, tab: newTable(cfg.Entries, float64(th)/(1<<32)), thresh: th}, nil
}

// Config is the fridge's configuration.
func (f *Fridge) Config() Config { return f.cfg }

// EntryProb is the entry probability in effect: Config's rounded to a
// multiple of 2^-32. Corrections use it.
func (f *Fridge) EntryProb() float64 { return float64(f.thresh) / (1 << 32) }

// MemoryBytes is the memory of the entries (EntryBytes each).
func (f *Fridge) MemoryBytes() int { return len(f.tab.keys) * EntryBytes }

// Insertions is the number of requests offered so far.
func (f *Fridge) Insertions() uint64 { return f.counter }

// Request offers a request with its key at time tNS: the counter counts
// it, and if it enters it overwrites its slot, whatever was there.
func (f *Fridge) Request(key uint64, tNS int64) {
	f.counter++
	h := hash(key, f.cfg.Seed)
	if h&0xffffffff >= f.thresh {
		return
	}
	f.tab.put(f.tab.index(h), key, tNS, f.counter)
}

// Response looks for the request with the same key; if it is still there
// it is removed and its sample returned.
func (f *Fridge) Response(key uint64, tNS int64) (Sample, bool) {
	h := hash(key, f.cfg.Seed)
	if h&0xffffffff >= f.thresh {
		return Sample{}, false
	}
	return f.tab.take(f.tab.index(h), key, tNS, f.counter)
}

// Reset empties the fridge and restarts its counter.
func (f *Fridge) Reset() {
	f.tab.reset()
	f.counter = 0
}
