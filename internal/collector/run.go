package collector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // probes gzip their streams
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/codec"
	"github.com/owl-latency/owl/internal/security"
	"github.com/owl-latency/owl/internal/web"
)

// Addrs are the addresses the collector listens on.
type Addrs struct {
	GRPC   string `json:"grpc"`
	HTTP   string `json:"http,omitempty"`
	Gossip string `json:"gossip,omitempty"` // in a cluster
}

// listeners are the collector's bound sockets.
type listeners struct {
	grpc, http net.Listener // http is nil without an HTTP address
	addrs      Addrs
}

func (l listeners) close() {
	l.grpc.Close()
	if l.http != nil {
		l.http.Close()
	}
}

// listen binds the gRPC and HTTP addresses.
func (c *Collector) listen() (listeners, error) {
	var l listeners
	var err error
	if l.grpc, err = net.Listen("tcp", c.cfg.GRPCListen); err != nil {
		return l, fmt.Errorf("gRPC listener: %w", err)
	}
	l.addrs.GRPC = l.grpc.Addr().String()
	if c.cfg.HTTPListen != "" {
		if l.http, err = net.Listen("tcp", c.cfg.HTTPListen); err != nil {
			l.grpc.Close()
			return l, fmt.Errorf("HTTP listener: %w", err)
		}
		l.addrs.HTTP = l.http.Addr().String()
	}
	return l, nil
}

// Run serves gRPC and HTTP until ctx ends, then shuts down in order: leave
// the cluster, stop taking new streams, let open calls finish (bounded),
// stop HTTP, close the store.
func (c *Collector) Run(ctx context.Context) error {
	defer c.Close()
	l, err := c.listen()
	if err != nil {
		return err
	}
	if c.cfg.Cluster.Enabled() {
		if err := c.startCluster(ctx, l.addrs.GRPC); err != nil {
			l.close()
			return err
		}
		l.addrs.Gossip = c.cl.Gossip()
		defer c.peers.close()
	} else {
		c.promote() // copies kept while this collector was in a cluster
	}
	gs := c.grpcServer()
	hs := &http.Server{Handler: c.httpHandler(), ReadHeaderTimeout: 5 * time.Second}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := gs.Serve(l.grpc); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("gRPC server: %w", err)
		}
		return nil
	})
	if l.http != nil {
		g.Go(func() error {
			if err := security.ServeHTTP(l.http, hs, c.cfg.WebConfigFile, c.log); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("HTTP server: %w", err)
			}
			return nil
		})
	}
	for _, ps := range c.paths {
		g.Go(func() error {
			c.worker.work(gctx, ps)
			return nil
		})
	}
	g.Go(func() error {
		c.sweepLoop(gctx)
		return nil
	})
	g.Go(func() error {
		c.backlogLoop(gctx)
		return nil
	})
	if c.cl != nil {
		g.Go(func() error {
			c.replicateLoop(gctx)
			return nil
		})
		g.Go(func() error {
			c.catchUpLoop(gctx)
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		c.shutdown(gs, hs)
		return nil
	})
	if c.cfg.Insecure {
		c.log.Warn("INSECURE: " + insecureWarning)
	} else if l.http != nil && c.cfg.WebConfigFile == "" {
		c.log.Warn("the HTTP listener is plain HTTP with no authentication: set web_config_file for TLS and basic auth", "http", l.addrs.HTTP, "serves", c.httpServes())
	}
	c.log.Info("collector listening", "tls", !c.cfg.Insecure, "grpc", l.addrs.GRPC, "http", l.addrs.HTTP, "gossip", l.addrs.Gossip, "paths", len(c.pathList), "data_dir", c.cfg.DataDir)
	c.writeReadyFile(l.addrs)
	return g.Wait()
}

// grpcServer is the gRPC server with every service and reflection.
func (c *Collector) grpcServer() *grpc.Server {
	gs := grpc.NewServer(c.serverOptions()...)
	owlv1.RegisterProbeServiceServer(gs, probeService{c: c})
	owlv1.RegisterQueryServiceServer(gs, queryService{c: c})
	if c.cfg.Cluster.Enabled() {
		// Alone, no other collector may take or replace its data.
		owlv1.RegisterClusterServiceServer(gs, clusterService{c: c})
	}
	reflection.Register(gs)
	return gs
}

