// Package colate is COLATE (Shahzad and Liu, SIGMETRICS 2014): one vector
// of n counters per observation point, whatever its peers. A flow owns m of
// the counters, H(f, 1) … H(f, m); each packet adds its timestamp, relative
// to the vector's start, to one of them (§3.1). Later, for any flow that
// crossed any two points, the difference of its denoised counter sums gives
// its mean delay (Theorem 2, Eq. 3) and the denoised counters its standard
// deviation (Theorem 3, Eq. 7, virtual repetitions §4.2.2).
//
// Two choices the paper leaves open are fixed here. The counter of a packet
// is chosen by a hash of the packet's identity, not at random, so that a
// packet lands in the same counter j of its flow at every point: Theorem 4
// (the standard deviation) needs the same packets behind counter j on both
// sides, and the noise from packets that cross both points then cancels.
// And each vector keeps its flows' packet counts (p_f, what the paper takes
// from NetFlow), because timestamps are relative to each vector's start:
// turning a flow's sums back into absolute time needs p_f per vector.
package colate

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Config fixes a vector's shape. n and the seed must be the same at every
// point for the noise of shared traffic to cancel; m must be the same for
// the standard deviation (§5.3).
type Config struct {
	// Counters is n.
	Counters int `yaml:"counters"`
	// Subvector is m, the counters of one flow (even, ≥ 2).
	Subvector int `yaml:"subvector"`
	// Bits is b, the width of a counter on the wire (≤ 64).
	Bits int `yaml:"bits"`
	// Threshold is T: a vector closes when the sum of its counters
	// reaches it (0: no threshold).
	Threshold uint64 `yaml:"threshold"`
	// Span closes a vector at this age whatever its sum.
	Span time.Duration `yaml:"span"`
	// Unit is the timestamp resolution added to counters (default 1ns).
	Unit time.Duration `yaml:"unit"`
	// Seed of the flow-to-counter hash.
	Seed uint64 `yaml:"seed"`
}

// DefaultConfig returns 2^20 counters of 48 bits, 20 per flow, closing
// every second.
func DefaultConfig() Config {
	return Config{Counters: 1 << 20, Subvector: 20, Bits: 48, Span: time.Second, Unit: time.Nanosecond, Seed: 0x636f6c617465}
}

// MaxCounters bounds n.
const MaxCounters = 1 << 28

// Validate reports an unusable configuration.
func (c Config) Validate() error {
	switch {
	case c.Counters < 4 || c.Counters > MaxCounters:
		return fmt.Errorf("colate counters %d out of range [4, %d]", c.Counters, MaxCounters)
	case c.Subvector < 2 || c.Subvector%2 != 0 || c.Subvector >= c.Counters:
		return fmt.Errorf("colate subvector %d must be even, at least 2 and below the counters %d", c.Subvector, c.Counters)
	case c.Bits < 8 || c.Bits > 64:
		return fmt.Errorf("colate bits %d out of range [8, 64]", c.Bits)
	case c.Span <= 0 || c.Span > time.Hour:
		return fmt.Errorf("colate span %v out of range (0, 1h]", c.Span)
	case c.Unit <= 0 || c.Unit > time.Millisecond:
		return fmt.Errorf("colate unit %v out of range (0, 1ms]", c.Unit)
	}
	return nil
}

// maxCounter is the largest value a b-bit counter holds.
func (c Config) maxCounter() uint64 {
	if c.Bits == 64 {
		return math.MaxUint64
	}
	return 1<<c.Bits - 1
}

// Vector is one counter vector of one observation point: its counters,
// first and last timestamps, and its flows' packet counts. Not safe for
// concurrent use.
type Vector struct {
	cfg      Config
	counters []uint64
	// startNS is what timestamps are relative to; firstNS and lastNS
	// are the first and last packets'.
	startNS, firstNS, lastNS int64
	sum                      uint64 // of the counters, in units
	packets                  uint64
	flows                    flowTable
	overflow                 bool
	top                      uint64 // the largest value a counter may hold
	// flowsFull says the flow table reached maxFlows: some packets'
	// flows were not counted.
	flowsFull bool
	// A decoded vector reads counters and flow counts from its wire
	// form until it has to change (materialize).
	packed   []byte
	width    int
	rawFlows []byte
	// present marks the non-zero counters of a sparse wire form (nil
	// when dense); rank[k] is how many are marked before counter 64·k.
	present []byte
	rank    []uint32
	// markedZero says materialize found a marked counter of value zero
	// (a sparse form no encoder writes; Check refuses it).
	markedZero bool
	// spreadVal is the counters' variance when the vector held spreadAt
	// (packets, sum); see ownSpread.
	spreadVal float64
	spreadAt  [2]uint64
	spreadOK  bool
}

