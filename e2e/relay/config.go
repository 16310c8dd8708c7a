package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/owl-latency/owl/internal/sim"
)

// config is the relay's settings, from its flags.
type config struct {
	a, b string // a's frames are impaired on their way out of b
	// imp holds the delay model, loss, reordering (also per prefix of
	// the frames' source addresses) and duplication of frames a → b.
	imp sim.Impairment
	// flowOrder keeps a flow's frames in the order they came but for
	// those held back by reordering: the delay model's jitter then
	// delays frames without reordering them within a flow.
	flowOrder bool
}

// parseConfig reads the relay's flags from args, writing usage and flag
// errors to out.
func parseConfig(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.a, "a", "", "interface whose frames are impaired")
	fs.StringVar(&c.b, "b", "", "interface the impaired frames leave by")
	delay := fs.String("delay", "const:100us", "delay model (weibull:shape=,scale=,base= | const:D | bimodal:p=,low=,high=)")
	fs.Float64Var(&c.imp.Loss, "loss", 0, "probability that a frame a→b is dropped")
	fs.Float64Var(&c.imp.Reorder, "reorder", 0, "probability that a frame a→b is held back by up to -reorder-extra")
	fs.DurationVar(&c.imp.ReorderExtra, "reorder-extra", 5*time.Millisecond, "largest extra hold of a reordered frame")
	fs.Var(sim.PrefixReorders{P: &c.imp.PrefixReorder}, "reorder-prefix",
		"PREFIX=P: frames a→b whose source address is in PREFIX are held back with probability P instead of -reorder; repeatable, the longest prefix wins")
	fs.BoolVar(&c.flowOrder, "flow-order", false, "keep each flow's frames a→b in order, but for those held back: the delay's jitter reorders only across flows")
	fs.Float64Var(&c.imp.Duplicate, "duplicate", 0, "probability that a frame a→b is sent twice")
	fs.Uint64Var(&c.imp.Seed, "seed", 1, "random seed")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.a == "" || c.b == "" {
		return config{}, errors.New("relay needs -a and -b")
	}
	m, err := sim.ParseDelay(*delay)
	if err != nil {
		return config{}, fmt.Errorf("-delay: %w", err)
	}
	c.imp.Delay = m
	c.imp.DuplicateGap = 20 * time.Microsecond
	if err := c.imp.Validate(); err != nil {
		return config{}, err
	}
	return c, nil
}
