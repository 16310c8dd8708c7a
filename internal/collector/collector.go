package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/owl-latency/owl/internal/cluster"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/lda"
)

// Collector pairs the two sides of each path and serves the results. It
// is made of parts with one job each: the registry of probes and their
// streams (probes), one pairing table per path (paths) whose epoch worker
// reconciles, stores and publishes, the watcher hub (watchers), and the
// gRPC services in ingest.go, query.go and cluster.go. Its methods are
// safe for concurrent use.
type Collector struct {
	cfg   Config
	log   *slog.Logger
	store *store.Store
	m     *metrics
	now   func() time.Time

	paths    map[string]*pathState // fixed after New
	pathList []netpath.Path
	probes   *registry
	watchers *hub
	worker   *worker

	cl       *cluster.Cluster // nil without a cluster; set before serving
	pathsGen atomic.Uint64    // counts changes of the cluster's members
	peers    peerConns
	// repl queues the copies of what is stored for the paths' replicas;
	// nil without a cluster.
	repl       *replicator
	catchUpNow chan struct{} // asks catchUpLoop for a round
	// ownedBefore are the paths this member owned when takeOverSizes last
	// looked (used by the cluster's goroutine only).
	ownedBefore map[string]bool

	colates *colates
	gate    *guardian
	// reorders exports each probe's worst reordered prefixes.
	reorders *reorderTop

	// pendingBytes is the synopsis bytes held in the pairing tables, as
	// measureBacklog last counted them; pendingByProbe the same by the
	// probe that sent them; pairedBytes the part of it in complete pairs
	// (the epochs the workers have yet to finish).
	pendingBytes   atomic.Int64
	pendingByProbe atomic.Pointer[map[string]int64]
	pairedBytes    atomic.Int64
	// probeNames are the probes the paths name, each once
	// (pathState.probeAt indexes it).
	probeNames   []string
	lastShedWarn atomic.Int64 // unix ns of the last warning about shedding
	// paused are the streams asked to hold their reports.
	paused pausedStreams
}

// New opens the store, loads the reports a previous run left waiting and
// returns a collector; Run serves it.
func New(cfg Config, log *slog.Logger) (*Collector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	began := time.Now()
	st, err := store.Open(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	// A slow disk shows here first: opening checks every page.
	log.Info("store open", "dir", cfg.DataDir, "took", time.Since(began).Round(time.Millisecond))
	st.SetCommitInterval(cfg.CommitInterval)
	if n, err := st.PruneBoundaries(boundaryKeep); err != nil {
		st.Close()
		return nil, fmt.Errorf("pruning boundary records: %w", err)
	} else if n > 0 {
		log.Info("deleted boundary records a previous run had dropped", "records", n)
	}
	c := &Collector{cfg: cfg, log: log, store: st, now: time.Now, paths: map[string]*pathState{}, peers: peerConns{maxMessageBytes: cfg.MaxMessageBytes}}
	c.m = newMetrics()
	c.reorders = newReorderTop(cfg.Reorder, cfg.Params.Epoch.Length, c.m.reg)
	if c.gate, err = newGuardian(cfg, c.m.reg); err != nil {
		st.Close()
		return nil, err
	}
	c.peers.creds = c.gate.peerCreds
	c.catchUpNow = make(chan struct{}, 1)
	if cfg.Cluster.Enabled() {
		c.repl = newReplicator(c.m, log)
	}
	now := func() time.Time { return c.now() } // tests move c.now
	c.probes = newRegistry(cfg.Params, cfg.Paths, cfg.Limits, c.m, log, now)
	c.watchers = newHub(c.m.watchersDropped, cfg.Limits.MaxWatchers)
	c.worker = &worker{cfg: cfg, log: log, store: st, m: c.m, now: now, paths: c.paths, probes: c.probes, watchers: c.watchers, repl: c.repl,
		opts: lda.Options{Bounds: lda.DelayBounds{MinNS: int64(cfg.DelayBounds.Min), MaxNS: int64(cfg.DelayBounds.Max)}}}
	c.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "owl_collector_cluster_members", Help: "Live collectors of the cluster (1 without one)."},
		func() float64 { return float64(len(c.members())) }))
	c.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "owl_collector_owned_paths", Help: "Configured paths this collector owns (all without a cluster)."},
		func() float64 {
			n := 0
			for _, p := range c.pathList {
				if _, self := c.owner(p.Name); self {
					n++
				}
			}
			return float64(n)
		}))
	c.registerBacklog()
	c.colates = newColates(cfg, st, c.m, now)
	if c.worker.weightOf, err = cfg.Params.WeightOf(); err != nil {
		st.Close()
		return nil, err
	}
	c.addPaths()
	if c.worker.sizesSetting, err = sizesSetting(cfg); err != nil {
		st.Close()
		return nil, err
	}
	if err := c.restoreSizes(); err != nil {
		st.Close()
		return nil, err
	}
	if err := c.restore(); err != nil {
		st.Close()
		return nil, err
	}
	if err := c.loadFlowAges(); err != nil {
		st.Close()
		return nil, err
	}
	return c, nil
}

