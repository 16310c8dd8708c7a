// Package params holds the parameters that both ends of a path must share —
// packet identity, epoch grid and synopsis shapes — and their API form. The
// collector checks every probe's parameters against the deployment's and
// rejects a probe whose parameters differ.
package params

import (
	"errors"
	"fmt"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// Params are a deployment's shared parameters.
type Params struct {
	Identity capture.IdentityConfig `yaml:"identity"`
	Epoch    epoch.Config           `yaml:"epoch"`
	LDA      lda.Config             `yaml:"lda"`
	// RDA's banks, seed and check must match; Buckets is only the size a
	// path starts with (the collector sizes each epoch).
	RDA rda.Config `yaml:"rda"`
}

// Default returns the defaults of each part.
func Default() Params {
	return Params{Identity: capture.DefaultIdentityConfig(), Epoch: epoch.DefaultConfig(), LDA: lda.DefaultConfig(), RDA: rda.DefaultConfig()}
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
	return &owlv1.SynopsisParams{
		Identity: &owlv1.IdentityParams{Seed: p.Identity.Seed, PayloadBytes: uint32(p.Identity.PayloadBytes), NatSafe: p.Identity.NATSafe},
		Epoch:    &owlv1.EpochParams{StartUnixNs: start, LengthNs: int64(p.Epoch.Length)},
		Lda:      &owlv1.LDAParams{Rows: uint32(p.LDA.Rows), BankSampleLog2: banks, Seed: p.LDA.Seed},
		Rda:      &owlv1.RDAParams{Banks: uint32(p.RDA.Banks), Seed: p.RDA.Seed, Check: p.RDA.Check},
	}
}

// FromProto converts and validates parameters received from a peer. The
// grace period is local to each probe and is not carried.
func FromProto(sp *owlv1.SynopsisParams) (Params, error) {
	if sp == nil || sp.Identity == nil || sp.Epoch == nil || sp.Lda == nil || sp.Rda == nil {
		return Params{}, errors.New("parameters incomplete: identity, epoch, lda and rda are required")
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
	if err := p.Validate(); err != nil {
		return Params{}, err
	}
	return p, nil
}
