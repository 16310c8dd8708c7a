package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/buildinfo"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/ptp"
	"github.com/owl-latency/owl/internal/security"
)

// Probe is one observation point.
type Probe struct {
	cfg       Config
	log       *slog.Logger
	spool     *spool
	stats     counters
	router    *router
	rep       *reporter
	ready     chan struct{} // closed when the first path configuration arrived
	readyOnce sync.Once
	reg       *prometheus.Registry
	caches    *cacheStore
	disk      *disk             // nil without a data directory
	live      *liveCapture      // nil for file sources
	clock     ptp.Clock         // live: the configured source; files: "file"
	source    ptp.Source        // the live clock's measuring loop
	workers   int               // capture workers, each with a pipeline
	correct   func(int64) int64 // maps live timestamps onto the reference clock

	// pipesMu guards the parameters in use and what is built for them.
	// They are set once, when the parameters are known (in New when
	// explicit, else with the first path configuration that carries
	// them), before ready is closed: capture reads them after ready
	// without the lock.
	pipesMu sync.Mutex
	inUse   *params.Params // nil until known
	pipes   []*pipeline    // one per capture worker
	merge   *merger        // for more than one worker
}

// New builds a probe; Run starts it.
func New(cfg Config, log *slog.Logger) (*Probe, error) {
	if err := cfg.TakeCertificateID(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	creds, err := probeCredentials(cfg)
	if err != nil {
		return nil, err
	}
	for _, s := range cfg.Sources {
		if s.File == "" {
			continue
		}
		if _, err := os.Stat(s.File); err != nil {
			return nil, fmt.Errorf("capture file: %w", err)
		}
	}
	p := &Probe{cfg: cfg, log: log, spool: newSpool(cfg.SpoolMaxEpochs, cfg.SpoolMaxBytes), ready: make(chan struct{}),
		caches: newCacheStore(cfg.Cache.Retention, cfg.Cache.MaxBytes)}
	p.spool.log, p.caches.log = log, log
	p.clock = ptp.NewFixed(ptp.Status{Source: "file", State: ptp.StateUnknown, Detail: "timestamps come from the capture files"}, 0)
	p.rep = &reporter{caches: p.caches, topFlows: cfg.TopFlows, exactLists: cfg.ExactLists, gzipped: cfg.Gzip, clock: p.clockOver, emit: p.spool.add,
		emitRTT: p.spool.addRTT, emitReorder: p.spool.addReorder, reorderCut: newReorderCutter(cfg.Reorder.Prefixes.Max),
		emitVector: func(v *owlv1.ColateVector) {
			p.stats.colateVectors.Add(1)
			p.stats.colateBytes.Add(uint64(len(v.GetVector())))
			p.spool.addVector(v)
		}}
	p.workers = 1
	if lc := cfg.Sources[0].Live; lc != nil {
		p.workers = lc.Workers
		p.live = &liveCapture{cfg: *lc}
		p.rep.dropped = p.live.droppedSince
		src, err := ptp.New(cfg.Clock)
		if err != nil {
			return nil, fmt.Errorf("clock: %w", err)
		}
		p.clock, p.source, p.correct = src, src, src.Correct
	}
	if cfg.ExplicitParams {
		if err := p.build(cfg.Params); err != nil {
			return nil, err
		}
	}
	conn, err := dial(cfg.Collector, creds, cfg.Gzip) // checks the address now
	if err != nil {
		return nil, err
	}
	conn.Close()
	p.router = newRouter(cfg.Collector, creds, log, func() *client {
		return &client{log: log, spool: p.spool, reconnectMax: cfg.ReconnectMax, h: p}
	})
	p.router.gzip = cfg.Gzip
	if cfg.DataDir != "" {
		if err := p.openDisk(); err != nil {
			return nil, err
		}
	}
	p.reg = p.metrics()
	return p, nil
}

var _ handler = (*Probe)(nil)

// openDisk takes up the spool and caches a previous run left in the data
// directory, and keeps them there from now on.
func (p *Probe) openDisk() error {
	d, err := openDisk(p.cfg.DataDir, p.cfg.ID, p.log)
	if err != nil {
		return err
	}
	msgs, err := p.spool.load(d)
	if err != nil {
		d.close()
		return err
	}
	spooled := map[cacheKey]bool{}
	for _, m := range p.spool.after(0) {
		if r := m.GetReport(); r != nil {
			spooled[cacheKey{r.GetPath(), r.GetEpoch()}] = true
		}
	}
	caches := p.caches.load(d, p.cfg.Cache.MaxPackets, func(k cacheKey) bool { return spooled[k] })
	if pc := d.paths(); pc != nil {
		// Capture starts with the paths (and the collector's
		// parameters) of the previous run; the collector's
		// configuration replaces them when it comes.
		if err := p.setPaths(pc); err != nil {
			p.log.Error("ignoring the kept path configuration; waiting for the collector's", "err", err)
		}
	}
	p.disk = d
	if msgs+caches > 0 {
		p.log.Info("took up what the previous run left", "data_dir", p.cfg.DataDir, "unacked", msgs, "caches", caches)
	}
	return nil
}

// setPaths takes a path configuration from a collector (or the one the
// previous run kept). The first that carries parameters sets those of a
// probe not given its own; a later one with others ends the probe with
// ErrParamsChanged.
func (p *Probe) setPaths(pc *owlv1.PathConfig) error {
	s, err := newPathSet(pc)
	if err != nil {
		return err
	}
	pipes, err := p.takeParams(pc.GetParams())
	if errors.Is(err, ErrParamsChanged) {
		p.log.Error("the collector's parameters differ from those the probe captures with: stopping, so that a restart takes them", "err", err)
		if p.disk != nil {
			p.disk.putPaths(pc) // a restart captures with the new ones at once
		}
	}
	if err != nil {
		return err
	}
	for _, pl := range pipes {
		pl.setPaths(s)
	}
	p.router.update(pc)
	if p.disk != nil {
		p.disk.putPaths(pc)
	}
	p.readyOnce.Do(func() { close(p.ready) })
	return nil
}

// setRDASize takes a path's new RDA size from its collector.
func (p *Probe) setRDASize(m *owlv1.RDASize) error {
	for _, pl := range p.pipelines() {
		if err := pl.setRDASize(m.GetPath(), int(m.GetBuckets())); err != nil {
			return err
		}
	}
	return nil
}

// setLDSSize takes a path's new LDS size from its collector.
func (p *Probe) setLDSSize(m *owlv1.LDSSize) error {
	for _, pl := range p.pipelines() {
		if err := pl.setLDSShape(m.GetPath(), int(m.GetCols()), int(m.GetRows()), m.GetFromEpoch()); err != nil {
			return err
		}
		pl.setLDSOff(m.GetPath(), m.GetOff(), m.GetFromEpoch())
	}
	return nil
}

// setLDASize takes a path's new LDA rows from its collector.
func (p *Probe) setLDASize(m *owlv1.LDASize) error {
	for _, pl := range p.pipelines() {
		if err := pl.setLDARows(m.GetPath(), int(m.GetRows()), m.GetFromEpoch()); err != nil {
			return err
		}
	}
	return nil
}

// setSampleRate takes a path's new sampling rate from its collector.
func (p *Probe) setSampleRate(m *owlv1.SampleRate) error {
	for _, pl := range p.pipelines() {
		if err := pl.setSampleShift(m.GetPath(), int(m.GetShift()), m.GetFromEpoch()); err != nil {
			return err
		}
	}
	return nil
}

func (p *Probe) fetch(req *owlv1.FetchRequest) *owlv1.FetchReply       { return p.caches.fetch(req) }
func (p *Probe) rebuild(req *owlv1.RebuildRequest) *owlv1.RebuildReply { return p.caches.rebuild(req) }
func (p *Probe) release(path string, epoch int64)                      { p.caches.release(path, epoch) }

// hello introduces the probe; one that reads files says it replays them
// (its epochs may be old). It carries the probe's parameters only when it
// was given its own: the collector then checks them; otherwise the probe
// takes the collector's from the path configuration. It lists the epochs
// not yet released, for a collector that stored their results and then
// stopped before it released them.
func (p *Probe) hello() *owlv1.Hello {
	h := &owlv1.Hello{ProbeId: p.cfg.ID, Version: buildinfo.Version(), Clock: p.clockStatus(), Replay: p.live == nil,
		Unreleased: p.caches.unreleasedRefs(maxHelloUnreleased)}
	if p.cfg.ExplicitParams {
		h.Params = p.cfg.Params.ToProto()
	}
	return h
}

// clockStatus describes the probe's clock now.
func (p *Probe) clockStatus() *owlv1.ClockStatus {
	st := clockToProto(p.clock.Status())
	if p.live != nil {
		st.Detail = strings.TrimPrefix(st.Detail+"; "+p.live.timestampSource()+" timestamps", "; ")
	}
	return st
}

// clockOver describes the probe's clock over [fromNS, toNS).
func (p *Probe) clockOver(fromNS, toNS int64) *owlv1.ClockStatus {
	return clockToProto(p.clock.Over(fromNS, toNS))
}

// clockToProto is the wire form of a clock status.
func clockToProto(s ptp.Status) *owlv1.ClockStatus {
	states := map[ptp.State]owlv1.ClockState{
		ptp.StateSynchronized:   owlv1.ClockState_CLOCK_STATE_SYNCHRONIZED,
		ptp.StateHoldover:       owlv1.ClockState_CLOCK_STATE_HOLDOVER,
		ptp.StateAcquiring:      owlv1.ClockState_CLOCK_STATE_ACQUIRING,
		ptp.StateUnsynchronized: owlv1.ClockState_CLOCK_STATE_UNSYNCHRONIZED,
	}
	return &owlv1.ClockStatus{
		Source:         s.Source,
		Synchronized:   s.State.Synchronized(),
		OffsetNs:       s.OffsetNS,
		UncertaintyNs:  s.UncertaintyNS,
		State:          states[s.State],
		DelayNs:        s.DelayNS,
		Reference:      s.Reference,
		Corrected:      s.Corrected,
		Detail:         s.Detail,
		MeasuredUnixNs: s.AtNS,
	}
}

// errDone ends Run once a replay is over and acknowledged.
var errDone = errors.New("replay done")

// Run captures and reports until ctx ends, the collector rejects the probe
// (a *RejectedError), the collector's parameters change under a probe that
// took them (ErrParamsChanged), or (with ExitWhenDone) the sources are read
// and every report is acknowledged. Shutdown stops capture, waits up to
// DrainTimeout for acknowledgements (not after a rejection or a change of
// parameters: they would not be taken), then closes the connection.
func (p *Probe) Run(ctx context.Context) error {
	if p.disk != nil {
		defer p.disk.close()
	}
	// The client outlives capture so that it can drain the spool.
	cctx, stopClient := context.WithCancel(context.Background())
	defer stopClient()
	var clientErr error
	clientStopped := make(chan struct{})
	go func() {
		defer close(clientStopped)
		clientErr = p.router.run(cctx)
	}()

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		select {
		case <-clientStopped:
			return clientErr // the collector rejected the probe, or changed the parameters
		case <-gctx.Done():
			return nil
		}
	})
	if p.cfg.MetricsListen != "" {
		if err := p.serveMetrics(gctx, g); err != nil {
			return err
		}
	}
	if p.source != nil {
		g.Go(func() error { return p.source.Run(gctx) })
	}
	g.Go(func() error { return p.capture(gctx) })
	err := g.Wait()
	if errors.Is(err, errDone) {
		err = nil
	}
	if !fatal(err) {
		p.drain(p.cfg.DrainTimeout)
	}
	stopClient()
	<-clientStopped
	return err
}

