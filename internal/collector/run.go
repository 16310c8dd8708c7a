package collector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// Addrs are the addresses the collector listens on.
type Addrs struct {
	GRPC   string `json:"grpc"`
	HTTP   string `json:"http,omitempty"`
	Gossip string `json:"gossip,omitempty"` // in a cluster
}

// Run serves gRPC and HTTP until ctx ends, then shuts down in order: stop
// taking new streams, let open calls finish (bounded), stop HTTP, close the
// store.
func (c *Collector) Run(ctx context.Context) error {
	defer c.Close()
	gl, err := net.Listen("tcp", c.cfg.GRPCListen)
	if err != nil {
		return fmt.Errorf("gRPC listener: %w", err)
	}
	addrs := Addrs{GRPC: gl.Addr().String()}
	var hl net.Listener
	if c.cfg.HTTPListen != "" {
		if hl, err = net.Listen("tcp", c.cfg.HTTPListen); err != nil {
			gl.Close()
			return fmt.Errorf("HTTP listener: %w", err)
		}
		addrs.HTTP = hl.Addr().String()
	}

	if c.cfg.Cluster.Enabled() {
		if err := c.startCluster(ctx, addrs.GRPC); err != nil {
			gl.Close()
			if hl != nil {
				hl.Close()
			}
			return err
		}
		addrs.Gossip = c.cl.Gossip()
		defer c.closePeers()
	}

	gs := grpc.NewServer(
		grpc.MaxRecvMsgSize(c.cfg.MaxMessageBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	owlv1.RegisterProbeServiceServer(gs, probeService{c: c})
	owlv1.RegisterQueryServiceServer(gs, queryService{c: c})
	owlv1.RegisterClusterServiceServer(gs, clusterService{c: c})
	reflection.Register(gs)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(c.m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := c.store.Ping(); err != nil {
			http.Error(w, "store: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := gs.Serve(gl); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("gRPC server: %w", err)
		}
		return nil
	})
	if hl != nil {
		g.Go(func() error {
			if err := hs.Serve(hl); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("HTTP server: %w", err)
			}
			return nil
		})
	}
	for _, ps := range c.paths {
		g.Go(func() error {
			c.work(gctx, ps)
			return nil
		})
	}
	g.Go(func() error {
		t := time.NewTicker(min(time.Second, c.cfg.PairTimeout/4))
		defer t.Stop()
		lastPrune := time.Now()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
				c.sweep()
				if time.Since(lastPrune) > time.Minute {
					c.pruneFlows()
					lastPrune = time.Now()
				}
			}
		}
	})
	g.Go(func() error {
		<-gctx.Done()
		c.log.Info("shutting down")
		if c.cl != nil {
			// Leave first, so that the others take over the paths.
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
		return nil
	})
	c.log.Info("collector listening", "grpc", addrs.GRPC, "http", addrs.HTTP, "gossip", addrs.Gossip, "paths", len(c.pathList), "data_dir", c.cfg.DataDir)
	if c.cfg.ReadyFile != "" {
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
	return g.Wait()
}