// addPaths makes the state of each configured path, and numbers the
// probes they name (probeNames).
func (c *Collector) addPaths() {
	prm := c.cfg.Params
	probeAt := map[string]int{}
	for _, p := range c.cfg.Paths {
		ps := newPathState(p, prm.RDA.Buckets, prm.LDA.Rows, prm.LDS.Cols)
		for i, id := range []string{p.Upstream, p.Downstream} {
			if _, ok := probeAt[id]; !ok {
				probeAt[id] = len(c.probeNames)
				c.probeNames = append(c.probeNames, id)
			}
			ps.probeAt[i] = probeAt[id]
		}
		c.paths[p.Name] = ps
		c.pathList = append(c.pathList, p)
	}
}

// registerBacklog registers the gauges of what waits in the pairing
// tables: a collector that falls behind shows it there first.
func (c *Collector) registerBacklog() {
	backlog := func(f func(ps *pathState) float64) func() float64 {
		return func() float64 {
			n := 0.0
			for _, ps := range c.paths {
				ps.mu.Lock()
				n += f(ps)
				ps.mu.Unlock()
			}
			return n
		}
	}
	c.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "owl_collector_pending_sides", Help: "Reports held in memory waiting for their other side or their worker."},
		backlog(func(ps *pathState) float64 {
			n := 0
			for _, pr := range ps.pending {
				n += btoi(pr.up != nil) + btoi(pr.down != nil)
			}
			return float64(n)
		})))
	c.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "owl_collector_pending_synopsis_bytes", Help: "Memory of the reports held for their other side or their worker: synopses in wire form and the LDA, RDA and sample decoded."},
		backlog(func(ps *pathState) float64 { return float64(ps.pendingBytes()) })))
	c.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "owl_collector_queued_epochs", Help: "Epochs with both sides in, waiting for their path's worker."},
		backlog(func(ps *pathState) float64 { return float64(len(ps.queue)) })))
}

// pendingBytes is the synopsis bytes of the path's reports held in its
// pairing table (pathState.held; ps.mu need not be held).
func (ps *pathState) pendingBytes() int64 { return ps.held[0].Load() + ps.held[1].Load() }

// bytes is the memory the side's synopses take: their wire form, and
// the LDA, RDA and sample decoded when it came (together about twice the
// wire form again).
func (s *side) bytes() int {
	n := len(s.Report.GetLda()) + len(s.Report.GetRda()) + len(s.Report.GetLds()) + len(s.Report.GetList()) + len(s.Report.GetSample())
	if s.lda != nil {
		n += s.lda.HeapBytes()
	}
	if s.rda != nil {
		n += s.rda.HeapBytes()
	}
	if s.sample != nil {
		n += s.sample.HeapBytes()
	}
	return n
}

// measureBacklog counts the synopsis bytes held in the pairing tables, in
// all and by probe.
func (c *Collector) measureBacklog() {
	n, paired := int64(0), int64(0)
	byIndex := make([]int64, len(c.probeNames))
	for _, ps := range c.paths {
		up, down := ps.held[0].Load(), ps.held[1].Load()
		paired += ps.paired.Load()
		n += up + down
		byIndex[ps.probeAt[0]] += up
		byIndex[ps.probeAt[1]] += down
	}
	by := make(map[string]int64, len(byIndex))
	for i, b := range byIndex {
		if b != 0 {
			by[c.probeNames[i]] = b
		}
	}
	c.pendingBytes.Store(n)
	c.pendingByProbe.Store(&by)
	c.pairedBytes.Store(paired)
}

// backlogEvery is how often measureBacklog runs.
const backlogEvery = 100 * time.Millisecond

// backlogLoop measures the backlog every backlogEvery until ctx ends.
func (c *Collector) backlogLoop(ctx context.Context) {
	t := time.NewTicker(backlogEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.measureBacklog()
			c.resumePaused()
		}
	}
}

// errBusy ends a probe's stream when the backlog is over its bound.
var errBusy = errors.New("the collector is behind: its backlog of reports is over max_pending_bytes; reconnect later")

// overBacklog says whether a new report of probe must wait: the reports
// held in memory are over slack times MaxPendingBytes. The report is
// counted as shed, with a warning at most every 10 s.
func (c *Collector) overBacklog(probe string, slack float64) bool {
	max := c.cfg.MaxPendingBytes
	if max <= 0 || float64(c.pendingBytes.Load()) <= slack*float64(max) {
		return false
	}
	c.m.shed.WithLabelValues(probe, "pending_bytes").Inc()
	now, last := time.Now().UnixNano(), c.lastShedWarn.Load()
	if now-last >= int64(10*time.Second) && c.lastShedWarn.CompareAndSwap(last, now) {
		c.log.Warn("backlog over max_pending_bytes: probes' streams end and they send again later", "pending_bytes", c.pendingBytes.Load(), "max_pending_bytes", max)
	}
	return true
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Close closes the store.
func (c *Collector) Close() error {
	c.gate.close()
	return c.store.Close()
}
