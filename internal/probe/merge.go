package probe

import (
	"slices"
	"sync"

	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/reorder"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// merger combines the epochs that the workers of a live capture close, each
// with its own synopses of the packets its fanout socket received, into one
// epoch per path. LDA, RDA and LDS merge exactly (sums and counts add, ID
// xors and digests xor), caches concatenate; the RAP tables of the workers
// are combined by counts, which is exact for flows every worker tracked and
// an estimate otherwise (fanout hashing keeps a flow on one worker).
//
// An epoch is complete when every worker has handed it in or has moved past
// its end plus grace without it (a worker that saw no packet of the epoch).
// Safe for concurrent use.
type merger struct {
	grid epoch.Config
	out  func(closedEpoch)
	// maxSample is params.sample.max_entries: a merged sample larger is
	// halved, as one pipeline's would have been.
	maxSample int

	mu    sync.Mutex
	parts map[int64]*part
	marks []int64 // per worker: time (ns) up to which it has closed epochs
	seen  []bool  // per worker: mark is set
}

type part struct {
	ce  closedEpoch
	got []bool
}

func newMerger(workers int, grid epoch.Config, maxSample int, out func(closedEpoch)) *merger {
	return &merger{grid: grid, out: out, maxSample: maxSample, parts: map[int64]*part{}, marks: make([]int64, workers), seen: make([]bool, workers)}
}

// add hands in worker w's closed epoch.
func (m *merger) add(w int, ce closedEpoch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[ce.epoch]
	if p == nil {
		p = &part{ce: ce, got: make([]bool, len(m.marks))}
		m.parts[ce.epoch] = p
	} else {
		mergeEpoch(&p.ce, ce, m.maxSample)
	}
	p.got[w] = true
	// A worker hands in epochs in order: it is done with every epoch up to
	// this one.
	if end := m.grid.EndNS(ce.epoch) + int64(m.grid.Grace); !m.seen[w] || end > m.marks[w] {
		m.marks[w], m.seen[w] = end, true
	}
	m.flush()
}

// watermark tells that worker w has closed every epoch whose end plus
// grace is at or before nowNS.
func (m *merger) watermark(w int, nowNS int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.seen[w] || nowNS > m.marks[w] {
		m.marks[w], m.seen[w] = nowNS, true
	}
	m.flush()
}

// flush hands out, oldest first, the epochs every worker is done with.
// m.mu is held.
func (m *merger) flush() {
	var ready []int64
	for e, p := range m.parts {
		done := true
		for w := range m.marks {
			if !p.got[w] && (!m.seen[w] || m.marks[w] < m.grid.EndNS(e)+int64(m.grid.Grace)) {
				done = false
				break
			}
		}
		if done {
			ready = append(ready, e)
		}
	}
	slices.Sort(ready)
	for _, e := range ready {
		m.out(m.parts[e].ce)
		delete(m.parts, e)
	}
}

// mergeEpoch adds b's synopses and counters to a's, path by path; a
// merged sample of more than maxSample entries is halved until it is not.
func mergeEpoch(a *closedEpoch, b closedEpoch, maxSample int) {
	a.late += b.late
	for i := range a.failures {
		a.failures[i] += b.failures[i]
	}
	x, y := a.data, b.data
	x.outside += y.outside
	if x.colate != nil && y.colate != nil {
		_ = x.colate.Merge(y.colate) // same parameters and epoch: cannot fail
		putVector(y.colate)
		y.colate = nil
	}
	if x.rtt != nil && y.rtt != nil {
		x.rtt.Merge(y.rtt)
	}
	if x.reorder != nil && y.reorder != nil {
		// The reporter folds the prefixes down to the configured number.
		x.reorder = reorder.Merge(reorder.MaxPrefixes, x.reorder, y.reorder)
	}
	for j, pb := range y.set.paths {
		i := slices.IndexFunc(x.set.paths, func(pa assignment) bool { return pa.path.Name == pb.path.Name })
		if i < 0 {
			continue // the path set changed between workers' epochs: rare, and this shard is lost
		}
		x.packets[i] += y.packets[j]
		x.copies[i] = append(x.copies[i], y.copies[j]...)
		ldaMerged := x.ldas[i].Merge(y.ldas[j]) == nil // fails where a new LDA size came between the workers' epochs
		if x.ldss[i] != nil && y.ldss[j] != nil {
			_ = x.ldss[i].Merge(y.ldss[j])
		} else {
			x.ldss[i] = nil // the LDS was turned off or on between the workers' epochs: no sketch of part of the packets
		}
		for _, e := range y.raps[j].Top(y.raps[j].Len()) {
			x.raps[i].AddCount(e.Key, &e.Value, e.Count)
		}
		if x.samples[i] != nil && y.samples[j] != nil {
			// As one pipeline would: the rate the collector set, halved
			// only past params.sample.max_entries. (Halving down to the
			// larger worker's share, as this once did, halved every
			// sample of a probe with two workers: the other side, at
			// the rate set, was joined at the lower.)
			_ = x.samples[i].Merge(y.samples[j]) // one seed: cannot fail
			for x.samples[i].Len() > maxSample && x.samples[i].Config().Shift() < sample.MaxShift {
				x.samples[i].Halve()
			}
		}
		cx := x.caches[i]
		cx.appendAll(y.caches[j])
		if !ldaMerged && cx.complete {
			x.ldas[i] = rebuildLDA(x.ldas[i], cx)
		}
		if x.rdas[i] != nil && y.rdas[j] != nil && x.rdas[i].Merge(y.rdas[j]) == nil {
			continue
		}
		// The workers built the RDA at different sizes (a new size came
		// in between): build it again from the merged cache at the
		// larger, or give it up when the cache is not complete.
		x.rdas[i] = rebuildLarger(x.rdas[i], y.rdas[j], cx)
	}
}

// rebuildLDA is an LDA of l's shape built again from the merged cache c.
func rebuildLDA(l *lda.LDA, c *epochCache) *lda.LDA {
	r, err := lda.New(l.Config())
	if err != nil {
		return l
	}
	c.each(func(e entry) { r.Insert(e.id, e.offsetNS()) })
	return r
}

func rebuildLarger(a, b *rda.RDA, c *epochCache) *rda.RDA {
	if a == nil || b == nil || !c.complete {
		return nil
	}
	cfg := a.Config()
	cfg.Buckets = max(a.Config().Buckets, b.Config().Buckets)
	r, err := rda.New(cfg)
	if err != nil {
		return nil
	}
	c.each(func(e entry) { r.Insert(e.id, e.offsetNS()) })
	return r
}
