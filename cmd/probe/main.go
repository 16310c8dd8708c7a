// Command probe runs an observation point: it reads packets, folds them into
// synopses per epoch for the paths the collector assigns, and streams the
// closed epochs to the collector. It takes the deployment's parameters from
// the collector unless given its own.
//
//	probe -id op-a -collector 127.0.0.1:7700 -file up.pcap
//	probe -config probe.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/probe"
)

func bind(fs *flag.FlagSet, c *probe.Config) {
	fs.StringVar(&c.ID, "id", c.ID, "observation point id (as named in the collector's paths)")
	fs.StringVar(&c.Collector, "collector", c.Collector, "collector gRPC address host:port")
	fs.StringVar(&c.TLS.Cert, "tls-cert", c.TLS.Cert, "this probe's TLS certificate (PEM; URI SAN owl://probe/ID names it, so -id may be left out), re-read when it changes")
	fs.StringVar(&c.TLS.Key, "tls-key", c.TLS.Key, "the certificate's private key (PEM), in the same directory")
	fs.StringVar(&c.TLS.CA, "tls-ca", c.TLS.CA, "CA certificates (PEM) the collector's certificate must chain to")
	fs.StringVar(&c.TLS.ServerName, "tls-server-name", c.TLS.ServerName, "name expected in the collector's certificate (default: the host of -collector)")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "connect in plaintext, to a collector run with -insecure")
	str := func(s string) (string, error) { return s, nil }
	fs.Var(option(c, str, func(l *capture.LiveConfig) *string { return &l.Interface }), "interface", "capture this interface live (AF_PACKET); replaces -file sources")
	fs.Var(option(c, strconv.Atoi, func(l *capture.LiveConfig) *int { return &l.Workers }), "workers", "live capture: PACKET_FANOUT workers, each with its own synopses")
	fs.Var(option(c, strconv.Atoi, func(l *capture.LiveConfig) *int { return &l.NumBlocks }), "ring-blocks", "live capture: ring blocks of 1 MiB per worker")
	fs.Var(option(c, str, func(l *capture.LiveConfig) *string { return &l.BPF }), "bpf", "live capture: BPF filter in `tcpdump -ddd` form")
	fs.Var(&liveOption[bool]{c: c, parse: strconv.ParseBool, get: func(l *capture.LiveConfig) bool { return !l.IgnoreOutgoing },
		set: func(l *capture.LiveConfig, v bool) { l.IgnoreOutgoing = !v }}, "capture-outgoing", "live capture: also count packets this host sends on the interface")
	fs.Var(option(c, str, func(l *capture.LiveConfig) *string { return &l.Dump }), "dump", "live capture: also write every captured frame, with the probe's timestamp, to this pcap file")
	fs.Var(option(c, strconv.ParseBool, func(l *capture.LiveConfig) *bool { return &l.HardwareTimestamps }), "hw-timestamps", "live capture: ask the NIC for hardware receive timestamps")
	files := &filesFlag{c: c}
	fs.Var(files, "file", "capture file to replay (repeat or comma-separate for several, read in turn)")
	fs.Var(&speedFlag{files: files}, "replay-speed", "replay capture files at this multiple of real time (0: as fast as possible)")
	fs.BoolVar(&c.RTT.Enabled, "rtt", c.RTT.Enabled, "measure round-trip times of request/response pairs (TCP data and ACK, SYN and SYN/ACK, DNS) at this point")
	fs.BoolVar(&c.Reorder.Enabled, "reorder", c.Reorder.Enabled, "measure TCP reordering by prefix (of the sources, /24 and /48 by default) at this point")
	fs.IntVar(&c.Reorder.MemoryBytes, "reorder-memory", c.Reorder.MemoryBytes, "bytes of each capture worker's reordering tracker (flow windows, long flows and prefixes)")
	fs.BoolVar(&c.ExactLists, "exact-lists", c.ExactLists, "send an epoch's exact list of packets in place of its synopses where the list is smaller")
	fs.BoolVar(&c.Gzip, "gzip", c.Gzip, "gzip the stream to the collectors (2-10% fewer bytes, for a quarter more collector CPU)")
	fs.IntVar(&c.TopFlows, "top-flows", c.TopFlows, "heaviest flows per path and epoch named in reports (estimated per flow by the collector)")
	fs.StringVar(&cpuProfile, "cpuprofile", cpuProfile, "write a CPU profile of the whole run to this file (go tool pprof reads it)")
	fs.IntVar(&c.SpoolMaxEpochs, "spool-max-epochs", c.SpoolMaxEpochs, "epochs whose reports are kept until the collector acknowledges them (the oldest goes first, logged)")
	fs.Int64Var(&c.SpoolMaxBytes, "spool-max-bytes", c.SpoolMaxBytes, "bytes of unacknowledged reports kept (the oldest epoch goes first, logged)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "keep the spool and repair caches in this directory, so that a restarted probe resends what was not acknowledged (empty: memory only)")
	fs.BoolVar(&c.ExitWhenDone, "exit-when-done", c.ExitWhenDone, "exit once the files are read and every report is acknowledged")
	fs.DurationVar(&c.ReconnectMax, "reconnect-max", c.ReconnectMax, "longest wait between attempts to reach the collector")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long shutdown waits for acknowledgements")
	fs.DurationVar(&c.ReleaseTimeout, "release-timeout", c.ReleaseTimeout, "how long a finished replay waits for the collector to release its epochs (it may still ask for repairs)")
	fs.StringVar(&c.WebConfigFile, "web-config-file", c.WebConfigFile, "TLS and basic auth for -metrics-listen: a Prometheus exporter-toolkit web configuration file")
	fs.StringVar(&c.MetricsListen, "metrics-listen", c.MetricsListen, "serve /metrics and /healthz on this address (empty: off)")
	fs.StringVar(&c.Clock.Source, "clock", c.Clock.Source, "live capture: clock source: system (kernel-disciplined, e.g. by ptp4l+phc2sys or chrony), phc (a NIC's PTP hardware clock), ptp (built-in SPTP client)")
	fs.StringVar(&c.Clock.Server, "clock-server", c.Clock.Server, "clock ptp: grandmaster address (ptp4u or another SPTP server), host or host:port")
	fs.StringVar(&c.Clock.Interface, "clock-interface", c.Clock.Interface, "clock ptp: interface towards the grandmaster (default: by route); clock phc: the NIC whose PHC to read")
	fs.StringVar(&c.Clock.Device, "clock-device", c.Clock.Device, "clock phc: PHC device such as /dev/ptp0 (default: the clock interface's)")
	fs.StringVar(&c.Clock.Timestamping, "clock-timestamping", c.Clock.Timestamping, "clock ptp: sw or hw timestamps on PTP packets")
	fs.DurationVar(&c.Clock.Interval, "clock-interval", c.Clock.Interval, "how often the clock is measured")
	fs.DurationVar(&c.Clock.Holdover, "clock-holdover", c.Clock.Holdover, "how long the clock counts as synchronized after its last measurement (and how long it may acquire before it is unsynchronized)")
	fs.BoolVar(&c.Clock.Correct, "clock-correct", c.Clock.Correct, "subtract the measured clock offset from timestamps (false: measure and report only)")
	fs.DurationVar(&c.Clock.Fault, "clock-fault", c.Clock.Fault, "testing: add this artificial offset to every local timestamp, PTP exchanges included")
	bindParams(fs, &c.Params)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
}

