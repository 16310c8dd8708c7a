package collector

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/cluster"
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
	ps.setSizesLocked(a)
}

// setSizesLocked is setSizes with ps.mu held.
func (ps *pathState) setSizesLocked(a *owlv1.PathAssignment) {
	ps.sized = true
	ps.rdaBuckets, ps.ldaRows, ps.sampleShift = int(a.GetRdaBuckets()), int(a.GetLdaRows()), int(a.GetSampleShift())
	ps.ldsCols, ps.ldsRows, ps.ldsOff = int(a.GetLdsCols()), a.GetLdsRows(), a.GetLdsOff()
}

// resized notes that the path's sizes changed. The caller holds ps.mu.
func (ps *pathState) resized() { ps.sizesVersion++; ps.sized = true }

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

// adoptSizes makes a's sizes the path's if it holds none beyond the
// defaults, as if its own epochs had chosen them (they are stored, and
// copied to the replica, with its next epoch); it says whether it did.
func (ps *pathState) adoptSizes(a *owlv1.PathAssignment) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.sized {
		return false
	}
	ps.setSizesLocked(a)
	ps.resized()
	return true
}

// sizesAskTimeout bounds asking the other members for sizes; sizesAskBatch
// bounds the paths named in one request.
const (
	sizesAskTimeout = time.Second
	sizesAskBatch   = 1000
)

// takeOverSizes gives the paths this member has come to own since it last
// looked (every path it owns, the first time) and holds no sizes of the
// sizes another member holds: of the members that hold some, the one
// ranked highest for the path, at a join the path's owner until then.
// Without them, the paths would start again at the defaults, and the
// probes, told so, would send larger synopses until the paths' epochs
// sized them again. It runs before the probes are given their paths.
func (c *Collector) takeOverSizes(ctx context.Context) {
	members := c.cl.Members()
	owned := make(map[string]bool, len(c.paths))
	var want []string
	for name, ps := range c.paths {
		if m := cluster.Owner(members, name); m.Name != "" && !m.Self {
			continue
		}
		owned[name] = true
		ps.mu.Lock()
		sized := ps.sized
		ps.mu.Unlock()
		if !sized && !c.ownedBefore[name] {
			want = append(want, name)
		}
	}
	c.ownedBefore = owned
	if len(want) == 0 || len(members) < 2 {
		return
	}
	held := c.askSizes(ctx, members, want)
	taken := 0
	for _, name := range want {
		h := highestHeld(members, name, held)
		switch {
		case h == nil || h.GetSetting() != c.worker.sizesSetting:
			continue
		case c.cfg.checkSizes(h.GetSizes()) != nil:
			c.log.Warn("not taking a member's synopsis sizes of a path", "path", name, "err", c.cfg.checkSizes(h.GetSizes()))
			continue
		}
		if c.paths[name].adoptSizes(h.GetSizes()) {
			taken++
		}
	}
	c.log.Info("synopsis sizes of paths taken over from other members", "paths_without", len(want), "taken", taken)
}

// highestHeld is the sizes of path held by the member ranked highest for
// it among those in held (member name → path → sizes), or nil.
func highestHeld(members []cluster.Member, path string, held map[string]map[string]*owlv1.HeldSizes) *owlv1.HeldSizes {
	for _, m := range cluster.Holders(members, path, len(members)) {
		if h := held[m.Name][path]; h != nil {
			return h
		}
	}
	return nil
}

// askSizes asks every other member, at once, for the sizes it holds of
// paths, and returns them by member name; a member that does not answer
// in time is left out.
func (c *Collector) askSizes(ctx context.Context, members []cluster.Member, paths []string) map[string]map[string]*owlv1.HeldSizes {
	ctx, cancel := context.WithTimeout(ctx, sizesAskTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]map[string]*owlv1.HeldSizes{}
	for _, m := range members {
		if m.Self {
			continue
		}
		wg.Go(func() {
			got, err := c.askMemberSizes(ctx, m, paths)
			if err != nil {
				c.log.Warn("asking a member for synopsis sizes", "member", m.Name, "err", err)
			}
			mu.Lock()
			out[m.Name] = got
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// askMemberSizes asks member m for the sizes it holds of paths, a batch
// at a time.
func (c *Collector) askMemberSizes(ctx context.Context, m cluster.Member, paths []string) (map[string]*owlv1.HeldSizes, error) {
	conn, err := c.peers.get(m.GRPC)
	if err != nil {
		return nil, err
	}
	got := map[string]*owlv1.HeldSizes{}
	for batch := range slices.Chunk(paths, sizesAskBatch) {
		resp, err := owlv1.NewClusterServiceClient(conn).Sizes(ctx, &owlv1.SizesRequest{Paths: batch})
		if err != nil {
			return got, err
		}
		for _, h := range resp.GetPaths() {
			got[h.GetPath()] = h
		}
	}
	return got, nil
}

// Sizes gives the sizes this member holds of the paths named.
func (s clusterService) Sizes(_ context.Context, req *owlv1.SizesRequest) (*owlv1.SizesResponse, error) {
	resp := &owlv1.SizesResponse{}
	seen := map[string]bool{}
	for _, name := range req.GetPaths() {
		ps := s.c.paths[name]
		if ps == nil || seen[name] {
			continue
		}
		seen[name] = true
		ps.mu.Lock()
		if ps.sized {
			resp.Paths = append(resp.Paths, &owlv1.HeldSizes{Path: name, Sizes: ps.sizes(), Setting: s.c.worker.sizesSetting})
		}
		ps.mu.Unlock()
	}
	return resp, nil
}
