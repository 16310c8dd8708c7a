package collector

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// A path's synopsis sizes (RDA buckets, LDA rows, LDS shape, sampling
// rate) follow what its epochs showed, and a path's first epochs use the
// configured defaults until they do: the RDA shrinks only once 8 epochs
// are seen, the sample and the LDS are sized after the first. With
// thousands of paths those first epochs cost the collector about twice
// the later ones. The sizes the probes were last told are stored with the
// epoch that changed them, and a restarted collector tells the probes the
// same (they are still using them) rather than its defaults.

// sizesSetting fingerprints what sizes are chosen under: the synopsis
// parameters and the collector's sizing settings. Sizes stored under
// another setting are not used.
func sizesSetting(cfg Config) (uint64, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cfg.Params.ToProto())
	if err != nil {
		return 0, fmt.Errorf("encoding the synopsis parameters: %w", err)
	}
	d := xxhash.New()
	_, _ = d.Write(b)
	f := cfg.Flows
	_, _ = fmt.Fprintf(d, "%+v %d %d %d %q %d", cfg.RDA, f.LDSMinCols, f.LDSMinRows, f.LDSLargePackets, f.LDS, f.SampleMinDelays)
	return d.Sum64(), nil
}

// sizes are the sizes the path's probes were told, in the fields of a
// PathAssignment. The caller holds ps.mu.
func (ps *pathState) sizes() *owlv1.PathAssignment {
	return &owlv1.PathAssignment{RdaBuckets: uint32(ps.rdaBuckets), SampleShift: uint32(ps.sampleShift),
		LdsCols: uint32(ps.ldsCols), LdsRows: ps.ldsRows, LdsOff: ps.ldsOff, LdaRows: uint32(ps.ldaRows)}
}

// setSizes makes a's sizes (checked) the path's, as if told to its
// probes: they are stored already.
func (ps *pathState) setSizes(a *owlv1.PathAssignment) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.rdaBuckets, ps.ldaRows, ps.sampleShift = int(a.GetRdaBuckets()), int(a.GetLdaRows()), int(a.GetSampleShift())
	ps.ldsCols, ps.ldsRows, ps.ldsOff = int(a.GetLdsCols()), a.GetLdsRows(), a.GetLdsOff()
}

// resized notes that the path's sizes changed. The caller holds ps.mu.
func (ps *pathState) resized() { ps.sizesVersion++ }

// sizesToStore returns the path's sizes to store with an epoch, and their
// version, when they changed since they were last stored.
func (wk *worker) sizesToStore(ps *pathState) ([]store.PathSizes, int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.sizesVersion == ps.sizesStored {
		return nil, 0
	}
	return []store.PathSizes{{Path: ps.path.Name, Setting: wk.sizesSetting, Sizes: ps.sizes()}}, ps.sizesVersion
}

// sizesStoredAt notes that the path's sizes of version v are stored.
func (ps *pathState) sizesStoredAt(v int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.sizesStored = max(ps.sizesStored, v)
}

// checkSizes rejects stored sizes this configuration cannot use.
func (c Config) checkSizes(a *owlv1.PathAssignment) error {
	p := c.Params
	switch {
	case a.GetRdaBuckets() < 1 || a.GetRdaBuckets() > rda.MaxBuckets || int(a.GetRdaBuckets()) > max(c.RDA.MaxBuckets, p.RDA.Buckets):
		return fmt.Errorf("RDA buckets %d out of range", a.GetRdaBuckets())
	case a.GetLdaRows() < 1 || a.GetLdaRows() > lda.MaxRows || int(a.GetLdaRows()) > p.LDA.Rows:
		return fmt.Errorf("LDA rows %d out of range", a.GetLdaRows())
	case a.GetLdsCols() < 1 || int(a.GetLdsCols()) > p.LDS.Cols:
		return fmt.Errorf("LDS cells per row %d out of range", a.GetLdsCols())
	case p.LDS.Rows < 32 && a.GetLdsRows()>>p.LDS.Rows != 0:
		return fmt.Errorf("LDS rows %b not among the %d configured", a.GetLdsRows(), p.LDS.Rows)
	case a.GetSampleShift() > sample.MaxShift:
		return fmt.Errorf("sampling shift %d out of range", a.GetSampleShift())
	}
	return nil
}

// restoreSizes gives the configured paths the sizes a previous run stored
// under the same setting.
func (c *Collector) restoreSizes() error {
	all, bad, err := c.store.AllPathSizes()
	if err != nil {
		return fmt.Errorf("loading the paths' synopsis sizes: %w", err)
	}
	for _, e := range bad {
		c.log.Warn("dropping unreadable synopsis sizes", "err", e)
	}
	n, other := 0, 0
	for _, s := range all {
		ps := c.paths[s.Path]
		switch {
		case ps == nil:
			continue
		case s.Setting != c.worker.sizesSetting:
			other++
			continue
		}
		if err := c.cfg.checkSizes(s.Sizes); err != nil {
			c.log.Warn("not using the stored synopsis sizes of a path", "path", s.Path, "err", err)
			continue
		}
		ps.setSizes(s.Sizes)
		n++
	}
	if n > 0 || other > 0 {
		c.log.Info("synopsis sizes from the last run", "paths", n, "under_other_settings", other)
	}
	return nil
}

// ownSizes are the path's sizes and their setting where this member owns
// the path (nil where it does not: another's are not its to give).
func (c *Collector) ownSizes(path string) (*owlv1.PathAssignment, uint64) {
	if _, self := c.owner(path); !self {
		return nil, 0
	}
	ps := c.paths[path]
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.sizes(), c.worker.sizesSetting
}