// usage heads the probe's help.
const usage = `Usage of probe:
  probe -collector HOST:PORT [-id ID] [-tls-cert CERT -tls-key KEY -tls-ca CA | -insecure] (-file CAPTURE | -interface IF)
  probe -config probe.yaml

The deployment's parameters (the flags marked [param]) come from the
collector with the path configuration. Give them only to pin them: a probe
given any uses its own (the defaults below for those not given), and the
collector refuses it when they differ from its own. -grace, -rda-buckets,
-flow-tag and -vxlan-port are each probe's own setting.

`

// bindParams binds the deployment's parameters, marking the flags of the
// shared ones: optional, the collector's are taken otherwise.
func bindParams(fs *flag.FlagSet, p *params.Params) {
	all := flag.NewFlagSet("", flag.ContinueOnError)
	p.BindFlags(all)
	all.VisitAll(func(f *flag.Flag) {
		u := f.Usage
		if params.SetsShared([]string{f.Name}) {
			u = "[param] " + u
		}
		fs.Var(f.Value, f.Name, u)
	})
}

// filesFlag sets the probe's sources from -file flags.
type filesFlag struct {
	c     *probe.Config
	set   bool // a -file flag was seen: later ones add to it
	speed float64
}

func (f *filesFlag) String() string {
	if f == nil || f.c == nil {
		return ""
	}
	var names []string
	for _, s := range f.c.Sources {
		names = append(names, s.File)
	}
	return strings.Join(names, ",")
}

