// Command owl-load measures how much a collector, or a cluster of them,
// sustains: it emulates probes that report made-up epochs of many paths
// over the real probe protocol (gRPC, real synopses, answers to repair
// requests), watches the results as they are computed, checks them
// against the generated truth and prints throughput, latency and cost.
//
//	owl-load -spawn 1 -paths 200 -epochs 20 -rate 0     # starts a collector itself
//	owl-load -spawn 3 -paths 1000                        # a cluster of three
//	owl-load -probes 4 -paths 1000 -write-config c.yaml  # then: collector -config c.yaml
//	owl-load -collector 10.0.0.11:7700 -probes 4 -paths 1000
//
// Path i is named load-i, from probe load-p(2i mod N) to load-p(2i+1 mod
// N). Epochs start at the current epoch of the default grid.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/probe"
)

// config is what the flags say.
type config struct {
	collector    string
	spawn        int
	collectorBin string
	writeConfig  string
	keep         bool
	kill         string
	killSignal   string
	restartAfter int
	restartEmpty bool
	gzip         bool
	probes       int
	paths        int
	traffic      probe.TrafficConfig
	epochs       int
	rate         float64
	window       int
	wait         time.Duration
	out          string
	logLevel     string
}

// defaultConfig is two probes, 100 paths, 30 epochs in real time.
func defaultConfig() config {
	return config{probes: 2, paths: 100, traffic: probe.DefaultTrafficConfig(), epochs: 30, rate: 1, window: 8,
		wait: 60 * time.Second, out: "text", logLevel: "warn", killSignal: "KILL"}
}

// bind binds the flags to c.
func bind(fs *flag.FlagSet, c *config) {
	fs.StringVar(&c.collector, "collector", c.collector, "gRPC address (host:port) of a running collector, any member of a cluster; its paths must be the ones owl-load generates (see -write-config)")
	fs.IntVar(&c.spawn, "spawn", c.spawn, "instead of -collector: start this many collectors on 127.0.0.1 (more than one: a cluster), configured with the generated paths, and stop them at the end")
	fs.StringVar(&c.collectorBin, "collector-bin", c.collectorBin, "collector binary for -spawn (default: the collector next to owl-load, else on PATH)")
	fs.StringVar(&c.writeConfig, "write-config", c.writeConfig, "write a collector configuration (YAML) with the generated paths to this file and exit")
	fs.BoolVar(&c.keep, "keep", c.keep, "with -spawn: keep the collectors' data directories and logs (their directory is printed)")
	fs.StringVar(&c.kill, "kill", c.kill, "with -spawn 2 or more: kill member NAME (c1, c2, …) with SIGKILL once K epochs are sent (NAME@K, as c1@20); the others take its paths over, and the summary tells how the results after it fared")
	fs.StringVar(&c.killSignal, "kill-signal", c.killSignal, "with -kill: KILL (a crash: the member neither leaves the cluster nor closes its store) or TERM (an operator's stop: it leaves, then stops; SIGKILL after 20 s)")
	fs.IntVar(&c.restartAfter, "restart-after", c.restartAfter, "with -kill: start the killed member again, on its data directory and gossip address, once this many more epochs are sent (0: never)")
	fs.BoolVar(&c.restartEmpty, "restart-empty", c.restartEmpty, "with -restart-after: the member comes back with an empty data directory, as a new machine in its place would")
	fs.IntVar(&c.probes, "probes", c.probes, "emulated probes (at least 2)")
	fs.BoolVar(&c.gzip, "gzip", c.gzip, "the emulated probes gzip their streams (probe -gzip)")
	fs.IntVar(&c.paths, "paths", c.paths, "paths: path i goes from probe 2i mod N to probe 2i+1 mod N")
	fs.IntVar(&c.traffic.Packets, "packets", c.traffic.Packets, "packets sent per path and epoch")
	fs.Float64Var(&c.traffic.Loss, "loss", c.traffic.Loss, "probability that a packet is lost")
	fs.Float64Var(&c.traffic.Reorder, "reorder", c.traffic.Reorder, "probability that a delivered packet is held up to 1 ms more (reordered within its epoch)")
	fs.IntVar(&c.traffic.Flows, "flows", c.traffic.Flows, "flows per path (Zipf-distributed sizes)")
	fs.IntVar(&c.traffic.Variants, "variants", c.traffic.Variants, "distinct epochs generated; every path and epoch reports one of them")
	fs.Uint64Var(&c.traffic.Seed, "seed", c.traffic.Seed, "seed of the generated traffic")
	fs.IntVar(&c.epochs, "epochs", c.epochs, "epochs to send, from the current one on")
	fs.Float64Var(&c.rate, "rate", c.rate, "epochs sent per second (1: real time at 1 s epochs); 0: as fast as the collectors answer, -window epochs ahead")
	fs.IntVar(&c.window, "window", c.window, "with -rate 0: epochs sent ahead of the oldest epoch some path has no result for")
	fs.DurationVar(&c.wait, "wait", c.wait, "give up when no new result came for this long (after the last epoch was sent, or while the window is full)")
	fs.StringVar(&c.out, "out", c.out, "summary format: text or json")
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "log level of the emulated probes and owl-load: debug, info, warn, error")
}

// validate reports flags out of range or in conflict.
func (c config) validate() error {
	modes := 0
	for _, set := range []bool{c.collector != "", c.spawn > 0, c.writeConfig != ""} {
		if set {
			modes++
		}
	}
	switch {
	case modes != 1:
		return errors.New("give one of -collector, -spawn or -write-config")
	case c.spawn < 0 || c.spawn > 64:
		return fmt.Errorf("-spawn %d out of range [1, 64]", c.spawn)
	case c.probes < 2 || c.probes > 10_000:
		return fmt.Errorf("-probes %d out of range [2, 10000]", c.probes)
	case c.paths < 1 || c.paths > 1_000_000:
		return fmt.Errorf("-paths %d out of range [1, 1000000]", c.paths)
	case c.epochs < 1:
		return fmt.Errorf("-epochs %d: send at least one", c.epochs)
	case c.rate < 0:
		return fmt.Errorf("-rate %v is negative", c.rate)
	case c.window < 1:
		return fmt.Errorf("-window %d: at least 1", c.window)
	case c.wait <= 0:
		return fmt.Errorf("-wait %v must be positive", c.wait)
	case c.out != "text" && c.out != "json":
		return fmt.Errorf("-out %q: want text or json", c.out)
	}
	if err := c.traffic.Validate(); err != nil {
		return fmt.Errorf("traffic: %w", err)
	}
	if c.restartEmpty && c.restartAfter == 0 {
		return errors.New("-restart-empty without -restart-after")
	}
	_, err := parseKill(c.kill, c.killSignal, c.restartAfter, c.spawn, c.epochs)
	return err
}

func main() {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("owl-load", flag.ContinueOnError)
	bind(fs, &cfg)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "owl-load: unexpected arguments %v\n", fs.Args())
		os.Exit(2)
	}
	log, err := cli.Logger(os.Stderr, cfg.logLevel, "text")
	if err == nil {
		err = cfg.validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "owl-load:", err)
		os.Exit(2)
	}
	if cfg.writeConfig != "" {
		if err := writeConfig(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "owl-load:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, cfg, log)
	if sum != nil {
		if perr := sum.print(os.Stdout, cfg.out); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			err = errors.New("interrupted")
		}
		fmt.Fprintln(os.Stderr, "owl-load:", err)
		os.Exit(1)
	}
}
