package rtt

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/DataDog/sketches-go/ddsketch"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/delays"
)

// PrefixConfig says how responders are grouped: by the prefix of their
// address of V4Bits (IPv4) or V6Bits (IPv6), as ePPing aggregates, with
// at most Max prefixes in a report (the ones with the most pairs; the
// others go into "other", counted).
type PrefixConfig struct {
	V4Bits int `yaml:"ipv4_bits"`
	V6Bits int `yaml:"ipv6_bits"`
	Max    int `yaml:"max"`
}

// DefaultPrefixConfig is /24 and /48, 64 prefixes.
func DefaultPrefixConfig() PrefixConfig { return PrefixConfig{V4Bits: 24, V6Bits: 48, Max: 64} }

// MaxPrefixes bounds PrefixConfig.Max.
const MaxPrefixes = 4096

// Validate checks the bounds.
func (c PrefixConfig) Validate() error {
	if c.V4Bits < 0 || c.V4Bits > 32 || c.V6Bits < 0 || c.V6Bits > 128 {
		return fmt.Errorf("prefix lengths /%d (IPv4) and /%d (IPv6) out of range", c.V4Bits, c.V6Bits)
	}
	if c.Max < 0 || c.Max > MaxPrefixes {
		return fmt.Errorf("max prefixes %d out of [0, %d]", c.Max, MaxPrefixes)
	}
	return nil
}

// trackFactor bounds the prefixes a Summary tracks during an epoch: four
// times as many as it reports. Past that, a new prefix's pairs go to
// "other" at once, so that a scan of many responders costs bounded
// memory.
const trackFactor = 4

// group is the round-trip times of one kind or prefix.
type group struct {
	sketch  *ddsketch.DDSketch
	samples uint64
	pairs   float64
}

// mapping is the delay sketches' index mapping, and the delays it
// indexes: the others go through DDSketch.AddWithCount.
var (
	mapping                    = delays.New().IndexMapping
	minIndexable, maxIndexable = mapping.MinIndexableValue(), mapping.MaxIndexableValue()
)

// addPair adds a delay of weight pairs to two groups (its kind's and its
// prefix's), the sketch index computed once for both.
func addPair(a, b *group, delayNS int64, weight float64) {
	for _, g := range [2]*group{a, b} {
		if g.sketch == nil {
			g.sketch = delays.New()
		}
		g.samples++
		g.pairs += weight
	}
	v := float64(delayNS)
	if v > minIndexable && v <= maxIndexable {
		i := mapping.Index(v)
		a.sketch.GetPositiveValueStore().AddWithCount(i, weight)
		b.sketch.GetPositiveValueStore().AddWithCount(i, weight)
		return
	}
	_ = a.sketch.AddWithCount(v, weight) // weights are finite and positive
	_ = b.sketch.AddWithCount(v, weight)
}

func (g *group) merge(o *group) {
	if o.sketch == nil {
		return
	}
	if g.sketch == nil {
		g.sketch = delays.New()
	}
	_ = g.sketch.MergeWith(o.sketch) // same mapping
	g.samples += o.samples
	g.pairs += o.pairs
}

func (g *group) proto() *owlv1.RTTSketch {
	if g.sketch == nil {
		return nil
	}
	return &owlv1.RTTSketch{Sketch: delays.Encode(g.sketch), Samples: g.samples, Pairs: g.pairs}
}

// Counters say what matching saw in an epoch.
type Counters struct {
	Requests, Responses, Matched, Ambiguous uint64
}

// Summary is one epoch's round-trip times: a weighted sketch per kind and
// per responder prefix. Its memory is bounded whatever the traffic: at
// most trackFactor·Max prefixes, the distinct prefixes folded into other
// estimated in a kilobyte (exact to a prefix or two while fewer than a
// few hundred). Not safe for concurrent use; capture workers' summaries
// merge.
type Summary struct {
	cfg      PrefixConfig
	kinds    [Kinds]group
	prefixes map[netip.Prefix]*group
	other    group
	folded   distinct // prefixes that went to other
	// recent caches the groups of recent responders, which answer
	// again and again: a look-up in prefixes hashes a prefix.
	recent   [recentResponders]responderGroup
	Counters Counters
}