// capture waits for the first path configuration, reads every source in
// turn, and closes the last epochs at the end of the files.
func (p *Probe) capture(ctx context.Context) error {
	p.log.Info("waiting for path configuration from the collector", "collector", p.cfg.Collector)
	select {
	case <-ctx.Done():
		return nil
	case <-p.ready:
	}
	if p.live != nil {
		return p.runLive(ctx)
	}
	for _, s := range p.cfg.Sources {
		if err := p.readFile(ctx, s); err != nil {
			if ctx.Err() != nil {
				p.log.Info("capture stopped", "open_epochs_discarded", p.pipes[0].window.Open())
				return nil
			}
			return err
		}
	}
	// The last epochs close as they are, not marked partial: a file that
	// ends inside an epoch does not say whether traffic would have gone on.
	p.pipes[0].flush()
	p.spool.finish()
	p.log.Info("sources done", "frames", p.stats.frames.Load(), "packets", p.stats.packets.Load(),
		"late", p.stats.late.Load(), "outside_paths", p.stats.outside.Load())
	if !p.cfg.ExitWhenDone {
		<-ctx.Done()
		return nil
	}
	if err := p.waitAcked(ctx); err != nil {
		return nil
	}
	// The collectors hear that the files are done before the probe can
	// exit (its last epochs released): the other probes' lone sides of
	// its paths stop waiting for it.
	if err := p.waitDoneSent(ctx, 5*time.Second); err != nil {
		p.log.Warn("could not tell every collector that the capture files are done")
	}
	p.log.Info("every report acknowledged; waiting for the collector to release the epochs", "unreleased", p.caches.unreleased())
	if err := p.waitReleased(ctx, p.cfg.ReleaseTimeout); err != nil {
		p.log.Warn("exiting before the collector released every epoch", "unreleased", p.caches.unreleased())
	}
	return errDone
}