// serverOptions bound messages and keepalives, and make a call that
// panics (or faults on a damaged store) fail alone, with its error logged.
func (c *Collector) serverOptions() []grpc.ServerOption {
	onPanic := recovery.WithRecoveryHandler(func(p any) error {
		c.log.Error("a call failed with a panic; the collector goes on", "panic", p, "stack", string(debug.Stack()))
		return status.Errorf(codes.Internal, "the collector failed on this call: %v", p)
	})
	return append(c.gate.serverOptions(),
		grpc.MaxRecvMsgSize(c.cfg.MaxMessageBytes),
		grpc.ForceServerCodecV2(codec.New()), experimental.BufferPool(codec.Buffers),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(auth.UnaryServerInterceptor(c.gate.authorize), recovery.UnaryServerInterceptor(onPanic), faultsAsPanicsUnary),
		grpc.ChainStreamInterceptor(auth.StreamServerInterceptor(c.gate.authorize), recovery.StreamServerInterceptor(onPanic), faultsAsPanicsStream),
	)
}

// faultsAsPanicsUnary makes a memory fault in a call (a read of a damaged
// store's mapped file) a panic, which the recovery interceptor turns into
// that call's error instead of the end of the process.
func faultsAsPanicsUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return h(ctx, req)
}

// faultsAsPanicsStream is faultsAsPanicsUnary for streams.
func faultsAsPanicsStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return h(srv, ss)
}

// httpHandler serves /metrics and /healthz, with WebPage the web page and
// its JSON endpoint (from this collector's own query service, so they
// answer what gRPC does), and with Pprof the profiles.
func (c *Collector) httpHandler() http.Handler {
	mux := http.NewServeMux()
	if c.cfg.WebPage {
		page := web.Handler(queryService{c: c}, c.log)
		mux.Handle("/", page)
		mux.Handle("/api/", page)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(c.m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := c.store.Ping(); err != nil {
			http.Error(w, "store: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if c.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	}
	return mux
}

// httpServes names what the HTTP listener serves, for the warning about
// serving it without authentication.
func (c *Collector) httpServes() string {
	s := "/metrics, /healthz"
	if c.cfg.WebPage {
		s += ", the web page and every query result (web_page: false turns them off)"
	}
	if c.cfg.Pprof {
		s += ", profiles"
	}
	return s
}

// sweepLoop sweeps the pairing tables and prunes per-flow data and old
// copies of lone sides until ctx ends.
func (c *Collector) sweepLoop(ctx context.Context) {
	t := time.NewTicker(min(time.Second, c.cfg.PairTimeout/4))
	defer t.Stop()
	lastPrune := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.sweep()
			if time.Since(lastPrune) > time.Minute {
				c.worker.pruneFlows()
				c.pruneReplicaPending()
				lastPrune = time.Now()
			}
		}
	}
}

// shutdown leaves the cluster first, so that the others take over the
// paths, then stops gRPC (gracefully, bounded) and HTTP.
func (c *Collector) shutdown(gs *grpc.Server, hs *http.Server) {
	c.log.Info("shutting down")
	if c.cl != nil {
		if err := c.cl.Leave(2 * time.Second); err != nil {
			c.log.Warn("leaving the cluster", "err", err)
		}
		c.pathsGen.Add(1)
		c.resendPaths()
	}
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		gs.Stop()
		<-done
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
}

// writeReadyFile writes the bound addresses where the configuration asks
// (atomically: a reader sees the whole file or none).
func (c *Collector) writeReadyFile(addrs Addrs) {
	if c.cfg.ReadyFile == "" {
		return
	}
	b, _ := json.Marshal(addrs)
	tmp := c.cfg.ReadyFile + ".tmp"
	err := os.WriteFile(tmp, b, 0o644)
	if err == nil {
		err = os.Rename(tmp, c.cfg.ReadyFile)
	}
	if err != nil {
		c.log.Error("writing ready file", "err", err)
	}
}