// recentResponders is the size of Summary's cache of responders' groups.
const recentResponders = 16

// responderGroup is a responder and the group its pairs go to.
type responderGroup struct {
	addr netip.Addr
	g    *group
}

// NewSummary returns an empty summary.
func NewSummary(cfg PrefixConfig) *Summary {
	return &Summary{cfg: cfg, prefixes: map[netip.Prefix]*group{}}
}

// PrefixOf is the responder prefix an address belongs to.
func (c PrefixConfig) PrefixOf(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := c.V6Bits
	if a.Is4() {
		bits = c.V4Bits
	}
	p, _ := a.Prefix(bits) // bits in range (Validate)
	return p
}

// Add counts a sample of weight pairs.
func (s *Summary) Add(sm Sample) {
	if sm.Kind >= Kinds || !(sm.Weight > 0) {
		return
	}
	addPair(&s.kinds[sm.Kind], s.responder(sm.Responder), sm.DelayNS, sm.Weight)
}

// responder is the group of a responder's prefix. A prefix's group stays
// the same for the epoch (a prefix folded into other stays there), so a
// responder's group is cached.
func (s *Summary) responder(a netip.Addr) *group {
	r := &s.recent[recentSlot(a)]
	if r.g != nil && r.addr == a {
		return r.g
	}
	g := s.prefix(s.cfg.PrefixOf(a))
	*r = responderGroup{addr: a, g: g}
	return g
}

// recentSlot is a responder's slot in the cache: bits of its address's
// last bytes, read one by one (a copy of the whole array is stored in two
// halves and read back in one, which stalls).
func recentSlot(a netip.Addr) int {
	return int(a.As16()[15]^a.As16()[13]<<2) % recentResponders
}

// prefix is p's group, or other when too many prefixes are tracked.
func (s *Summary) prefix(p netip.Prefix) *group {
	if g := s.prefixes[p]; g != nil {
		return g
	}
	if len(s.prefixes) >= trackFactor*max(s.cfg.Max, 1) {
		s.folded.add(p)
		return &s.other
	}
	g := &group{}
	s.prefixes[p] = g
	return g
}

// Merge adds o (another capture worker's share of the epoch) to s.
func (s *Summary) Merge(o *Summary) {
	for k := range s.kinds {
		s.kinds[k].merge(&o.kinds[k])
	}
	for p, g := range o.prefixes {
		s.prefix(p).merge(g)
	}
	s.folded.merge(&o.folded)
	s.other.merge(&o.other)
	s.Counters.Requests += o.Counters.Requests
	s.Counters.Responses += o.Counters.Responses
	s.Counters.Matched += o.Counters.Matched
	s.Counters.Ambiguous += o.Counters.Ambiguous
}

// Empty says whether the epoch saw no request and no response.
func (s *Summary) Empty() bool { return s.Counters == Counters{} }

// Report is the summary as the probe ships it: the cfg.Max prefixes with
// the most pairs, the rest in other.
func (s *Summary) Report(epoch int64) *owlv1.RTTReport {
	out := &owlv1.RTTReport{Epoch: epoch, Counters: &owlv1.RTTCounters{Requests: s.Counters.Requests,
		Responses: s.Counters.Responses, Matched: s.Counters.Matched, Ambiguous: s.Counters.Ambiguous}}
	for k := range Kinds {
		if sk := s.kinds[k].proto(); sk != nil {
			sk.Kind = k.String()
			out.Kinds = append(out.Kinds, sk)
		}
	}
	ps := make([]netip.Prefix, 0, len(s.prefixes))
	for p := range s.prefixes {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		return cmp.Or(cmp.Compare(s.prefixes[b].pairs, s.prefixes[a].pairs), a.Addr().Compare(b.Addr()))
	})
	other := s.other
	for i, p := range ps {
		if i < s.cfg.Max {
			sk := s.prefixes[p].proto()
			sk.Prefix = p.String()
			out.Prefixes = append(out.Prefixes, sk)
			continue
		}
		other.merge(s.prefixes[p])
		s.folded.add(p)
	}
	out.Other = other.proto()
	out.Counters.PrefixesFolded = s.folded.count()
	return out
}
