// Package params holds the parameters that both ends of a path must share —
// packet identity, epoch grid and synopsis shapes — and their API form. The
// collector pushes the deployment's to every probe with its path
// configuration; a probe given parameters of its own has them checked
// against the deployment's and is rejected when they differ.
package params

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/colate"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// Params are a deployment's shared parameters.
type Params struct {
	Identity capture.IdentityConfig `yaml:"identity"`
	Epoch    epoch.Config           `yaml:"epoch"`
	LDA      lda.Config             `yaml:"lda"`
	// RDA's banks, seed and check must match; Buckets is only the size a
	// path starts with (the collector sizes each epoch).
	RDA rda.Config `yaml:"rda"`
	// LDS is the per-flow sketch.
	LDS lds.Config `yaml:"lds"`
	// FlowWeights raise the LDS accuracy of chosen flows (LDS §4.1).
	FlowWeights []FlowWeight `yaml:"flow_weights"`
	// Colate, when enabled, makes every probe record one COLATE vector of
	// all its packets per epoch, for per-flow delay between any two points
	// afterwards.
	Colate Colate `yaml:"colate"`
	// Sample is the consistent packet sampling of every path, for delay
	// percentiles.
	Sample Sample `yaml:"sample"`
}

// Sample sets the consistent packet sampling: the collector picks each
// path's rate, a power of two, for about Target sampled packets per epoch
// (0: no sampling); a probe's sample of one path and epoch grows to at
// most MaxEntries, past which it halves its own rate. Seed must be the
// same at every probe.
type Sample struct {
	Seed       uint64 `yaml:"seed"`
	Target     int    `yaml:"target"`
	MaxEntries int    `yaml:"max_entries"`
}

// MaxSampleEntries bounds Sample.MaxEntries (and so a sample's report).
const MaxSampleEntries = sample.MaxEntries

// Validate checks the bounds.
func (s Sample) Validate() error {
	if s.Target == 0 {
		return nil
	}
	if s.Target < 0 || s.MaxEntries < s.Target || s.MaxEntries > MaxSampleEntries {
		return fmt.Errorf("target %d must be ≥ 0 and at most max_entries %d, itself at most %d", s.Target, s.MaxEntries, MaxSampleEntries)
	}
	return nil
}

// Colate switches COLATE recording on and fixes the vectors' shape. A
// vector covers one epoch (its span and threshold are not used).
type Colate struct {
	Enabled       bool `yaml:"enabled"`
	colate.Config `yaml:",inline"`
}

// FlowWeight gives the flows a selector matches a weight in the LDS: their
// packets count Weight times, so collisions with lighter flows hurt them
// less (at those flows' expense).
type FlowWeight struct {
	Selector netpath.Selector `yaml:"selector"`
	Weight   uint64           `yaml:"weight"`
}

// Default returns the defaults of each part.
func Default() Params {
	return Params{Identity: capture.DefaultIdentityConfig(), Epoch: epoch.DefaultConfig(), LDA: lda.DefaultConfig(),
		RDA: rda.DefaultConfig(), LDS: lds.DefaultConfig(), Colate: Colate{Config: colate.DefaultConfig()},
		Sample: Sample{Seed: 0x73616d706c65, Target: 1000, MaxEntries: 16384}}
}

// ColateConfig is the vectors' configuration: one per epoch.
func (p Params) ColateConfig() colate.Config {
	c := p.Colate.Config
	c.Span, c.Threshold = p.Epoch.Length, 0
	return c
}

// Validate checks each part.
func (p Params) Validate() error {
	if err := p.Identity.Validate(); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	if err := p.Epoch.Validate(); err != nil {
		return fmt.Errorf("epoch: %w", err)
	}
	if err := p.LDA.Validate(); err != nil {
		return fmt.Errorf("lda: %w", err)
	}
	if err := p.RDA.Validate(); err != nil {
		return fmt.Errorf("rda: %w", err)
	}
	if err := p.LDS.Validate(); err != nil {
		return fmt.Errorf("lds: %w", err)
	}
	if p.Colate.Enabled {
		if err := p.ColateConfig().Validate(); err != nil {
			return fmt.Errorf("colate: %w", err)
		}
	}
	if err := p.Sample.Validate(); err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	for i, w := range p.FlowWeights {
		if w.Weight < 1 || w.Weight > lds.MaxWeight {
			return fmt.Errorf("flow_weights[%d]: weight %d out of range [1, %d]", i, w.Weight, lds.MaxWeight)
		}
		if _, err := w.Selector.Compile(); err != nil {
			return fmt.Errorf("flow_weights[%d]: %w", i, err)
		}
	}
	return nil
}

// ErrMismatch is wrapped by Compatible's errors.
var ErrMismatch = errors.New("parameters differ")

