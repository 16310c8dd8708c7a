package probe

import (
	"errors"
	"fmt"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/params"
)

// A probe captures with the deployment's parameters: its own when it was
// given them (Config.ExplicitParams), which the collector checks at Hello;
// otherwise the collector's, which come with every path configuration. The
// pipelines are built once the parameters are known: in New, or with the
// first path configuration (the one a previous run kept in the data
// directory, or the collector's). Parameters that change under a running
// probe end it: it does not mix two grids or two synopsis shapes in one
// capture, and a restart takes the new ones.

// ErrParamsChanged ends a probe that took the collector's parameters when
// a path configuration brings others: it does not mix the two in one
// capture. A restart takes the new ones (kept in the data directory, if
// any, so that it captures with them at once).
var ErrParamsChanged = errors.New("the collector's parameters changed")

// build makes the capture workers' pipelines, their merger and the
// reporter's grid for the parameters pr. p.pipesMu is held, or the probe
// is not running yet.
func (p *Probe) build(pr params.Params) error {
	var pipes []*pipeline
	var merge *merger
	sink := p.rep.report
	if p.workers > 1 {
		merge = newMerger(p.workers, pr.Epoch, pr.Sample.MaxEntries, p.rep.report)
	}
	for w := range p.workers {
		if merge != nil {
			sink = func(ce closedEpoch) { merge.add(w, ce) }
		}
		pl, err := newPipeline(pr, p.cfg.Cache.MaxPackets, p.cfg.TopFlows, sink, &p.stats)
		if err != nil {
			return err
		}
		pl.correct = p.correct
		if c := p.cfg.RTT; c.Enabled {
			if pl.rtt, err = newRTTMatcher(c, c.Fridges.Seed, pr.Epoch.Length.Seconds()); err != nil {
				return fmt.Errorf("rtt: %w", err)
			}
		}
		if pl.reorder, err = newReorderTracker(p.cfg.Reorder); err != nil {
			return fmt.Errorf("reorder: %w", err)
		}
		pipes = append(pipes, pl)
	}
	p.rep.grid = pr.Epoch
	p.inUse, p.pipes, p.merge = &pr, pipes, merge
	return nil
}

// takeParams returns the pipelines, building them for the collector's
// parameters sp when the probe was not given its own and has none yet.
// Parameters that differ from those in use are an error wrapping
// ErrParamsChanged. A probe given its own ignores sp: the collector
// compared them with its own at Hello.
func (p *Probe) takeParams(sp *owlv1.SynopsisParams) ([]*pipeline, error) {
	p.pipesMu.Lock()
	defer p.pipesMu.Unlock()
	if p.cfg.ExplicitParams || sp == nil && p.inUse != nil {
		return p.pipes, nil
	}
	if sp == nil {
		return nil, errors.New("the path configuration carries no parameters (a collector older than the probe?): give the probe the deployment's parameters")
	}
	pushed, err := params.FromProto(sp)
	if err == nil {
		pushed = pushed.WithLocal(p.cfg.Params)
		err = pushed.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("the collector's parameters, with the probe's grace %v: %w", p.cfg.Params.Epoch.Grace, err)
	}
	if p.inUse != nil {
		if err := p.inUse.Compatible(pushed); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrParamsChanged, err)
		}
		return p.pipes, nil
	}
	if err := p.build(pushed); err != nil {
		return nil, err
	}
	p.log.Info("capturing with the collector's parameters", "epoch", pushed.Epoch.Length, "lda_rows", pushed.LDA.Rows,
		"rda_banks", pushed.RDA.Banks, "lds_rows", pushed.LDS.Rows, "lds_cols", pushed.LDS.Cols, "colate", pushed.Colate.Enabled)
	return p.pipes, nil
}

// pipelines returns the capture workers' pipelines (none before the
// parameters are known).
func (p *Probe) pipelines() []*pipeline {
	p.pipesMu.Lock()
	defer p.pipesMu.Unlock()
	return p.pipes
}
