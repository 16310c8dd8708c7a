package collector

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/cluster"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/colate"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// Collector holds the state of paths and probes. Its methods are safe for
// concurrent use; each path has its own lock.
type Collector struct {
	cfg   Config
	log   *slog.Logger
	store *store.Store
	m     *metrics
	now   func() time.Time
	opts  lda.Options

	paths    map[string]*pathState // fixed after New
	pathList []netpath.Path
	weightOf func(capture.FlowKey) uint64 // LDS flow weights

	mu     sync.Mutex
	probes map[string]*probeState

	// smu guards the sessions alone and is taken with no other lock
	// held after it: path workers ask for a session while holding their
	// path's lock, and hello holds mu while reading paths' state.
	smu      sync.Mutex
	sessions map[string][]*session // the open streams of each probe, oldest first
	joined   chan struct{}         // closed (and replaced) when a probe opens a stream

	cl       *cluster.Cluster // nil without a cluster; set before serving
	pathsGen atomic.Uint64    // counts changes of the cluster's members
	peers    peerConns

	wmu      sync.Mutex
	watchers map[chan *owlv1.PathStats]string // channel → path filter

	colatePairs *lru.Cache[pairKey, *colate.PairStats]
}

// pathState is everything the collector keeps for one path.
type pathState struct {
	path netpath.Path
	wake chan struct{} // signals the path's worker

	mu         sync.Mutex
	pending    map[int64]*pairing // by epoch
	queue      []int64            // epochs with both sides in, for the worker
	boundaries map[int64]*boundary
	recentDiff []int // set difference sizes of recent epochs
	rdaBuckets int   // RDA size the probes were told to use
	newest     int64 // newest epoch reconciled
	seen       bool  // newest is set
}

// pairing is one epoch of a path whose sides have not both arrived.
type pairing struct {
	up, down *side
	first    time.Time
	timedOut bool // a missing-side result was written
	// In a cluster, at the pair timeout the owner first asks the other
	// members for the missing side (handOver): asking while it runs,
	// asked once it is done.
	asking, asked bool
}

type side struct {
	store.Pending
	lda *lda.LDA
	rda *rda.RDA // nil when the report has none
	lds *lds.LDS // nil when the report has none
}

// probeState is what the collector knows of a probe.
type probeState struct {
	id        string
	version   string
	addr      string
	connected int // open streams
	lastSeen  time.Time
	err       string
	clock     *owlv1.ClockStatus
	reports   uint64
}

