package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
)

// registry is what the collector knows of the probes and their open
// streams. Its methods are safe for concurrent use; none sends on a
// stream or touches the store while holding its lock.
type registry struct {
	params params.Params
	known  map[string]bool // probes named by a path (nil: any probe, for COLATE)
	named  map[string]bool // probes named by a path
	limits LimitsConfig
	m      *metrics
	log    *slog.Logger
	now    func() time.Time

	probesMu sync.Mutex // guards probes, sessions and joined
	probes   map[string]*probeState
	sessions map[string][]*session // the open streams of each probe, oldest first
	joined   chan struct{}         // closed (and replaced) when a probe opens a stream
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
	identity  string // how the probe proved its id (security.Identity.Via)
	// filesDone: the probe said its capture files are read and every
	// report of it acknowledged (SourcesDone); a new stream clears it.
	filesDone bool
	// replay is set when the probe said in its latest Hello that it
	// replays files: its epochs may be old.
	replay  bool
	refused uint64        // what it sent that was refused
	limiter *rate.Limiter // its reports' rate (nil: no bound)
	// reportsTotal is its series of owl_collector_reports_total, looked
	// up once: it is counted on every report.
	reportsTotal prometheus.Counter
}

// newRegistry makes a registry for the probes of paths; with COLATE on,
// a probe in no path is welcome too (it records vectors), up to
// limits.MaxProbes kept at once.
func newRegistry(p params.Params, paths []netpath.Path, limits LimitsConfig, m *metrics, log *slog.Logger, now func() time.Time) *registry {
	named := map[string]bool{}
	for _, x := range paths {
		named[x.Upstream], named[x.Downstream] = true, true
	}
	known := named
	if p.Colate.Enabled {
		known = nil
	}
	return &registry{params: p, known: known, named: named, limits: limits, m: m, log: log, now: now,
		probes: map[string]*probeState{}, sessions: map[string][]*session{}, joined: make(chan struct{})}
}

// rejection is an error a probe is told about; the report is acknowledged
// (it can never be used) and counted.
type rejection struct{ reason string }

func (r *rejection) Error() string { return r.reason }

// hello registers a probe stream, or rejects it when no path names it (with
// COLATE off) or its parameters differ from the deployment's. The caller then sends the probe its paths and
// adds the session (addSession). A stream past limits.MaxStreamsPerProbe
// is refused with errTooManyStreams.
func (r *registry) hello(h *owlv1.Hello, addr, identity string) error {
	id := h.GetProbeId()
	if !netpath.ValidName(id) {
		return &rejection{fmt.Sprintf("probe id %q: use 1–128 letters, digits or ._:-", id)}
	}
	if r.known != nil && !r.known[id] {
		// Not kept in the registry: any number of unknown ids may knock.
		r.m.probesRefused.WithLabelValues("not_in_paths").Inc()
		r.log.Error("rejecting probe: it is in no configured path", "probe", id, "addr", addr)
		return &rejection{fmt.Sprintf("probe %q is in no configured path (and COLATE is off): name it as a path's upstream or downstream in the collector's paths", id)}
	}
	var err error
	if h.GetParams() != nil { // unset: the probe takes the collector's
		var p params.Params
		if p, err = params.FromProto(h.GetParams()); err == nil {
			err = r.params.Compatible(p)
		}
	}
	r.probesMu.Lock()
	ps := r.probes[id]
	if ps == nil {
		if n := len(r.probes); n >= r.limits.MaxProbes && !r.named[id] {
			r.probesMu.Unlock()
			return r.full(id, addr, n)
		}
		ps = &probeState{id: id, limiter: newLimiter(r.limits.ReportsPerSecond)}
		r.probes[id] = ps
	}
	if n := ps.connected; n >= r.limits.MaxStreamsPerProbe {
		r.probesMu.Unlock()
		return r.tooManyStreams(id, addr, n)
	}
	ps.version, ps.addr, ps.lastSeen, ps.clock, ps.identity = h.GetVersion(), addr, r.now(), h.GetClock(), identity
	ps.replay = h.GetReplay()
	if err != nil {
		ps.err = fmt.Sprintf("parameters rejected: %v", err)
	} else {
		ps.err = ""
		ps.connected++
	}
	connected, reason := ps.connected, ps.err
	r.probesMu.Unlock()

	if h.GetClock() != nil {
		r.m.probeClock(id, h.GetClock())
	}
	if err != nil {
		r.m.mismatch.WithLabelValues(id).Inc()
		r.log.Error("rejecting probe: its parameters differ from the collector's", "probe", id, "addr", addr, "err", err)
		return &rejection{reason}
	}
	r.m.probesConnected.WithLabelValues(id).Set(float64(connected))
	r.log.Info("probe connected", "probe", id, "addr", addr, "version", h.GetVersion())
	return nil
}

