// Command evaluate runs the two captures that tracegen made through owl's
// decoding, epochs and LDA, and prints each epoch's estimate beside the
// ground truth:
//
//	evaluate -up /tmp/run-up.pcap -down /tmp/run-down.pcap -truth /tmp/run-truth.csv
//
// With -rda-sweep it reproduces the RDA paper's sweep of the set difference
// instead (RDA against an LDA of the same memory).
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/evaluate"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
)

func main() {
	fs := flag.NewFlagSet("evaluate", flag.ExitOnError)
	cfg := evaluate.FilesConfig{Identity: capture.DefaultIdentityConfig(), Epoch: epoch.DefaultConfig(),
		LDA: lda.DefaultConfig(), Estimate: lda.DefaultOptions()}
	fs.StringVar(&cfg.Up, "up", "", "upstream capture")
	fs.StringVar(&cfg.Down, "down", "", "downstream capture")
	fs.StringVar(&cfg.Truth, "truth", "", "ground truth CSV from tracegen")
	prefix := fs.String("prefix", "", "shorthand for -up PREFIX-up.pcap -down PREFIX-down.pcap -truth PREFIX-truth.csv")
	fs.DurationVar(&cfg.Epoch.Length, "epoch", cfg.Epoch.Length, "epoch length")
	fs.DurationVar(&cfg.Epoch.Grace, "grace", cfg.Epoch.Grace, "epoch grace period")
	fs.IntVar(&cfg.LDA.Rows, "lda-rows", cfg.LDA.Rows, "LDA rows per bank")
	banks := fs.String("lda-banks", "0,4", "LDA bank sampling exponents: bank j samples 2^-e_j − 2^-e_{j+1} of the packets")
	stddev := fs.String("stddev", "centered", "standard deviation estimator: centered or collapsed (the paper's)")
	offset := fs.Duration("down-clock-offset", 0, "downstream clock offset given to tracegen")
	sweep := fs.Bool("rda-sweep", false, "instead: run the RDA paper's set-difference sweep (RDA vs LDA of the same memory) and print its table")
	sweepCfg := evaluate.DefaultSweepConfig()
	fs.IntVar(&sweepCfg.Trials, "trials", sweepCfg.Trials, "epochs per set-difference size (-rda-sweep)")
	fs.IntVar(&sweepCfg.Packets, "packets", sweepCfg.Packets, "common packets per epoch (-rda-sweep)")
	ldsRun := fs.Bool("lds-bins", false, "instead: per-flow LDS accuracy by flow-size bin on synthetic Pareto traffic (uses -lds-* and -flows, -loss)")
	ldsCfg := evaluate.LDSRunConfig{Flows: 146_000, Shape: 0.9, LDS: lds.Config{Rows: 4, Cols: 17_500, K: 1, Seed: 1}, Opts: lds.DefaultOptions(), Seed: 1}
	fs.IntVar(&ldsCfg.Flows, "flows", ldsCfg.Flows, "flows (-lds-bins)")
	fs.Float64Var(&ldsCfg.Loss, "loss", 0, "uniform loss (-lds-bins)")
	fs.IntVar(&ldsCfg.LDS.Rows, "lds-rows", ldsCfg.LDS.Rows, "LDS rows (-lds-bins)")
	fs.IntVar(&ldsCfg.LDS.Cols, "lds-cols", ldsCfg.LDS.Cols, "LDS cells per row (-lds-bins)")
	fs.IntVar(&ldsCfg.LDS.K, "lds-k", ldsCfg.LDS.K, "LDS vLDA length (-lds-bins)")
	fs.Var(cli.Uint8List{P: &ldsCfg.LDS.RowSampleLog2}, "lds-sampling", "LDS per-row sampling exponents (-lds-bins)")
	colRun := fs.Bool("colate-triangle", false, "instead: COLATE on a synthetic triangle of three points, at the parameters the paper's solver picks, against the true per-flow means")
	colCfg := evaluate.DefaultColateConfig()
	fs.Float64Var(&colCfg.RAMBits, "colate-ram-bits", colCfg.RAMBits, "RAM per point in bits (-colate-triangle)")
	fs.Float64Var(&colCfg.LinkRate, "colate-link-rate", colCfg.LinkRate, "packets/s per link (-colate-triangle)")
	fs.DurationVar(&colCfg.Span, "colate-span", colCfg.Span, "vector span (-colate-triangle)")
	fs.DurationVar(&colCfg.Duration, "colate-duration", colCfg.Duration, "traffic duration (-colate-triangle)")
	fs.BoolVar(&colCfg.PaperThreshold, "colate-paper-threshold", false, "solve as the paper does, for vectors dumped at a sum of T (-colate-triangle)")
	fs.Var(cli.IntPairs{P: &colCfg.Shapes}, "colate-shapes", "also evaluate these vector shapes N:M,... (counters n, subvector m), whatever the solver says (-colate-triangle)")
	cfg.Identity.BindFlags(fs)
	_ = fs.Parse(os.Args[1:])

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *colRun {
		colCfg.Output = os.Stdout
		if _, err := evaluate.RunColate(colCfg); err != nil {
			log.Error("colate run failed", "err", err)
			os.Exit(1)
		}
		return
	}
	if *ldsRun {
		ldsCfg.Output = os.Stdout
		if _, err := evaluate.RunLDS(ldsCfg); err != nil {
			log.Error("lds run failed", "err", err)
			os.Exit(1)
		}
		return
	}
	if *sweep {
		if err := evaluate.WriteSweepTable(os.Stdout, sweepCfg, evaluate.RunSweep(sweepCfg)); err != nil {
			log.Error("sweep failed", "err", err)
			os.Exit(1)
		}
		return
	}
	if *prefix != "" {
		cfg.Up, cfg.Down, cfg.Truth = *prefix+"-up.pcap", *prefix+"-down.pcap", *prefix+"-truth.csv"
	}
	if cfg.Up == "" || cfg.Down == "" || cfg.Truth == "" {
		log.Error("evaluate needs -up, -down and -truth (or -prefix)")
		os.Exit(2)
	}
	cfg.DownClockOffsetNS = int64(*offset)
	cfg.LDA.BankSampleLog2 = cfg.LDA.BankSampleLog2[:0]
	for _, f := range strings.Split(*banks, ",") {
		e, err := strconv.ParseUint(strings.TrimSpace(f), 10, 8)
		if err != nil {
			log.Error("bad -lda-banks", "value", *banks, "err", err)
			os.Exit(2)
		}
		cfg.LDA.BankSampleLog2 = append(cfg.LDA.BankSampleLog2, uint8(e))
	}
	switch *stddev {
	case "centered":
		cfg.Estimate.Stddev = lda.StddevCentered
	case "collapsed":
		cfg.Estimate.Stddev = lda.StddevCollapsed
	default:
		log.Error("bad -stddev: want centered or collapsed", "value", *stddev)
		os.Exit(2)
	}
	s, err := evaluate.RunFiles(cfg, os.Stdout)
	if err != nil {
		log.Error("evaluate failed", "err", err)
		os.Exit(1)
	}
	fmt.Printf("epochs %d (no estimate: %d)  mean rel. error: avg %.3f%% max %.3f%%  stddev rel. error: avg %.2f%% max %.2f%%  samples/delivered %.1f%%\n",
		s.Epochs, s.Failed, 100*s.MeanRelErr, 100*s.MaxMeanRelErr, 100*s.StdRelErr, 100*s.MaxStdRelErr, 100*s.SampleShare)
}