// New opens the store, loads the reports a previous run left waiting and
// returns a collector; Run serves it.
func New(cfg Config, log *slog.Logger) (*Collector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st, err := store.Open(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	c := &Collector{
		cfg: cfg, log: log, store: st, now: time.Now,
		opts:     lda.Options{Bounds: lda.DelayBounds{MinNS: int64(cfg.DelayBounds.Min), MaxNS: int64(cfg.DelayBounds.Max)}},
		paths:    map[string]*pathState{},
		probes:   map[string]*probeState{},
		sessions: map[string][]*session{},
		joined:   make(chan struct{}),
		watchers: map[chan *owlv1.PathStats]string{},
	}
	c.m = newMetrics()
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
	c.colatePairs, _ = lru.New[pairKey, *colate.PairStats](pairStatsCache) // size > 0: no error
	if c.weightOf, err = cfg.Params.WeightOf(); err != nil {
		st.Close()
		return nil, err
	}
	for _, p := range cfg.Paths {
		c.paths[p.Name] = &pathState{path: p, pending: map[int64]*pairing{}, wake: make(chan struct{}, 1),
			boundaries: map[int64]*boundary{}, rdaBuckets: cfg.Params.RDA.Buckets}
		c.pathList = append(c.pathList, p)
	}
	if err := c.restore(); err != nil {
		st.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the store.
func (c *Collector) Close() error { return c.store.Close() }

// restore reloads the reports still waiting for their other side.
func (c *Collector) restore() error {
	pend, bad, err := c.store.AllPending()
	if err != nil {
		return fmt.Errorf("loading pending reports: %w", err)
	}
	for _, e := range bad {
		c.log.Error("dropping unreadable pending report", "err", e)
	}
	n := 0
	for _, p := range pend {
		ps := c.paths[p.Report.GetPath()]
		if ps == nil {
			c.log.Warn("dropping pending report of a path no longer configured", "path", p.Report.GetPath())
			_ = c.store.DeletePending(p.Report.GetPath(), p.Report.GetEpoch())
			continue
		}
		s, err := decodeSide(p)
		if err != nil {
			continue // it was checked when it came
		}
		pr := ps.pairingFor(p.Report.GetEpoch(), p.Received)
		if p.Report.GetRole() == owlv1.Role_ROLE_UPSTREAM {
			pr.up = s
		} else {
			pr.down = s
		}
		n++
	}
	if n > 0 {
		c.log.Info("restored pending reports", "reports", n)
	}
	// Pairs whose both sides were stored but not yet combined.
	for _, ps := range c.paths {
		var ready []int64
		for e, pr := range ps.pending {
			if pr.up != nil && pr.down != nil {
				ready = append(ready, e)
			}
		}
		slices.Sort(ready)
		for _, e := range ready {
			ps.enqueue(e)
		}
	}
	return nil
}

// decodeSide decodes a report's synopses.
func decodeSide(p store.Pending) (*side, error) {
	l, err := lda.Decode(p.Report.GetLda())
	if err != nil {
		return nil, err
	}
	s := &side{Pending: p, lda: l}
	if b := p.Report.GetRda(); len(b) > 0 {
		if s.rda, err = rda.Decode(b); err != nil {
			return nil, err
		}
	}
	if b := p.Report.GetLds(); len(b) > 0 {
		if s.lds, err = lds.Decode(b); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (ps *pathState) pairingFor(epoch int64, at time.Time) *pairing {
	pr := ps.pending[epoch]
	if pr == nil {
		pr = &pairing{first: at}
		ps.pending[epoch] = pr
	}
	return pr
}

// rejection is an error a probe is told about; the report is acknowledged
// (it can never be used) and counted.
type rejection struct{ reason string }

func (r *rejection) Error() string { return r.reason }

// hello registers a probe stream, or rejects it when its parameters differ
// from the deployment's. The caller then sends the probe its paths
// (sendPaths).
func (c *Collector) hello(h *owlv1.Hello, addr string, sess *session) error {
	id := h.GetProbeId()
	if !netpath.ValidName(id) {
		return &rejection{fmt.Sprintf("probe id %q: use 1–128 letters, digits or ._:-", id)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := c.probes[id]
	if ps == nil {
		ps = &probeState{id: id}
		c.probes[id] = ps
	}
	ps.version, ps.addr, ps.lastSeen, ps.clock = h.GetVersion(), addr, c.now(), h.GetClock()
	if ps.clock != nil {
		c.m.probeClock(id, ps.clock)
	}
	p, err := params.FromProto(h.GetParams())
	if err == nil {
		err = c.cfg.Params.Compatible(p)
	}
	if err != nil {
		ps.err = fmt.Sprintf("parameters rejected: %v", err)
		c.m.mismatch.WithLabelValues(id).Inc()
		c.log.Error("rejecting probe: its parameters differ from the collector's", "probe", id, "addr", addr, "err", err)
		return &rejection{ps.err}
	}
	ps.err = ""
	ps.connected++
	c.m.probesConnected.WithLabelValues(id).Set(float64(ps.connected))
	c.log.Info("probe connected", "probe", id, "addr", addr, "version", h.GetVersion())
	return nil
}

// addSession makes a probe's stream the one requests go to. It is added
// once the stream has its path configuration: a probe takes nothing else
// first.
func (c *Collector) addSession(sess *session) {
	c.smu.Lock()
	defer c.smu.Unlock()
	if n := len(c.sessions[sess.probe]); n > 0 {
		// In a cluster a probe opens one stream to each collector it
		// sends to, which may name this one twice; alone, an old
		// stream not yet timed out. Requests go to the newest.
		c.log.Info("probe opened another stream; using the newest for requests", "probe", sess.probe, "streams", n+1)
	}
	c.sessions[sess.probe] = append(c.sessions[sess.probe], sess)
	close(c.joined)
	c.joined = make(chan struct{})
}

// sendPaths sends a probe's stream its path configuration as it is now.
// The configuration is made and sent under the session's own lock, so
// that of two sends racing (a new stream, a change of the cluster's
// members), the newer configuration arrives last.
func (c *Collector) sendPaths(sess *session) error {
	sess.pathsMu.Lock()
	defer sess.pathsMu.Unlock()
	return sess.send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Paths{Paths: c.pathConfig(sess.probe)}})
}

// pathConfig is the configuration of a probe's paths: its role on each,
// the RDA size to start with, and in a cluster which collector takes the
// reports (the size comes from the owner only, whose late binding sets it).
func (c *Collector) pathConfig(id string) *owlv1.PathConfig {
	pc := &owlv1.PathConfig{}
	if c.cl != nil {
		pc.ColateCollector = c.cl.Owner(colateKey).GRPC
	}
	for _, p := range c.pathList {
		role := owlv1.Role_ROLE_UNSPECIFIED
		switch id {
		case p.Upstream:
			role = owlv1.Role_ROLE_UPSTREAM
		case p.Downstream:
			role = owlv1.Role_ROLE_DOWNSTREAM
		}
		if role == owlv1.Role_ROLE_UNSPECIFIED {
			continue
		}
		a := &owlv1.PathAssignment{Path: p.ToProto(), Role: role}
		owner, self := c.owner(p.Name)
		a.Collector = owner.GRPC
		if self {
			st := c.paths[p.Name]
			st.mu.Lock()
			a.RdaBuckets = uint32(st.rdaBuckets)
			st.mu.Unlock()
		}
		pc.Paths = append(pc.Paths, a)
	}
	return pc
}

// goodbye marks the end of a probe's stream.
func (c *Collector) goodbye(id string, sess *session) {
	c.smu.Lock()
	c.sessions[id] = slices.DeleteFunc(c.sessions[id], func(s *session) bool { return s == sess })
	if len(c.sessions[id]) == 0 {
		delete(c.sessions, id)
	}
	c.smu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps := c.probes[id]; ps != nil && ps.connected > 0 {
		ps.connected--
		ps.lastSeen = c.now()
		c.m.probesConnected.WithLabelValues(id).Set(float64(ps.connected))
		c.log.Info("probe disconnected", "probe", id)
	}
}

// clockUpdate takes a probe's current clock status.
func (c *Collector) clockUpdate(probe string, st *owlv1.ClockStatus) {
	c.mu.Lock()
	if ps := c.probes[probe]; ps != nil {
		ps.clock, ps.lastSeen = st, c.now()
	}
	c.mu.Unlock()
	c.m.probeClock(probe, st)
}

// report takes one epoch report of a probe. A nil error means the report is
// stored (or was already used) and may be acknowledged. A *rejection means
// it can never be used. Other errors are failures of the collector.
func (c *Collector) report(probe string, r *owlv1.EpochReport) error {
	c.mu.Lock()
	if ps := c.probes[probe]; ps != nil {
		ps.lastSeen = c.now()
		ps.reports++
	}
	c.mu.Unlock()
	c.m.reports.WithLabelValues(probe).Inc()

	ps := c.paths[r.GetPath()]
	if ps == nil {
		c.m.rejected.WithLabelValues("unknown_path").Inc()
		return &rejection{fmt.Sprintf("path %q is not configured", r.GetPath())}
	}
	if owner, self := c.owner(r.GetPath()); !self {
		c.m.rejected.WithLabelValues("not_owner").Inc()
		return &notOwner{key: r.GetPath(), owner: owner}
	}
	want := ps.path.Upstream
	if r.GetRole() == owlv1.Role_ROLE_DOWNSTREAM {
		want = ps.path.Downstream
	} else if r.GetRole() != owlv1.Role_ROLE_UPSTREAM {
		c.m.rejected.WithLabelValues("bad_role").Inc()
		return &rejection{fmt.Sprintf("path %q: report without a role", r.GetPath())}
	}
	if probe != want {
		c.m.rejected.WithLabelValues("bad_role").Inc()
		return &rejection{fmt.Sprintf("path %q: %s is not its %s", r.GetPath(), probe, roleName(r.GetRole()))}
	}
	s, err := decodeSide(store.Pending{Probe: probe, Received: c.now(), Report: r})
	if err != nil {
		c.m.rejected.WithLabelValues("malformed").Inc()
		return &rejection{fmt.Sprintf("path %q epoch %d: %v", r.GetPath(), r.GetEpoch(), err)}
	}
	err = c.cfg.Params.LDA.Compatible(s.lda.Config())
	if err == nil && s.rda != nil {
		err = params.SameRDAHashing(c.cfg.Params.RDA, s.rda.Config())
	}
	if err == nil && s.lds != nil {
		err = c.cfg.Params.LDS.Compatible(s.lds.Config())
	}
	if err == nil && len(r.GetTopFlows()) > 100_000 {
		err = fmt.Errorf("%d top flows exceed 100000", len(r.GetTopFlows()))
	}
	if err != nil {
		c.m.rejected.WithLabelValues("mismatch").Inc()
		c.m.mismatch.WithLabelValues(probe).Inc()
		return &rejection{fmt.Sprintf("path %q epoch %d: %v", r.GetPath(), r.GetEpoch(), err)}
	}
	c.m.reportBytes.WithLabelValues(r.GetPath()).Add(float64(len(r.GetLda()) + len(r.GetRda()) + len(r.GetLds())))

	ps.mu.Lock()
	defer ps.mu.Unlock()
	pr := ps.pending[r.GetEpoch()]
	if pr != nil && (r.GetRole() == owlv1.Role_ROLE_UPSTREAM && pr.up != nil || r.GetRole() == owlv1.Role_ROLE_DOWNSTREAM && pr.down != nil) {
		// This side is in already (sent again after a reconnect, maybe
		// while its epoch is being stored).
		c.m.dupReports.Inc()
		return nil
	}
	if pr == nil {
		// Already combined (a report sent again after a reconnect)?
		if res, err := c.store.Result(r.GetPath(), r.GetEpoch()); err != nil {
			return err
		} else if res != nil && res.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_MISSING_UPSTREAM &&
			res.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM {
			c.m.dupReports.Inc()
			c.release(probe, r.GetPath(), r.GetEpoch())
			return nil
		}
	}
	if err := c.store.PutPending(s.Pending); err != nil {
		return fmt.Errorf("storing report: %w", err)
	}
	pr = ps.pairingFor(r.GetEpoch(), s.Received)
	if r.GetRole() == owlv1.Role_ROLE_UPSTREAM {
		pr.up = s
	} else {
		pr.down = s
	}
	if pr.up != nil && pr.down != nil {
		ps.enqueue(r.GetEpoch())
	}
	return nil
}

func roleName(r owlv1.Role) string {
	if r == owlv1.Role_ROLE_DOWNSTREAM {
		return "downstream"
	}
	return "upstream"
}

// missingResult is the result of an epoch one side of which never came.
func (c *Collector) missingResult(path string, epoch int64, up, down *side) *owlv1.PathStats {
	res := c.baseResult(path, epoch, up, down)
	defer judgeClocks(res, c.cfg.ClockUncertaintyShare)
	if up == nil {
		res.Status = owlv1.ResultStatus_RESULT_STATUS_MISSING_UPSTREAM
		res.Detail = fmt.Sprintf("no report from upstream probe within %v", c.cfg.PairTimeout)
	} else {
		res.Status = owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM
		res.Detail = fmt.Sprintf("no report from downstream probe within %v", c.cfg.PairTimeout)
	}
	return res
}

// publish updates metrics and hands a new result to watchers.
func (c *Collector) publish(res *owlv1.PathStats, pr *pairing) {
	c.m.observe(res)
	if pr != nil && pr.up != nil && pr.down != nil {
		closed := max(pr.up.Report.GetClosedUnixNs(), pr.down.Report.GetClosedUnixNs())
		if closed > 0 {
			c.m.resultDelay.Observe(c.now().Sub(time.Unix(0, closed)).Seconds())
		}
	}
	c.notify(res)
}

// publishUpdate hands watchers a result that changed after it was first
// published (boundary matching with a neighbouring epoch).
func (c *Collector) publishUpdate(res *owlv1.PathStats) {
	c.m.latest(res)
	c.notify(res)
}

// notify sends a result to the watchers of its path.
func (c *Collector) notify(res *owlv1.PathStats) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for ch, path := range c.watchers {
		if path != "" && path != res.GetPath() {
			continue
		}
		c.sendWatcher(ch, res)
	}
}

// sendWatcher hands a watcher a result; a watcher that does not keep up
// is cut off: it sees the channel closed and ends its stream with an
// error. c.wmu is held.
func (c *Collector) sendWatcher(ch chan *owlv1.PathStats, res *owlv1.PathStats) {
	select {
	case ch <- res:
	default:
		close(ch)
		delete(c.watchers, ch)
		c.m.watchersDropped.Inc()
	}
}

// notifyOne hands one watcher a result another collector computed.
func (c *Collector) notifyOne(ch chan *owlv1.PathStats, res *owlv1.PathStats) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, ok := c.watchers[ch]; ok {
		c.sendWatcher(ch, res)
	}
}

// watch subscribes to new results of a path ("" for all).
func (c *Collector) watch(path string) chan *owlv1.PathStats {
	ch := make(chan *owlv1.PathStats, 1024)
	c.wmu.Lock()
	c.watchers[ch] = path
	c.wmu.Unlock()
	return ch
}

// unwatch ends a subscription.
func (c *Collector) unwatch(ch chan *owlv1.PathStats) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, ok := c.watchers[ch]; ok {
		delete(c.watchers, ch)
		close(ch)
	}
}

// sweep writes missing-side results for epochs whose other side did not come
// within PairTimeout, and forgets lone reports after PairRetention.
func (c *Collector) sweep() {
	now := c.now()
	for _, ps := range c.paths {
		ps.mu.Lock()
		for e, pr := range ps.pending {
			age := now.Sub(pr.first)
			if pr.up != nil && pr.down != nil {
				continue // the worker has it
			}
			if age >= c.cfg.PairTimeout && c.cl != nil && !pr.asked {
				if !pr.asking {
					pr.asking = true
					role := owlv1.Role_ROLE_UPSTREAM
					if pr.up != nil {
						role = owlv1.Role_ROLE_DOWNSTREAM
					}
					go c.handOver(ps, e, role)
				}
				continue
			}
			if !pr.timedOut && age >= c.cfg.PairTimeout {
				res := c.missingResult(ps.path.Name, e, pr.up, pr.down)
				if err := c.store.PutResult(res, false); err != nil {
					c.log.Error("storing missing-side result", "path", ps.path.Name, "epoch", e, "err", err)
					continue
				}
				pr.timedOut = true
				c.log.Warn("epoch missing a side", "path", ps.path.Name, "epoch", e, "status", res.Status)
				c.publish(res, nil)
				if pr.up != nil {
					c.release(pr.up.Probe, ps.path.Name, e)
				}
				if pr.down != nil {
					c.release(pr.down.Probe, ps.path.Name, e)
				}
			}
			if pr.timedOut && age >= c.cfg.PairTimeout+c.cfg.PairRetention {
				if err := c.store.DeletePending(ps.path.Name, e); err != nil {
					c.log.Error("dropping lone report", "path", ps.path.Name, "epoch", e, "err", err)
					continue
				}
				delete(ps.pending, e)
			}
		}
		// Boundary matching waits for the next epoch only so long.
		for _, b := range ps.boundaries {
			if !b.settled && now.Sub(b.at) >= c.cfg.PairTimeout {
				b.settled = true
				c.m.settled(b.res)
			}
		}
		ps.mu.Unlock()
	}
}

// probeInfos lists the probes, sorted by id.
func (c *Collector) probeInfos() []*owlv1.ProbeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*owlv1.ProbeInfo, 0, len(c.probes))
	for _, ps := range c.probes {
		out = append(out, &owlv1.ProbeInfo{
			ProbeId: ps.id, Connected: ps.connected > 0, Version: ps.version, Address: ps.addr,
			LastSeen: timestamppb.New(ps.lastSeen), Error: ps.err, Clock: ps.clock, Reports: ps.reports,
		})
	}
	slices.SortFunc(out, func(a, b *owlv1.ProbeInfo) int {
		if a.ProbeId < b.ProbeId {
			return -1
		}
		if a.ProbeId > b.ProbeId {
			return 1
		}
		return 0
	})
	return out
}
