package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/buildinfo"
	"github.com/owl-latency/owl/internal/capture"
)

// Probe is one observation point.
type Probe struct {
	cfg    Config
	log    *slog.Logger
	spool  *spool
	stats  counters
	client *client
	pipes  []*pipeline // one per capture worker
	rep    *reporter
	merge  *merger       // for more than one worker
	ready  chan struct{} // closed when the first path configuration arrived
	reg    *prometheus.Registry
	caches *cacheStore
	live   *liveCapture // nil for file sources
}

// New builds a probe; Run starts it.
func New(cfg Config, log *slog.Logger) (*Probe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Probe{cfg: cfg, log: log, spool: newSpool(cfg.SpoolMaxEpochs), ready: make(chan struct{}),
		caches: newCacheStore(cfg.Cache.Retention, cfg.Cache.MaxBytes)}
	p.rep = &reporter{caches: p.caches, topFlows: cfg.TopFlows, clock: p.clockStatus, emit: p.spool.add}
	workers := 1
	if lc := cfg.Sources[0].Live; lc != nil {
		workers = lc.Workers
		p.live = &liveCapture{cfg: *lc}
		p.rep.dropped = p.live.droppedSince
	}
	sink := p.rep.report
	if workers > 1 {
		p.merge = newMerger(workers, cfg.Params.Epoch, p.rep.report)
	}
	for w := 0; w < workers; w++ {
		if p.merge != nil {
			sink = func(ce closedEpoch) { p.merge.add(w, ce) }
		}
		pl, err := newPipeline(cfg.Params, cfg.Cache.MaxPackets, cfg.TopFlows, sink, &p.stats)
		if err != nil {
			return nil, err
		}
		p.pipes = append(p.pipes, pl)
	}
	conn, err := grpc.NewClient(cfg.Collector,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("collector address %q: %w", cfg.Collector, err)
	}
	var once sync.Once
	p.client = &client{conn: conn, log: log, spool: p.spool, reconnectMax: cfg.ReconnectMax,
		hello: p.hello,
		onPaths: func(pc *owlv1.PathConfig) error {
			s, err := newPathSet(pc)
			if err != nil {
				return err
			}
			for _, pl := range p.pipes {
				pl.setPaths(s)
			}
			once.Do(func() { close(p.ready) })
			return nil
		},
		onSize: func(m *owlv1.RDASize) error {
			for _, pl := range p.pipes {
				if err := pl.setRDASize(m.GetPath(), int(m.GetBuckets())); err != nil {
					return err
				}
			}
			return nil
		},
		fetch:   p.caches.fetch,
		rebuild: p.caches.rebuild,
		release: p.caches.release,
	}
	p.reg = p.metrics()
	return p, nil
}

func (p *Probe) hello() *owlv1.Hello {
	return &owlv1.Hello{ProbeId: p.cfg.ID, Version: buildinfo.Version(), Params: p.cfg.Params.ToProto(), Clock: p.clockStatus()}
}

// clockStatus describes the clock timestamps come from. Replayed files carry
// the clock of the capture that made them.
func (p *Probe) clockStatus() *owlv1.ClockStatus {
	if p.live != nil {
		return &owlv1.ClockStatus{Source: "system, " + p.live.timestampSource() + " timestamps"}
	}
	return &owlv1.ClockStatus{Source: "file"}
}

// errDone ends Run once a replay is over and acknowledged.
var errDone = errors.New("replay done")

// Run captures and reports until ctx ends, the collector rejects the probe,
// or (with ExitWhenDone) the sources are read and every report is
// acknowledged. Shutdown stops capture, waits up to DrainTimeout for
// acknowledgements, then closes the connection.
func (p *Probe) Run(ctx context.Context) error {
	defer p.client.conn.Close()
	// The client outlives capture so that it can drain the spool.
	cctx, stopClient := context.WithCancel(context.Background())
	defer stopClient()
	var clientErr error
	clientStopped := make(chan struct{})
	go func() {
		defer close(clientStopped)
		clientErr = p.client.run(cctx)
	}()

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		select {
		case <-clientStopped:
			return clientErr // the collector rejected the probe
		case <-gctx.Done():
			return nil
		}
	})
	if p.cfg.MetricsListen != "" {
		if err := p.serveMetrics(gctx, g); err != nil {
			return err
		}
	}
	g.Go(func() error { return p.capture(gctx) })
	err := g.Wait()
	if errors.Is(err, errDone) {
		err = nil
	}
	var rej *RejectedError
	if !errors.As(err, &rej) {
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
	p.pipes[0].flush()
	p.log.Info("sources done", "frames", p.stats.frames.Load(), "packets", p.stats.packets.Load(),
		"late", p.stats.late.Load(), "outside_paths", p.stats.outside.Load())
	if !p.cfg.ExitWhenDone {
		<-ctx.Done()
		return nil
	}
	if err := p.waitAcked(ctx); err != nil {
		return nil
	}
	p.log.Info("every report acknowledged; waiting for the collector to release the epochs", "unreleased", p.caches.unreleased())
	if err := p.waitReleased(ctx, p.cfg.ReleaseTimeout); err != nil {
		p.log.Warn("exiting before the collector released every epoch", "unreleased", p.caches.unreleased())
	}
	return errDone
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
	pacer := capture.NewPacer(sc.ReplaySpeed)
	p.log.Info("reading capture", "file", sc.File, "link", src.LinkType(), "replay_speed", sc.ReplaySpeed)
	for {
		f, err := src.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := pacer.Wait(ctx, f.TimeNS); err != nil {
			return err
		}
		p.pipes[0].frame(f.Data, f.TimeNS)
	}
}

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
		if !p.client.connected.Load() {
			http.Error(w, "not connected to the collector", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
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
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	counter("owl_probe_frames_total", "Frames read from the sources.", func() float64 { return float64(p.stats.frames.Load()) })
	counter("owl_probe_packets_total", "IP packets decoded.", func() float64 { return float64(p.stats.packets.Load()) })
	counter("owl_probe_late_packets_total", "Packets whose epoch had closed when they came.", func() float64 { return float64(p.stats.late.Load()) })
	counter("owl_probe_outside_paths_packets_total", "Decoded packets that matched no path.", func() float64 { return float64(p.stats.outside.Load()) })
	counter("owl_probe_spool_dropped_reports_total", "Epoch reports dropped because the spool was full.", func() float64 { return float64(p.spool.droppedTotal()) })
	for _, r := range capture.Reasons {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "owl_probe_decode_failures_total", Help: "Frames that yielded no packet, by reason.",
			ConstLabels: prometheus.Labels{"reason": r.String()},
		}, func() float64 { return float64(p.stats.decodeFailures[r].Load()) }))
	}
	if p.live != nil {
		counter("owl_probe_ring_packets_total", "Packets the kernel offered the capture sockets.", func() float64 { n, _ := p.live.totals(); return float64(n) })
		counter("owl_probe_ring_drops_total", "Packets the kernel dropped because a capture ring was full.", func() float64 { _, d := p.live.totals(); return float64(d) })
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "owl_probe_cache_bytes", Help: "Bytes of (packet ID, timestamp) caches kept for RDA repair."},
		func() float64 { return float64(p.caches.size()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "owl_probe_spool_reports", Help: "Epoch reports waiting for acknowledgement."},
		func() float64 { return float64(p.spool.len()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "owl_probe_collector_connected", Help: "1 when a stream to the collector is up."},
		func() float64 {
			if p.client.connected.Load() {
				return 1
			}
			return 0
		}))
	return reg
}
