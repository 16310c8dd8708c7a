// Command tracegen turns a single-point capture (pcap or pcapng) into the two
// captures a pair of observation points would record across an impaired
// path, plus a ground-truth file: PREFIX-up.pcap, PREFIX-down.pcap,
// PREFIX-truth.csv (frame, packet id, up_ns, down_ns or empty when lost,
// copies).
//
//	tracegen -in testdata/trace.pcap -out /tmp/run -loss 0.01 \
//	  -delay weibull:shape=0.65,scale=50us,base=20us
//
// -reorder-prefix reorders some senders' packets more than others', e.g.
// -reorder-prefix 10.99.0.2/32=0.05 holds back 5% of the packets whose
// source is 10.99.0.2 (the ground truth of per-prefix reordering).
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/sim"
)

func main() {
	fs := flag.NewFlagSet("tracegen", flag.ExitOnError)
	in := fs.String("in", "", "input capture (pcap, pcapng, optionally gzipped)")
	out := fs.String("out", "", "output prefix: writes PREFIX-up.pcap, PREFIX-down.pcap, PREFIX-truth.csv")
	delay := fs.String("delay", "weibull:shape=0.65,scale=50us,base=20us",
		"delay model: weibull:shape=S,scale=D,base=D | const:D | bimodal:p=P,low=D,high=D")
	var m sim.Impairment
	fs.Float64Var(&m.Loss, "loss", 0, "probability that a packet is lost")
	fs.Float64Var(&m.Reorder, "reorder", 0, "probability that a packet is held back by an extra delay")
	fs.DurationVar(&m.ReorderExtra, "reorder-extra", time.Millisecond, "largest extra delay of a held-back packet")
	fs.Var(sim.PrefixReorders{P: &m.PrefixReorder}, "reorder-prefix",
		"PREFIX=P: packets from PREFIX (source address) are held back with probability P instead of -reorder; repeatable, longest prefix wins")
	fs.Float64Var(&m.Duplicate, "duplicate", 0, "probability that a packet arrives twice")
	fs.DurationVar(&m.DuplicateGap, "duplicate-gap", 50*time.Microsecond, "largest gap between a packet and its copy")
	fs.DurationVar(&m.DownClockOffset, "down-clock-offset", 0, "error of the downstream clock, added to its timestamps only")
	fs.Uint64Var(&m.Seed, "seed", 1, "random seed")
	synth := sim.SynthConfig{ParetoShape: 1.1, MaxPackets: 3000, Start: time.Unix(1_700_000_000, 0)}
	fs.IntVar(&synth.Flows, "synth-flows", 0, "instead of -in, synthesize this many flows (Pareto sizes, distinct packet identities)")
	fs.DurationVar(&synth.Span, "synth-span", time.Minute, "time the synthetic flows spread over")
	fs.Uint64Var(&synth.Seed, "synth-seed", 5, "random seed of the synthetic traffic")
	var shape sim.Shape
	fs.Float64Var(&shape.Rate, "rate", 0, "space the input's packets evenly at this many per second (0: keep their times)")
	fs.IntVar(&shape.Repeat, "repeat", 1, "play the input this many times over, one copy after another")
	fs.DurationVar(&shape.Every, "repeat-every", 0, "time between the starts of copies with -repeat (0: the input's span rounded up to a second, plus one)")
	id := capture.DefaultIdentityConfig()
	id.BindFlags(fs)
	_ = fs.Parse(os.Args[1:])

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if (*in == "") == (synth.Flows == 0) || *out == "" {
		log.Error("tracegen needs -out and one of -in and -synth-flows")
		fs.Usage()
		os.Exit(2)
	}
	var err error
	if m.Delay, err = sim.ParseDelay(*delay); err != nil {
		log.Error("bad -delay", "err", err)
		os.Exit(2)
	}
	if err := m.Validate(); err != nil {
		log.Error("bad impairment", "err", err)
		os.Exit(2)
	}
	outs := sim.OutputsFor(*out)
	var s sim.Summary
	if synth.Flows > 0 {
		s, err = sim.GenerateSynthetic(synth, shape, outs, id, m)
	} else {
		s, err = sim.GenerateShaped(*in, shape, outs, id, m)
	}
	if err != nil {
		log.Error("tracegen failed", "err", err)
		os.Exit(1)
	}
	fmt.Printf("%d frames, %d IP packets: %d lost, %d duplicated, mean delay %.3f µs (%s)\nwrote %s %s %s\n",
		s.Frames, s.Packets, s.Lost, s.Duplicated, s.MeanDelayNS/1e3, m.Delay, outs.Up, outs.Down, outs.Truth)
}