// addSession makes a probe's stream the one requests go to. It is added
// once the stream has its path configuration: a probe takes nothing else
// first.
func (r *registry) addSession(sess *session) {
	r.probesMu.Lock()
	n := len(r.sessions[sess.probe])
	r.sessions[sess.probe] = append(r.sessions[sess.probe], sess)
	if ps := r.probes[sess.probe]; ps != nil {
		ps.filesDone = false // it may read files again
	}
	close(r.joined)
	r.joined = make(chan struct{})
	r.probesMu.Unlock()
	if n > 0 {
		// In a cluster a probe opens one stream to each collector it
		// sends to, which may name this one twice; alone, an old
		// stream not yet timed out. Requests go to the newest.
		r.log.Info("probe opened another stream; using the newest for requests", "probe", sess.probe, "streams", n+1)
	}
}

// goodbye marks the end of a probe's stream.
func (r *registry) goodbye(sess *session) {
	id := sess.probe
	r.probesMu.Lock()
	r.sessions[id] = slices.DeleteFunc(r.sessions[id], func(s *session) bool { return s == sess })
	if len(r.sessions[id]) == 0 {
		delete(r.sessions, id)
	}
	ps := r.probes[id]
	connected := -1
	if ps != nil && ps.connected > 0 {
		ps.connected--
		ps.lastSeen = r.now()
		connected = ps.connected
	}
	r.probesMu.Unlock()
	if connected >= 0 {
		r.m.probesConnected.WithLabelValues(id).Set(float64(connected))
		r.log.Info("probe disconnected", "probe", id)
	}
}

// clockUpdate takes a probe's current clock status.
func (r *registry) clockUpdate(probe string, st *owlv1.ClockStatus) {
	r.probesMu.Lock()
	if ps := r.probes[probe]; ps != nil {
		ps.clock, ps.lastSeen = st, r.now()
	}
	r.probesMu.Unlock()
	r.m.probeClock(probe, st)
}

// sawReport counts a report of a probe.
func (r *registry) sawReport(probe string) {
	r.probesMu.Lock()
	defer r.probesMu.Unlock()
	ps := r.probes[probe]
	if ps == nil {
		r.m.reports.WithLabelValues(probe).Inc()
		return
	}
	ps.lastSeen = r.now()
	ps.reports++
	if ps.reportsTotal == nil {
		ps.reportsTotal = r.m.reports.WithLabelValues(probe)
	}
	ps.reportsTotal.Inc()
}

// sourcesDone says whether the probe said its capture files are done
// (SourcesDone) since it last opened a stream: it sends no more reports,
// connected or not.
func (r *registry) sourcesDone(probe string) bool {
	r.probesMu.Lock()
	defer r.probesMu.Unlock()
	ps := r.probes[probe]
	return ps != nil && ps.filesDone
}

// markSourcesDone notes a probe's SourcesDone.
func (r *registry) markSourcesDone(probe string) {
	r.probesMu.Lock()
	defer r.probesMu.Unlock()
	if ps := r.probes[probe]; ps != nil {
		ps.filesDone = true
	}
}

// session returns a probe's newest open session, or nil.
func (r *registry) session(probe string) *session {
	r.probesMu.Lock()
	defer r.probesMu.Unlock()
	if ss := r.sessions[probe]; len(ss) > 0 {
		return ss[len(ss)-1]
	}
	return nil
}