// New returns an empty vector whose timestamps count from startNS.
func New(cfg Config, startNS int64) (*Vector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Vector{cfg: cfg, counters: make([]uint64, cfg.Counters), startNS: startNS, top: cfg.maxCounter()}, nil
}

// Reset empties the vector for timestamps counting from startNS, keeping
// its memory.
func (v *Vector) Reset(startNS int64) {
	if v.packed != nil {
		v.counters, v.packed = make([]uint64, v.cfg.Counters), nil
	}
	v.rawFlows, v.present, v.rank, v.spreadOK, v.markedZero = nil, nil, nil, false, false
	clear(v.counters)
	v.flows.reset()
	v.startNS, v.firstNS, v.lastNS = startNS, 0, 0
	v.sum, v.packets, v.overflow, v.flowsFull = 0, 0, false, false
}

// Config returns the vector's configuration.
func (v *Vector) Config() Config { return v.cfg }

// StartNS is the time the vector's timestamps count from.
func (v *Vector) StartNS() int64 { return v.startNS }

// Span returns the first and last packets' timestamps.
func (v *Vector) Span() (firstNS, lastNS int64) { return v.firstNS, v.lastNS }

// Packets is the number of packets in the vector.
func (v *Vector) Packets() uint64 { return v.packets }

// Sum is t_X, the sum of the counters, in units.
func (v *Vector) Sum() uint64 { return v.sum }

// Flows is the number of flows the vector counted.
func (v *Vector) Flows() int {
	if v.rawFlows != nil {
		return len(v.rawFlows) / flowEntry
	}
	return v.flows.len()
}

// index is H(f, j): the j-th counter of a flow, by one multiply-xorshift
// hash and a multiply-shift onto [0, n).
func (v *Vector) index(flowHash uint64, j uint64) int {
	x := flowHash ^ v.cfg.Seed ^ (j+1)*0x9e3779b97f4a7c15
	x ^= x >> 32
	x *= 0xd6e8feb86659fd93
	x ^= x >> 32
	hi, _ := bits.Mul64(x, uint64(v.cfg.Counters))
	return int(hi)
}

// Insert adds one packet of flow flowHash, whose identity hashes to pktHash,
// captured at tsNS. It reports whether the vector is now full: its sum
// reached the threshold, its span is over, or a counter reached its width
// (then Overflowed is true and the vector should not be used).
func (v *Vector) Insert(flowHash, pktHash uint64, tsNS int64) bool {
	if v.counters == nil {
		v.materialize()
	}
	rel := tsNS - v.startNS
	if v.cfg.Unit != time.Nanosecond {
		rel /= int64(v.cfg.Unit)
	}
	if rel < 0 {
		rel = 0
	}
	if v.packets == 0 {
		v.firstNS = tsNS
	}
	v.lastNS = tsNS
	// j uniform in [0, m) from the hash's high bits, by multiply-shift.
	j, _ := bits.Mul64(pktHash, uint64(v.cfg.Subvector))
	i := v.index(flowHash, j)
	old := v.counters[i]
	c := old + uint64(rel)
	if c > v.top || c < old {
		v.overflow = true
	}
	v.counters[i] = c
	v.sum += uint64(rel)
	v.packets++
	if !v.flows.inc(flowHash) {
		v.flowsFull = true
	}
	return v.overflow || (v.cfg.Threshold > 0 && v.sum >= v.cfg.Threshold) || tsNS-v.startNS >= int64(v.cfg.Span)
}

