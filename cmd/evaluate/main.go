// Command evaluate runs the two captures that tracegen made through owl's
// decoding, epochs and LDA, and prints each epoch's estimate beside the
// ground truth:
//
//	evaluate -up /tmp/run-up.pcap -down /tmp/run-down.pcap -truth /tmp/run-truth.csv
//
// With -rda it runs the collector's RDA reconciliation policy instead
// (reconcile.Epoch, the probes' caches played from memory). With
// -rda-sweep it reproduces the RDA paper's sweep of the set difference
// instead (RDA against an LDA of the same memory). With -fridge it
// compares RTT fridges with the simple array on the fridge dissertation's
// synthetic traces. With -reorder it measures the per-prefix reordering
// tracker against the exact tracker, on a synthetic trace of many flows
// and on a capture (by default the bundled trace) with per-prefix
// reordering injected.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/evaluate"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// options are the command's flags.
type options struct {
	files    evaluate.FilesConfig
	prefix   string
	banks    string
	stddev   string
	offset   time.Duration
	sweep    bool
	sweepCfg evaluate.SweepConfig
	lds      bool
	ldsCfg   evaluate.LDSRunConfig
	colate   bool
	colCfg   evaluate.ColateConfig
	rda      bool
	rdaCfg   evaluate.RDAConfig
	fridge   bool
	frCfg    evaluate.FridgeConfig
	reorder  bool
	roCfg    evaluate.ReorderConfig
	rocCfg   evaluate.ReorderCaptureConfig
	// roInject replaces rocCfg's injected reordering when given.
	roInject []sim.PrefixReorder
}