// Compatible returns an error naming every part in which o differs from p.
func (p Params) Compatible(o Params) error {
	var errs []error
	if err := p.Identity.Compatible(o.Identity); err != nil {
		errs = append(errs, err)
	}
	if err := p.Epoch.Compatible(o.Epoch); err != nil {
		errs = append(errs, err)
	}
	if err := p.LDA.Compatible(o.LDA); err != nil {
		errs = append(errs, err)
	}
	if err := SameRDAHashing(p.RDA, o.RDA); err != nil {
		errs = append(errs, err)
	}
	if err := p.LDS.Compatible(o.LDS); err != nil {
		errs = append(errs, err)
	}
	if !slices.EqualFunc(p.FlowWeights, o.FlowWeights, func(a, b FlowWeight) bool {
		return a.Weight == b.Weight && proto.Equal(a.Selector.ToProto(), b.Selector.ToProto())
	}) {
		errs = append(errs, fmt.Errorf("flow weights differ: %d rules vs %d", len(p.FlowWeights), len(o.FlowWeights)))
	}
	a, b := p.Colate, o.Colate
	if a.Enabled != b.Enabled || a.Enabled && (a.Counters != b.Counters || a.Subvector != b.Subvector || a.Bits != b.Bits || a.Seed != b.Seed || a.Unit != b.Unit) {
		errs = append(errs, fmt.Errorf("colate differs: enabled %v n %d m %d b %d seed %x unit %v vs enabled %v n %d m %d b %d seed %x unit %v",
			a.Enabled, a.Counters, a.Subvector, a.Bits, a.Seed, a.Unit, b.Enabled, b.Counters, b.Subvector, b.Bits, b.Seed, b.Unit))
	}
	if x, y := p.Sample, o.Sample; (x.Target > 0) != (y.Target > 0) || x.Target > 0 && x.Seed != y.Seed {
		errs = append(errs, fmt.Errorf("sampling differs: target %d seed %x vs target %d seed %x", x.Target, x.Seed, y.Target, y.Seed))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrMismatch, errors.Join(errs...))
}

// SameRDAHashing returns an error wrapping synopsis.ErrMismatch unless a
// and b hash alike (banks, seed, check); their sizes may differ.
func SameRDAHashing(a, b rda.Config) error {
	b.Buckets = a.Buckets
	return a.Compatible(b)
}

// SameLDSHashing returns an error wrapping synopsis.ErrMismatch unless
// got hashes as want does (k, seed) with at most want's cells per row and
// some of its rows, in their order: the collector sizes each path's LDS
// below the parameters' (LDSSize, its cells per row and rows).
func SameLDSHashing(want, got lds.Config) error {
	if got.Cols > want.Cols {
		return fmt.Errorf("%w: lds of %d cells per row exceeds params.lds.cols %d", synopsis.ErrMismatch, got.Cols, want.Cols)
	}
	want.Cols = got.Cols
	if got.Rows < want.Rows && len(got.RowSampleLog2) == got.Rows && len(want.RowSampleLog2) == want.Rows {
		var mask uint32 // want's rows got's sampling exponents name, in order
		next := 0
		for r, e := range want.RowSampleLog2 {
			if next < got.Rows && got.RowSampleLog2[next] == e {
				mask |= 1 << r
				next++
			}
		}
		if next == got.Rows {
			want, _ = want.Select(mask) // a mask of want's rows
		}
	}
	if got.Rows < want.Rows && len(got.RowSampleLog2) == 0 && len(want.RowSampleLog2) == 0 {
		want.Rows = got.Rows // rows all alike
	}
	return want.Compatible(got)
}

// ToProto converts the parameters to their API form.
func (p Params) ToProto() *owlv1.SynopsisParams {
	var start int64
	if !p.Epoch.Start.IsZero() {
		start = p.Epoch.Start.UnixNano()
	}
	banks := make([]uint32, len(p.LDA.BankSampleLog2))
	for i, e := range p.LDA.BankSampleLog2 {
		banks[i] = uint32(e)
	}
	out := &owlv1.SynopsisParams{
		Identity: &owlv1.IdentityParams{Seed: p.Identity.Seed, PayloadBytes: uint32(p.Identity.PayloadBytes), NatSafe: p.Identity.NATSafe},
		Epoch:    &owlv1.EpochParams{StartUnixNs: start, LengthNs: int64(p.Epoch.Length)},
		Lda:      &owlv1.LDAParams{Rows: uint32(p.LDA.Rows), BankSampleLog2: banks, Seed: p.LDA.Seed},
		Rda:      &owlv1.RDAParams{Banks: uint32(p.RDA.Banks), Seed: p.RDA.Seed, Check: p.RDA.Check},
		Lds:      &owlv1.LDSParams{Rows: uint32(p.LDS.Rows), Cols: uint32(p.LDS.Cols), K: uint32(p.LDS.K), Seed: p.LDS.Seed},
	}
	for _, e := range p.LDS.RowSampleLog2 {
		out.Lds.RowSampleLog2 = append(out.Lds.RowSampleLog2, uint32(e))
	}
	if p.Colate.Enabled {
		c := p.Colate
		out.Colate = &owlv1.ColateParams{Counters: uint32(c.Counters), Subvector: uint32(c.Subvector), Bits: uint32(c.Bits), Seed: c.Seed, UnitNs: int64(c.Unit)}
	}
	if p.Sample.Target > 0 {
		out.Sample = &owlv1.SampleParams{Seed: p.Sample.Seed, Target: uint32(p.Sample.Target), MaxEntries: uint32(p.Sample.MaxEntries)}
	}
	for _, w := range p.FlowWeights {
		out.FlowWeights = append(out.FlowWeights, &owlv1.FlowWeight{Selector: w.Selector.ToProto(), Weight: uint32(w.Weight)})
	}
	return out
}