// FlowsFull reports whether the vector's flow table filled up (more than
// its bound of flows): the flows first seen after that have no count.
func (v *Vector) FlowsFull() bool { return v.flowsFull }

// Overflowed reports whether a counter outgrew its width.
func (v *Vector) Overflowed() bool { return v.overflow }

// FlowPackets is p_f in this vector: the packets of a flow it counted.
func (v *Vector) FlowPackets(flowHash uint64) uint32 {
	if v.rawFlows != nil {
		return v.flowCount(flowHash)
	}
	return v.flows.get(flowHash)
}

// slots returns H(f, j) for each of the flow's m slots and how many of
// the m slots name that counter. The m hashes are independent: with
// probability about m²/2n (0.29% at n = 2^16, m = 20) two slots name one
// counter, which then holds both slots' share of the flow's packets.
// Reading it once per slot would count that share twice (a steady ~1/m
// excess on every epoch of the flow, every counter on one line).
func (v *Vector) slots(flowHash uint64) (idx, mult []int) {
	m := v.cfg.Subvector
	idx, mult = make([]int, m), make([]int, m)
	for j := range idx {
		idx[j] = v.index(flowHash, uint64(j))
	}
	for j, i := range idx {
		for _, k := range idx {
			if k == i {
				mult[j]++
			}
		}
	}
	return idx, mult
}

// subvector returns the flow's m counters, one per slot, a counter that c
// slots name split evenly between them (so that each slot holds its own
// share and their sum counts each counter once), and the slots'
// multiplicities.
func (v *Vector) subvector(flowHash uint64) (s []float64, mult []int) {
	idx, mult := v.slots(flowHash)
	s = make([]float64, len(idx))
	for j, i := range idx {
		s[j] = float64(v.counter(i)) / float64(mult[j])
	}
	return s, mult
}

// distinct is the number of distinct counters among slots of
// multiplicities mult.
func distinct(mult []int) float64 {
	var d float64
	for _, c := range mult {
		d += 1 / float64(c)
	}
	return d
}

// FlowSum estimates t_{f,X}, the sum of the flow's timestamps relative to
// the vector's start, in units (Theorem 2, Eq. 4):
//
//	t̃ = (n·Σ_j S[j] − m·t_X) / (n − m)
//
// over the m' ≤ m distinct counters of the flow (m' for m).
func (v *Vector) FlowSum(flowHash uint64) float64 {
	sub, mult := v.subvector(flowHash)
	n, m := float64(v.cfg.Counters), distinct(mult)
	var s float64
	for _, c := range sub {
		s += c
	}
	return (n*s - m*float64(v.sum)) / (n - m)
}

// ErrNoPackets says a flow has no packets in the vectors asked about.
var ErrNoPackets = errors.New("flow has no packets in these vectors")

// Merge adds o's packets to v: the vectors of one point's capture workers,
// which saw disjoint packets of the same epoch, become one.
func (v *Vector) Merge(o *Vector) error {
	v.materialize()
	o.materialize()
	a, b := v.cfg, o.cfg
	if a.Counters != b.Counters || a.Subvector != b.Subvector || a.Seed != b.Seed || a.Unit != b.Unit || v.startNS != o.startNS {
		return fmt.Errorf("%w: merging n %d/%d, m %d/%d, start %d/%d", ErrMismatch, a.Counters, b.Counters, a.Subvector, b.Subvector, v.startNS, o.startNS)
	}
	if o.packets == 0 {
		return nil
	}
	top := v.top
	for i, c := range o.counters {
		s := v.counters[i] + c
		if s > top || s < c {
			v.overflow = true
		}
		v.counters[i] = s
	}
	if v.packets == 0 || o.firstNS < v.firstNS {
		v.firstNS = o.firstNS
	}
	if v.packets == 0 || o.lastNS > v.lastNS {
		v.lastNS = o.lastNS
	}
	v.sum += o.sum
	v.packets += o.packets
	v.overflow = v.overflow || o.overflow
	v.flowsFull = v.flowsFull || o.flowsFull
	o.flows.each(func(k uint64, n uint32) {
		if !v.flows.add(k, n) {
			v.flowsFull = true
		}
	})
	return nil
}