// waitSession returns a probe's newest open session other than not (nil:
// any), waiting up to timeout for the probe to connect: after a restart
// of the collector, reports stored before it and a report of the other
// probe pair as soon as that one is back, before the first has
// reconnected; and a request whose stream ended is asked again on the
// stream the probe opens next.
func (r *registry) waitSession(ctx context.Context, probe string, timeout time.Duration, not *session) *session {
	var expired <-chan time.Time
	for {
		r.probesMu.Lock()
		ss, joined := r.sessions[probe], r.joined
		r.probesMu.Unlock()
		if len(ss) > 0 && ss[len(ss)-1] != not {
			return ss[len(ss)-1]
		}
		if expired == nil {
			t := time.NewTimer(timeout)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-joined:
		case <-expired:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// allSessions lists every open stream.
func (r *registry) allSessions() []*session {
	r.probesMu.Lock()
	defer r.probesMu.Unlock()
	var all []*session
	for _, ss := range r.sessions {
		all = append(all, ss...)
	}
	return all
}

// release tells a probe it may drop epochs of a path.
func (r *registry) release(probe, path string, epochs ...int64) {
	s := r.session(probe)
	if s == nil || len(epochs) == 0 {
		return
	}
	_ = s.release(path, epochs...)
}

// infos lists the probes, sorted by id.
func (r *registry) infos() []*owlv1.ProbeInfo {
	r.probesMu.Lock()
	defer r.probesMu.Unlock()
	out := make([]*owlv1.ProbeInfo, 0, len(r.probes))
	for _, ps := range r.probes {
		out = append(out, &owlv1.ProbeInfo{
			ProbeId: ps.id, Connected: ps.connected > 0, Version: ps.version, Address: ps.addr,
			LastSeen: timestamppb.New(ps.lastSeen), Error: ps.err, Clock: ps.clock, Reports: ps.reports, Refused: ps.refused, Identity: ps.identity,
		})
	}
	slices.SortFunc(out, func(a, b *owlv1.ProbeInfo) int { return cmp.Compare(a.ProbeId, b.ProbeId) })
	return out
}

// full refuses a new probe id: the registry keeps limits.MaxProbes (n)
// already.
func (r *registry) full(id, addr string, n int) error {
	r.m.probesRefused.WithLabelValues("max_probes").Inc()
	r.log.Warn("refusing probe: the collector keeps limits.max_probes probes already", "probe", id, "addr", addr, "probes", n)
	return &rejection{fmt.Sprintf("the collector keeps %d probes already (limits.max_probes), and no path names %q: it is taken once others have been gone for limits.forget_probes_after (%v)",
		n, id, r.limits.ForgetProbesAfter)}
}

// errTooManyStreams refuses a probe's stream when the probe has
// limits.MaxStreamsPerProbe open already: the probe may try again once one
// has ended, so it is no rejection.
var errTooManyStreams = errors.New("too many streams of one probe")

// tooManyStreams refuses a stream of a probe that has n open already.
func (r *registry) tooManyStreams(id, addr string, n int) error {
	r.m.probesRefused.WithLabelValues("max_streams_per_probe").Inc()
	r.log.Warn("refusing probe stream: the probe has limits.max_streams_per_probe streams open already", "probe", id, "addr", addr, "streams", n)
	return fmt.Errorf("%w: probe %q has %d open already (limits.max_streams_per_probe %d); open another once one has ended",
		errTooManyStreams, id, n, r.limits.MaxStreamsPerProbe)
}

// forgetIdle forgets the probes no path names that have had no stream
// for limits.ForgetProbesAfter, and deletes their metric series.
func (r *registry) forgetIdle() {
	now := r.now()
	r.probesMu.Lock()
	defer r.probesMu.Unlock() // series go under the lock: a new Hello's come after
	for id, ps := range r.probes {
		if r.named[id] || ps.connected > 0 || len(r.sessions[id]) > 0 || now.Sub(ps.lastSeen) < r.limits.ForgetProbesAfter {
			continue
		}
		delete(r.probes, id)
		r.m.forgetProbe(id)
		r.log.Info("forgot a probe no path names, disconnected since", "probe", id, "last_seen", ps.lastSeen)
	}
}

// replaying says whether a probe replays files, and whether the registry
// knows it.
func (r *registry) replaying(probe string) (replay, known bool) {
	r.probesMu.Lock()
	defer r.probesMu.Unlock()
	ps := r.probes[probe]
	if ps == nil {
		return false, false
	}
	return ps.replay, true
}

// limiter returns a probe's report rate limiter (nil: no bound, or a
// probe the registry does not know).
func (r *registry) limiter(probe string) *rate.Limiter {
	r.probesMu.Lock()
	defer r.probesMu.Unlock()
	if ps := r.probes[probe]; ps != nil {
		return ps.limiter
	}
	return nil
}

// refuse counts something a probe sent that was refused (ListProbes shows
// the count); reason says what, for the log. A probe the registry does
// not know is not counted.
func (r *registry) refuse(probe, reason string) {
	r.probesMu.Lock()
	ps := r.probes[probe]
	if ps != nil {
		ps.refused++
	}
	r.probesMu.Unlock()
	r.log.Debug("refused what a probe sent", "probe", probe, "reason", reason)
}