func (f *filesFlag) Set(s string) error {
	if !f.set {
		f.c.Sources, f.set = nil, true
	}
	for _, name := range strings.Split(s, ",") {
		if name == "" {
			return fmt.Errorf("empty file name in %q", s)
		}
		f.c.Sources = append(f.c.Sources, probe.SourceConfig{File: name, ReplaySpeed: f.speed})
	}
	return nil
}

// speedFlag sets the replay speed of every source, given before or after -file.
type speedFlag struct{ files *filesFlag }

func (v *speedFlag) String() string {
	if v == nil || v.files == nil {
		return "0"
	}
	return strconv.FormatFloat(v.files.speed, 'g', -1, 64)
}

func (v *speedFlag) Set(s string) error {
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || x < 0 {
		return fmt.Errorf("want a non-negative number, got %q", s)
	}
	v.files.speed = x
	for i := range v.files.c.Sources {
		v.files.c.Sources[i].ReplaySpeed = x
	}
	return nil
}

// live returns the probe's live source configuration, making one.
func live(c *probe.Config) *capture.LiveConfig {
	if len(c.Sources) != 1 || c.Sources[0].Live == nil {
		lc := capture.DefaultLiveConfig()
		c.Sources = []probe.SourceConfig{{Live: &lc}}
	}
	return c.Sources[0].Live
}

func liveOf(c *probe.Config) *capture.LiveConfig {
	if c == nil || len(c.Sources) != 1 {
		return nil
	}
	return c.Sources[0].Live
}

// liveOption is a flag that sets one option of the live capture source,
// making that source (in place of -file sources) when first set.
type liveOption[T any] struct {
	c     *probe.Config
	parse func(string) (T, error)
	get   func(*capture.LiveConfig) T
	set   func(*capture.LiveConfig, T)
}

// option is a liveOption for the field that at returns.
func option[T any](c *probe.Config, parse func(string) (T, error), at func(*capture.LiveConfig) *T) *liveOption[T] {
	return &liveOption[T]{c: c, parse: parse, get: func(l *capture.LiveConfig) T { return *at(l) }, set: func(l *capture.LiveConfig, v T) { *at(l) = v }}
}

func (f *liveOption[T]) String() string {
	if l := liveOf(f.c); l != nil && f.get != nil {
		return fmt.Sprint(f.get(l))
	}
	return ""
}

func (f *liveOption[T]) Set(s string) error {
	v, err := f.parse(s)
	if err != nil {
		return err
	}
	f.set(live(f.c), v)
	return nil
}

// IsBoolFlag lets a bool option be given without a value.
func (f *liveOption[T]) IsBoolFlag() bool {
	var zero T
	_, ok := any(zero).(bool)
	return ok
}

// cpuProfile is the file -cpuprofile names.
var cpuProfile string

func main() {
	cfg, log, err := cli.Parse("probe", os.Args[1:], probe.DefaultConfig, bind, probe.LoadFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(2)
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			log.Error("cpu profile", "err", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := probe.New(cfg, log)
	if err != nil {
		log.Error("probe configuration", "err", err)
		os.Exit(2)
	}
	if err := p.Run(ctx); err != nil {
		log.Error("probe failed", "err", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}
