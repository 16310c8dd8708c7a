// Command collector pairs the two sides of each configured path, computes
// one-way latency per epoch, stores the results and serves them over gRPC
// (with server reflection) and Prometheus.
//
//	collector -config collector.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/collector"
)

func bind(fs *flag.FlagSet, c *collector.Config) {
	fs.StringVar(&c.GRPCListen, "grpc-listen", c.GRPCListen, "gRPC listen address (probes and queries)")
	fs.StringVar(&c.HTTPListen, "http-listen", c.HTTPListen, "HTTP listen address for /metrics, /healthz and the web page (empty: off)")
	fs.BoolVar(&c.WebPage, "web-page", c.WebPage, "serve the web page and its JSON query endpoint on the HTTP listener")
	fs.StringVar(&c.WebConfigFile, "web-config-file", c.WebConfigFile, "TLS and basic auth for the HTTP listener: a Prometheus exporter-toolkit web configuration file")
	fs.BoolVar(&c.Pprof, "pprof", c.Pprof, "also serve Go's profiles under /debug/pprof/ on the HTTP listener")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the result database")
	fs.DurationVar(&c.PairTimeout, "pair-timeout", c.PairTimeout, "how long a report waits for the other side of its path")
	fs.DurationVar(&c.PairRetention, "pair-retention", c.PairRetention, "how long a lone report is kept after the timeout")
	fs.StringVar(&c.ReadyFile, "ready-file", c.ReadyFile, "write the bound addresses as JSON to this file once listening")
	fs.Int64Var(&c.Colate.MaxBytes, "colate-max-bytes", c.Colate.MaxBytes, "storage budget of the COLATE vectors of all probes (the oldest go first)")
	fs.DurationVar(&c.Colate.Retention, "colate-retention", c.Colate.Retention, "drop COLATE vectors older than this (0: budget only)")
	fs.StringVar(&c.Cluster.Bind, "cluster-bind", c.Cluster.Bind, "gossip address (host:port) to run as one of a cluster of collectors (empty: alone)")
	fs.StringVar(&c.Cluster.Advertise, "cluster-advertise", c.Cluster.Advertise, "gossip address the other collectors use (default: the bind address)")
	fs.StringVar(&c.Cluster.Name, "cluster-name", c.Cluster.Name, "this collector's unique name in the cluster (default: host name and gossip port)")
	fs.StringVar(&c.Cluster.GRPCAdvertise, "cluster-grpc-advertise", c.Cluster.GRPCAdvertise, "gRPC address probes and the other collectors use (default: -grpc-listen, if it names a host)")
	fs.Func("cluster-join", "gossip address of a cluster member to join (repeat or comma-separate; empty: start a cluster)", func(v string) error {
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				c.Cluster.Join = append(c.Cluster.Join, a)
			}
		}
		return nil
	})
	fs.StringVar(&c.TLS.Cert, "tls-cert", c.TLS.Cert, "this collector's TLS certificate (PEM; URI SAN owl://collector/NAME), re-read when it changes")
	fs.StringVar(&c.TLS.Key, "tls-key", c.TLS.Key, "the certificate's private key (PEM), in the same directory")
	fs.StringVar(&c.TLS.CA, "tls-ca", c.TLS.CA, "CA certificates (PEM) that probes', readers' and other collectors' certificates must chain to")
	fs.StringVar(&c.ReaderTokensFile, "reader-tokens", c.ReaderTokensFile, "file of reader bearer tokens (NAME TOKEN per line) admitted for queries besides certificates")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "serve plaintext gRPC with no authentication (anyone who reaches it can report and read; warned about)")
	fs.StringVar(&c.Cluster.KeyFile, "cluster-key-file", c.Cluster.KeyFile, "gossip encryption keys (base64 of 16, 24 or 32 bytes, one per line, the first encrypts)")
	c.Params.BindFlags(fs)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "certs" {
		os.Exit(certs(os.Args[2:], os.Stdout, os.Stderr))
	}
	cfg, log, err := cli.Parse("collector", os.Args[1:], collector.DefaultConfig, bind, collector.LoadFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "collector:", err)
		os.Exit(2)
	}
	if limit, ok := cfg.MemoryLimit(); ok && os.Getenv("GOMEMLIMIT") == "" {
		// The process's, so set here and not by collector.New: tests run
		// many collectors in one process.
		debug.SetMemoryLimit(limit)
		log.Info("soft memory limit", "bytes", limit)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(cfg.GCTarget())
	}
	if n := minProcs(os.Getenv("GOMAXPROCS"), runtime.GOMAXPROCS(0)); n > runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(n)
		log.Info("GOMAXPROCS raised: with one, the store's syncs idle the core (set GOMAXPROCS to choose)", "gomaxprocs", n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := collector.New(cfg, log)
	if err != nil {
		log.Error("collector configuration", "err", err)
		os.Exit(2)
	}
	if err := c.Run(ctx); err != nil {
		log.Error("collector failed", "err", err)
		os.Exit(1)
	}
}

// minProcs is the GOMAXPROCS the collector runs with, given the
// environment's GOMAXPROCS and the runtime's: at least 2 unless the
// environment sets it. A goroutine in a system call keeps its P until
// the runtime's monitor takes it away, which it checks for less often
// the longer nothing needed taking (up to every 10 ms): with one P the
// core idled through most of each of the store's fdatasync calls (10 ms
// each, 20 a second, on the machine of docs/benchmarks.md), and a
// collector on one core fell behind at 1,200 paths while using three
// quarters of it. With a second P the other goroutines run meanwhile.
func minProcs(env string, procs int) int {
	if env != "" {
		return procs
	}
	return max(procs, 2)
}