// waitDoneSent waits up to d for SourcesDone to be sent to every
// collector that takes it.
func (p *Probe) waitDoneSent(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !p.router.doneSent() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// waitReleased waits up to d for the collector to release every reported
// epoch: it may still ask for timestamps or rebuilt RDAs of them.
func (p *Probe) waitReleased(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for p.caches.unreleased() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

func (p *Probe) readFile(ctx context.Context, sc SourceConfig) error {
	src, err := capture.OpenFile(sc.File)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := p.pipes[0].setLink(src.LinkType()); err != nil {
		return fmt.Errorf("%s: %w", sc.File, err)
	}
	var pacer *capture.Pacer // nil: as fast as the file reads
	if sc.ReplaySpeed > 0 {
		pacer = capture.NewPacer(sc.ReplaySpeed)
	}
	p.log.Info("reading capture", "file", sc.File, "link", src.LinkType(), "replay_speed", sc.ReplaySpeed)
	pl := p.pipes[0]
	ep := pl.window.Config()
	next := int64(math.MinInt64) // start of the epoch after the last frame's
	for n := uint(0); ; n++ {
		f, err := src.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if pacer != nil {
			if err := pacer.Wait(ctx, f.TimeNS); err != nil {
				return err
			}
		} else if n%ctxCheckEvery == 0 {
			// Unpaced, the end of ctx is looked at every so many
			// frames: at each, with the pacer's call, it cost a
			// quarter of reading the frame.
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if f.TimeNS >= next {
			// A new epoch: wait while its cache, and those of the
			// epochs still open, would evict one not yet released.
			e, _ := ep.Of(f.TimeNS)
			next = ep.StartNS(e + 1)
			t0 := time.Now()
			if err := p.caches.waitRoom(ctx, pl.window.Open()+1); err != nil {
				return err
			}
			if d := time.Since(t0); d > 10*time.Second {
				p.log.Info("the file waited for the collector to release epochs (the repair caches were full)", "file", sc.File, "waited", d.Round(time.Millisecond))
			}
		}
		pl.frame(f.Data, f.TimeNS)
	}
}

// ctxCheckEvery is how many frames an unpaced file reader reads between
// two looks at whether its context ended (about a millisecond's worth).
const ctxCheckEvery = 4096

// waitAcked returns when the spool is empty or ctx ends.
func (p *Probe) waitAcked(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for p.spool.len() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// drain gives the client up to d to deliver what is spooled.
func (p *Probe) drain(d time.Duration) {
	if p.spool.len() == 0 || d <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := p.waitAcked(ctx); err != nil {
		p.log.Warn("shutting down with unacknowledged reports", "unacked", p.spool.len())
	}
}

func (p *Probe) serveMetrics(ctx context.Context, g *errgroup.Group) error {
	ln, err := net.Listen("tcp", p.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !p.router.connected() {
			http.Error(w, "not connected to the collector", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	g.Go(func() error {
		if err := security.ServeHTTP(ln, srv, p.cfg.WebConfigFile, p.log); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	p.log.Info("serving metrics", "addr", ln.Addr().String())
	return nil
}

// metrics registers the probe's counters.
func (p *Probe) metrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	// The process's memory, CPU and garbage collection (go_*, process_*).
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	counter("owl_probe_frames_total", "Frames read from the sources.", func() float64 { return float64(p.stats.frames.Load()) })
	counter("owl_probe_packets_total", "IP packets decoded.", func() float64 { return float64(p.stats.packets.Load()) })
	counter("owl_probe_late_packets_total", "Packets whose epoch had closed when they came.", func() float64 { return float64(p.stats.late.Load()) })
	counter("owl_probe_outside_paths_packets_total", "Decoded packets that matched no path.", func() float64 { return float64(p.stats.outside.Load()) })
	counter("owl_probe_spool_dropped_reports_total", "Epoch reports and COLATE vectors dropped because the spool was full.", func() float64 { return float64(p.spool.droppedTotal()) })
	counter("owl_probe_not_taken_messages_total", "Spooled messages dropped because the collector they go to is older than their kind (RTT or reordering reports) and does not take them.", func() float64 { return float64(p.spool.notTakenTotal()) })
	counter("owl_probe_colate_vectors_total", "COLATE vectors recorded (one per epoch with -colate).", func() float64 { return float64(p.stats.colateVectors.Load()) })
	counter("owl_probe_colate_vector_bytes_total", "Bytes of the COLATE vectors sent.", func() float64 { return float64(p.stats.colateBytes.Load()) })
	for _, r := range capture.Reasons {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "owl_probe_decode_failures_total", Help: "Frames that yielded no packet, by reason.",
			ConstLabels: prometheus.Labels{"reason": r.String()},
		}, func() float64 { return float64(p.stats.decodeFailures[r].Load()) }))
	}
	for k, what := range dataDropNames {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "owl_probe_data_dir_dropped_total", Help: "Data directory losses: unreadable spool and cache files dropped at start, spooled messages not written.",
			ConstLabels: prometheus.Labels{"what": what},
		}, func() float64 {
			if p.disk == nil {
				return 0
			}
			return float64(p.disk.droppedCount(dataDrop(k)))
		}))
	}
	if p.live != nil {
		counter("owl_probe_ring_packets_total", "Packets the kernel offered the capture sockets.", func() float64 { n, _ := p.live.totals(); return float64(n) })
		counter("owl_probe_ring_drops_total", "Packets the kernel dropped because a capture ring was full.", func() float64 { _, d := p.live.totals(); return float64(d) })
	}
	gauge := func(name, help string, f func(ptp.Status) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(p.clock.Status()) }))
	}
	gauge("owl_probe_clock_offset_seconds", "Last measured offset of the probe's clock from its reference (local − reference).",
		func(s ptp.Status) float64 { return float64(s.OffsetNS) / 1e9 })
	gauge("owl_probe_clock_delay_seconds", "Path delay to the grandmaster (ptp) or PHC read time (phc).",
		func(s ptp.Status) float64 { return float64(s.DelayNS) / 1e9 })
	gauge("owl_probe_clock_uncertainty_seconds", "Bound on the error of the probe's timestamps.",
		func(s ptp.Status) float64 { return float64(s.UncertaintyNS) / 1e9 })
	gauge("owl_probe_clock_synchronized", "1 when the probe's clock is synchronized or in holdover.",
		func(s ptp.Status) float64 {
			if s.State.Synchronized() {
				return 1
			}
			return 0
		})
	gauge("owl_probe_clock_state", "State of the probe's clock: 0 synchronized, 1 holdover, 2 acquiring, 3 unsynchronized, 4 unknown.",
		func(s ptp.Status) float64 { return float64(s.State) })
	counter("owl_probe_cache_evicted_unreleased_total", "Repair caches evicted before the collector released their epoch (live capture cannot wait).",
		func() float64 { n, _, _ := p.caches.lostCounts(); return float64(n) })
	counter("owl_probe_cache_evicted_needed_total", "Repairs that asked for a cache evicted before the collector released its epoch.",
		func() float64 { _, n, _ := p.caches.lostCounts(); return float64(n) })
	counter("owl_probe_file_wait_seconds_total", "Time capture files waited for the collector to release epochs (the caches were full).",
		func() float64 { _, _, s := p.caches.lostCounts(); return s })
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "owl_probe_cache_bytes", Help: "Bytes of (packet ID, timestamp) caches kept for RDA repair."},
		func() float64 { return float64(p.caches.size()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "owl_probe_spool_reports", Help: "Epoch reports and COLATE vectors waiting for acknowledgement."},
		func() float64 { return float64(p.spool.len()) }))
	counter("owl_probe_collector_pauses_total", "Times a collector asked the probe to hold its reports for a while (it was behind, and the probe's reports waited for their other side).",
		func() float64 { _, n := p.router.sessionsAndPauses(); return float64(n) })
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "owl_probe_collector_connected", Help: "1 when a stream to the collector is up."},
		func() float64 {
			if p.router.connected() {
				return 1
			}
			return 0
		}))
	return reg
}