// FromProto converts and validates parameters received from a peer. The
// grace period is local to each probe and is not carried.
func FromProto(sp *owlv1.SynopsisParams) (Params, error) {
	if sp == nil || sp.Identity == nil || sp.Epoch == nil || sp.Lda == nil || sp.Rda == nil || sp.Lds == nil {
		return Params{}, errors.New("parameters incomplete: identity, epoch, lda, rda and lds are required")
	}
	var p Params
	p.Identity = capture.IdentityConfig{Seed: sp.Identity.Seed, PayloadBytes: int(min(sp.Identity.PayloadBytes, capture.MaxPayloadBytes+1)), NATSafe: sp.Identity.NatSafe}
	if sp.Epoch.StartUnixNs != 0 {
		p.Epoch.Start = time.Unix(0, sp.Epoch.StartUnixNs)
	}
	p.Epoch.Length = time.Duration(sp.Epoch.LengthNs)
	p.LDA = lda.Config{Rows: int(min(sp.Lda.Rows, lda.MaxRows+1)), Seed: sp.Lda.Seed}
	if len(sp.Lda.BankSampleLog2) > lda.MaxBanks {
		return Params{}, fmt.Errorf("lda: %d banks exceed the limit %d", len(sp.Lda.BankSampleLog2), lda.MaxBanks)
	}
	for _, e := range sp.Lda.BankSampleLog2 {
		if e > 63 {
			return Params{}, fmt.Errorf("lda: bank exponent %d exceeds 63", e)
		}
		p.LDA.BankSampleLog2 = append(p.LDA.BankSampleLog2, uint8(e))
	}
	p.RDA = rda.Config{Banks: int(min(sp.Rda.Banks, rda.MaxBanks+1)), Buckets: rda.DefaultConfig().Buckets, Seed: sp.Rda.Seed, Check: sp.Rda.Check}
	p.LDS = lds.Config{Rows: int(min(sp.Lds.Rows, lds.MaxRows+1)), Cols: int(min(sp.Lds.Cols, lds.MaxCols+1)), K: int(min(sp.Lds.K, lds.MaxK+1)), Seed: sp.Lds.Seed}
	if len(sp.Lds.RowSampleLog2) > lds.MaxRows {
		return Params{}, fmt.Errorf("lds: %d sampling exponents", len(sp.Lds.RowSampleLog2))
	}
	for _, e := range sp.Lds.RowSampleLog2 {
		p.LDS.RowSampleLog2 = append(p.LDS.RowSampleLog2, uint8(min(e, 64)))
	}
	if len(sp.FlowWeights) > 1024 {
		return Params{}, fmt.Errorf("%d flow weight rules exceed 1024", len(sp.FlowWeights))
	}
	for _, w := range sp.FlowWeights {
		sel, err := netpath.SelectorFromProto(w.GetSelector())
		if err != nil {
			return Params{}, fmt.Errorf("flow weight: %w", err)
		}
		p.FlowWeights = append(p.FlowWeights, FlowWeight{Selector: sel, Weight: uint64(w.GetWeight())})
	}
	p.Colate.Config = colate.DefaultConfig()
	if c := sp.Colate; c != nil {
		p.Colate.Enabled = true
		p.Colate.Counters = int(min(c.Counters, colate.MaxCounters+1))
		p.Colate.Subvector = int(min(c.Subvector, colate.MaxCounters+1))
		p.Colate.Bits = int(min(c.Bits, 65))
		p.Colate.Seed = c.Seed
		p.Colate.Unit = time.Duration(c.UnitNs)
	}
	if sm := sp.Sample; sm != nil {
		p.Sample = Sample{Seed: sm.Seed, Target: int(min(sm.Target, MaxSampleEntries+1)), MaxEntries: int(min(sm.MaxEntries, MaxSampleEntries+1))}
	}
	if err := p.Validate(); err != nil {
		return Params{}, err
	}
	return p, nil
}

// WeightOf compiles the flow weight rules into a function that gives a
// flow's LDS weight: the first matching rule's, else 1.
func (p Params) WeightOf() (func(capture.FlowKey) uint64, error) {
	type rule struct {
		m *netpath.Matcher
		w uint64
	}
	var rules []rule
	for i, w := range p.FlowWeights {
		m, err := w.Selector.Compile()
		if err != nil {
			return nil, fmt.Errorf("flow_weights[%d]: %w", i, err)
		}
		rules = append(rules, rule{m, w.Weight})
	}
	return func(f capture.FlowKey) uint64 {
		for _, r := range rules {
			if r.m.Match(f) {
				return r.w
			}
		}
		return 1
	}, nil
}