func main() {
	o := parseFlags(os.Args[1:])
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(o); err != nil {
		log.Error("evaluate failed", "err", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// errUsage marks an error in the command line.
var errUsage = errors.New("usage")

func parseFlags(args []string) *options {
	fs := flag.NewFlagSet("evaluate", flag.ExitOnError)
	o := &options{files: evaluate.FilesConfig{Identity: capture.DefaultIdentityConfig(), Epoch: epoch.DefaultConfig(),
		LDA: lda.DefaultConfig(), Estimate: lda.DefaultOptions()}, sweepCfg: evaluate.DefaultSweepConfig(),
		ldsCfg: evaluate.LDSRunConfig{Flows: 146_000, Shape: 0.9, LDS: lds.Config{Rows: 4, Cols: 17_500, K: 1, Seed: 1}, Opts: lds.DefaultOptions(), Seed: 1},
		colCfg: evaluate.DefaultColateConfig(), frCfg: evaluate.DefaultFridgeConfig(),
		roCfg: evaluate.DefaultReorderConfig(), rocCfg: evaluate.DefaultReorderCaptureConfig(),
		rdaCfg: evaluate.RDAConfig{RDA: rda.DefaultConfig(), Limits: reconcile.Limits{MinBuckets: 256, MaxBuckets: 1 << 20, MaxRebuilds: 4}}}
	cfg := &o.files
	fs.StringVar(&cfg.Up, "up", "", "upstream capture")
	fs.StringVar(&cfg.Down, "down", "", "downstream capture")
	fs.StringVar(&cfg.Truth, "truth", "", "ground truth CSV from tracegen")
	fs.StringVar(&o.prefix, "prefix", "", "shorthand for -up PREFIX-up.pcap -down PREFIX-down.pcap -truth PREFIX-truth.csv")
	fs.DurationVar(&cfg.Epoch.Length, "epoch", cfg.Epoch.Length, "epoch length")
	fs.DurationVar(&cfg.Epoch.Grace, "grace", cfg.Epoch.Grace, "epoch grace period")
	fs.IntVar(&cfg.LDA.Rows, "lda-rows", cfg.LDA.Rows, "LDA rows per bank")
	fs.StringVar(&o.banks, "lda-banks", "0,4", "LDA bank sampling exponents: bank j samples 2^-e_j − 2^-e_{j+1} of the packets")
	fs.StringVar(&o.stddev, "stddev", "centered", "standard deviation estimator: centered or collapsed (the paper's)")
	fs.DurationVar(&o.offset, "down-clock-offset", 0, "downstream clock offset given to tracegen")
	fs.BoolVar(&o.rda, "rda", false, "instead of LDA: the collector's RDA reconciliation policy (late binding, repairs) on the captures, probes' caches played from memory")
	fs.IntVar(&o.rdaCfg.RDA.Buckets, "rda-buckets", o.rdaCfg.RDA.Buckets, "RDA buckets per bank the probes start with (-rda)")
	fs.IntVar(&o.rdaCfg.Limits.MaxBuckets, "rda-max-buckets", o.rdaCfg.Limits.MaxBuckets, "largest RDA late binding may grow to (-rda)")
	fs.IntVar(&o.rdaCfg.Limits.MaxRebuilds, "rda-max-rebuilds", o.rdaCfg.Limits.MaxRebuilds, "rebuilds per epoch (-rda)")
	fs.BoolVar(&o.sweep, "rda-sweep", false, "instead: run the RDA paper's set-difference sweep (RDA vs LDA of the same memory) and print its table")
	fs.IntVar(&o.sweepCfg.Trials, "trials", o.sweepCfg.Trials, "epochs per set-difference size (-rda-sweep)")
	fs.IntVar(&o.sweepCfg.Packets, "packets", o.sweepCfg.Packets, "common packets per epoch (-rda-sweep)")
	bindLDS(fs, o)
	bindColate(fs, o)
	bindFridge(fs, o)
	bindReorder(fs, o)
	cfg.Identity.BindFlags(fs)
	_ = fs.Parse(args)
	return o
}

func bindLDS(fs *flag.FlagSet, o *options) {
	c := &o.ldsCfg
	fs.BoolVar(&o.lds, "lds-bins", false, "instead: per-flow LDS accuracy by flow-size bin on synthetic Pareto traffic (uses -lds-* and -flows, -loss)")
	fs.IntVar(&c.Flows, "flows", c.Flows, "flows (-lds-bins)")
	fs.Float64Var(&c.Loss, "loss", 0, "uniform loss (-lds-bins)")
	fs.IntVar(&c.LDS.Rows, "lds-rows", c.LDS.Rows, "LDS rows (-lds-bins)")
	fs.IntVar(&c.LDS.Cols, "lds-cols", c.LDS.Cols, "LDS cells per row (-lds-bins)")
	fs.IntVar(&c.LDS.K, "lds-k", c.LDS.K, "LDS vLDA length (-lds-bins)")
	fs.Var(cli.Uint8List{P: &c.LDS.RowSampleLog2}, "lds-sampling", "LDS per-row sampling exponents (-lds-bins)")
}

func bindColate(fs *flag.FlagSet, o *options) {
	c := &o.colCfg
	fs.BoolVar(&o.colate, "colate-triangle", false, "instead: COLATE on a synthetic triangle of three points, at the parameters the paper's solver picks, against the true per-flow means")
	fs.Float64Var(&c.RAMBits, "colate-ram-bits", c.RAMBits, "RAM per point in bits (-colate-triangle)")
	fs.Float64Var(&c.LinkRate, "colate-link-rate", c.LinkRate, "packets/s per link (-colate-triangle)")
	fs.DurationVar(&c.Span, "colate-span", c.Span, "vector span (-colate-triangle)")
	fs.DurationVar(&c.Duration, "colate-duration", c.Duration, "traffic duration (-colate-triangle)")
	fs.BoolVar(&c.PaperThreshold, "colate-paper-threshold", false, "solve as the paper does, for vectors dumped at a sum of T (-colate-triangle)")
	fs.Var(cli.IntPairs{P: &c.Shapes}, "colate-shapes", "also evaluate these vector shapes N:M,... (counters n, subvector m), whatever the solver says (-colate-triangle)")
}

func bindFridge(fs *flag.FlagSet, o *options) {
	c := &o.frCfg
	fs.BoolVar(&o.fridge, "fridge", false, "instead: RTT fridges against the simple array on the fridge dissertation's synthetic traces, as a table")
	fs.IntVar(&c.Seeds, "fridge-seeds", c.Seeds, "traces per maximum delay (-fridge)")
	fs.IntVar(&c.Requests, "fridge-requests", c.Requests, "requests per trace (-fridge)")
	fs.BoolVar(&c.KeepSending, "fridge-keep-sending", false, "requests go on until the last response (-fridge)")
	fs.BoolVar(&c.NoCorrection, "fridge-no-correction", false, "count every fridge sample once (-fridge)")
}

func bindReorder(fs *flag.FlagSet, o *options) {
	c, cc := &o.roCfg, &o.rocCfg
	fs.BoolVar(&o.reorder, "reorder", false, "instead: the per-prefix reordering tracker against the exact tracker, on a synthetic trace and on -reorder-capture, as tables")
	fs.IntVar(&c.Seeds, "reorder-seeds", c.Seeds, "synthetic traces (-reorder)")
	fs.IntVar(&c.Flows, "reorder-flows", c.Flows, "flows per synthetic trace (-reorder)")
	fs.IntVar(&c.Prefixes, "reorder-prefixes", c.Prefixes, "prefixes per synthetic trace (-reorder)")
	fs.Var(cli.ByteSizes{P: &c.Budgets}, "reorder-budgets", "tracker memory budgets on the synthetic trace, e.g. 64k,256k,1m (-reorder)")
	fs.Float64Var(&c.Threshold, "reorder-threshold", c.Threshold, "reordering rate above which a prefix is flagged (-reorder)")
	fs.DurationVar(&c.Duration, "reorder-duration", c.Duration, "the synthetic flows start within this time (-reorder)")
	fs.IntVar(&c.ReportMax, "reorder-report-max", c.ReportMax, "prefixes a report lists on its way to the collector, as reorder.prefixes.max (-reorder)")
	fs.StringVar(&cc.Path, "reorder-capture", cc.Path, "capture to inject per-prefix reordering into; empty to skip (-reorder)")
	fs.IntVar(&cc.Seeds, "reorder-capture-seeds", cc.Seeds, "impairment draws of the capture (-reorder)")
	fs.Var(cli.ByteSizes{P: &cc.Budgets}, "reorder-capture-budgets", "tracker memory budgets on the capture (-reorder)")
	fs.Var(sim.PrefixReorders{P: &o.roInject}, "reorder-prefix",
		"PREFIX=P: hold back packets from PREFIX with probability P on the capture, instead of the default injection; repeatable (-reorder)")
}

// runReorder runs -reorder.
func runReorder(o *options) error {
	res, err := evaluate.RunReorder(o.roCfg)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := evaluate.WriteReorderTable(os.Stdout, o.roCfg, res); err != nil {
		return err
	}
	cc := o.rocCfg
	if cc.Path == "" {
		return nil
	}
	cc.Threshold, cc.ReportMax = o.roCfg.Threshold, o.roCfg.ReportMax
	if len(o.roInject) > 0 {
		cc.Impairment.PrefixReorder = o.roInject
	}
	cres, err := evaluate.RunReorderCapture(cc)
	if err != nil {
		return err
	}
	fmt.Println()
	return evaluate.WriteReorderCaptureTable(os.Stdout, cc, cres)
}

// run does what the flags ask.
func run(o *options) error {
	switch {
	case o.colate:
		o.colCfg.Output = os.Stdout
		_, err := evaluate.RunColate(o.colCfg)
		return err
	case o.lds:
		o.ldsCfg.Output = os.Stdout
		_, err := evaluate.RunLDS(o.ldsCfg)
		return err
	case o.sweep:
		return evaluate.WriteSweepTable(os.Stdout, o.sweepCfg, evaluate.RunSweep(o.sweepCfg))
	case o.fridge:
		rows, err := evaluate.RunFridge(o.frCfg)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		return evaluate.WriteFridgeTable(os.Stdout, o.frCfg, rows)
	case o.reorder:
		return runReorder(o)
	}
	cfg := o.files
	if o.prefix != "" {
		cfg.Up, cfg.Down, cfg.Truth = o.prefix+"-up.pcap", o.prefix+"-down.pcap", o.prefix+"-truth.csv"
	}
	if cfg.Up == "" || cfg.Down == "" || cfg.Truth == "" {
		return fmt.Errorf("%w: evaluate needs -up, -down and -truth (or -prefix)", errUsage)
	}
	cfg.DownClockOffsetNS = int64(o.offset)
	if err := o.ldaFlags(&cfg); err != nil {
		return err
	}
	var s evaluate.Summary
	var err error
	if o.rda {
		o.rdaCfg.Limits.MinBuckets = min(o.rdaCfg.Limits.MinBuckets, o.rdaCfg.RDA.Buckets)
		s, err = evaluate.RunFilesRDA(cfg, o.rdaCfg, os.Stdout)
	} else {
		s, err = evaluate.RunFiles(cfg, os.Stdout)
	}
	if err != nil {
		return err
	}
	fmt.Printf("epochs %d (no estimate: %d)  mean rel. error: avg %.3g%% max %.3g%%  stddev rel. error: avg %.2f%% max %.2f%%  samples/delivered %.1f%%\n",
		s.Epochs, s.Failed, 100*s.MeanRelErr, 100*s.MaxMeanRelErr, 100*s.StdRelErr, 100*s.MaxStdRelErr, 100*s.SampleShare)
	return nil
}

// ldaFlags applies -lda-banks and -stddev.
func (o *options) ldaFlags(cfg *evaluate.FilesConfig) error {
	cfg.LDA.BankSampleLog2 = cfg.LDA.BankSampleLog2[:0]
	for _, f := range strings.Split(o.banks, ",") {
		e, err := strconv.ParseUint(strings.TrimSpace(f), 10, 8)
		if err != nil {
			return fmt.Errorf("%w: bad -lda-banks %q: %v", errUsage, o.banks, err)
		}
		cfg.LDA.BankSampleLog2 = append(cfg.LDA.BankSampleLog2, uint8(e))
	}
	switch o.stddev {
	case "centered":
		cfg.Estimate.Stddev = lda.StddevCentered
	case "collapsed":
		cfg.Estimate.Stddev = lda.StddevCollapsed
	default:
		return fmt.Errorf("%w: bad -stddev %q: want centered or collapsed", errUsage, o.stddev)
	}
	return nil
}
