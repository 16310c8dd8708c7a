package probe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/owl-latency/owl/internal/capture"
)

// liveCapture is a probe's live source: one AF_PACKET socket per worker.
type liveCapture struct {
	cfg capture.LiveConfig

	mu       sync.Mutex
	srcs     []*capture.LiveSource
	tsSource string
	// Drops already reported, to report each once.
	reportedDrops atomic.Uint64
}

func (lc *liveCapture) timestampSource() string {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.tsSource == "" {
		return "kernel"
	}
	return lc.tsSource
}

// totals returns the packets the kernel offered and dropped, all sockets.
func (lc *liveCapture) totals() (packets, drops uint64) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, s := range lc.srcs {
		p, d, err := s.Stats()
		if err == nil {
			packets += p
			drops += d
		}
	}
	return packets, drops
}

// droppedSince returns the ring drops since its previous call.
func (lc *liveCapture) droppedSince() uint64 {
	_, d := lc.totals()
	prev := lc.reportedDrops.Swap(d)
	if d < prev {
		return 0
	}
	return d - prev
}

// runLive captures until ctx ends. Each worker reads its fanout socket,
// decodes and folds packets into its own synopses, and advances time on the
// system clock when its socket is idle, so that epochs close without
// traffic. When ctx ends, the epochs up to the one the stop falls in are
// closed and reported, that one marked partial (see closeAtStop); when
// capture fails, the epochs still open are dropped.
func (p *Probe) runLive(ctx context.Context) error {
	lc := p.live
	for w := range p.pipes {
		s, err := capture.OpenLive(lc.cfg, w)
		if err != nil {
			lc.closeAll()
			return err
		}
		lc.mu.Lock()
		lc.srcs = append(lc.srcs, s)
		lc.tsSource = s.TimestampSource()
		lc.mu.Unlock()
		if err := p.pipes[w].setLink(s.LinkType()); err != nil {
			lc.closeAll()
			return err
		}
	}
	defer lc.closeAll()
	var dump *dumper
	if lc.cfg.Dump != "" {
		var err error
		if dump, err = newDumper(lc.cfg.Dump, lc.cfg.FrameSize); err != nil {
			return err
		}
		defer func() {
			if err := dump.close(); err != nil {
				p.log.Error("closing the capture dump", "err", err)
			}
		}()
	}
	p.hardwareClock()
	// Epochs that began before now hold part of their packets only.
	p.rep.startedNS.Store(p.clock.Now())
	p.log.Info("capturing", "interface", lc.cfg.Interface, "workers", len(p.pipes), "timestamps", lc.timestampSource(), "clock", p.cfg.Clock.Source)
	// The stop is taken when ctx ends: the workers read on until they
	// see it, a poll timeout at most later.
	stopped := make(chan int64, 1)
	defer context.AfterFunc(ctx, func() { stopped <- p.clock.Now() })()
	g, gctx := errgroup.WithContext(ctx)
	for w, src := range lc.srcs {
		g.Go(func() error { return p.liveWorker(gctx, w, src, dump) })
	}
	if err := g.Wait(); err != nil {
		open := 0
		for _, pl := range p.pipes {
			open += pl.window.Open()
		}
		p.log.Info("capture stopped", "open_epochs_discarded", open)
		return err
	}
	// The workers return nil only once ctx has ended.
	last, discarded := p.closeAtStop(<-stopped)
	p.log.Info("capture stopped", "last_epoch", last, "open_epochs_discarded", discarded)
	return nil
}

// liveWorker runs worker w's capture loop on src until ctx ends.
func (p *Probe) liveWorker(ctx context.Context, w int, src *capture.LiveSource, dump *dumper) error {
	lc, pl := p.live, p.pipes[w]
	lastAdvance := time.Now()
	for ctx.Err() == nil {
		f, err := src.Next()
		switch {
		case errors.Is(err, capture.ErrTimeout):
		case err != nil:
			return fmt.Errorf("capturing on %s: %w", lc.cfg.Interface, err)
		default:
			if dump != nil {
				dump.write(f.Data, f.TimeNS, src.WireLen())
			}
			pl.frame(f.Data, f.TimeNS)
		}
		// Time moves at least every poll timeout, so that an idle
		// socket closes its epochs, and one whose frames do not decode
		// too. It moves on the clock only when the ring is empty (the
		// poll timed out), less twice the block timeout (what the
		// kernel may still hold in the block it fills): a worker that
		// was held up (no CPU for a while) reads on through the packets
		// its ring kept, and moving to the clock would close their
		// epochs under them, making them late. While frames come, time
		// is the last frame's.
		if now := time.Now(); err != nil || now.Sub(lastAdvance) > lc.cfg.PollTimeout {
			ref := p.clock.Now() - 2*int64(lc.cfg.BlockTimeout) // the time scale of the corrected timestamps
			if err == nil {
				ref = pl.captureTime(f.TimeNS)
			}
			pl.advance(ref)
			if p.merge != nil {
				p.merge.watermark(w, ref)
			}
			lastAdvance = now
		}
	}
	return nil
}

// closeAtStop ends a live capture that stopped at stopNS (reference
// clock), once its workers have returned. The epochs up to the one stopNS
// falls in are closed and reported: those that ended before it whole
// (still open for their grace only), the one it falls in marked partial,
// so that the collector's result says PARTIAL rather than, later, MISSING.
// Epochs that begin at or after stopNS (timestamps ahead of the clock)
// had not started and are dropped. It returns the last epoch reported and
// the epochs dropped, summed over the workers.
//
// Capture files get no such ending: a file that ends inside an epoch says
// nothing of whether traffic would have gone on, so its last epochs close
// as they are, not marked partial (pipeline.flush).
func (p *Probe) closeAtStop(stopNS int64) (last int64, discarded int) {
	grid := p.rep.grid
	last, _ = grid.Of(stopNS - 1) // the epoch of the last nanosecond captured
	closeNS := grid.EndNS(last) + int64(grid.Grace)
	p.rep.stoppedNS.Store(stopNS)
	for w, pl := range p.pipes {
		pl.advance(closeNS)
		if p.merge != nil {
			p.merge.watermark(w, closeNS)
		}
		discarded += pl.window.Open()
	}
	return last, discarded
}

// hardwareClock takes the NIC's clock for timestamps when the capture has
// hardware timestamps: they are on the PHC's time scale already, so the
// phc source has nothing to correct, and the others do not apply.
func (p *Probe) hardwareClock() {
	if p.live.timestampSource() != "hardware" {
		return
	}
	if p.cfg.Clock.Source == "phc" {
		for _, pl := range p.pipes {
			pl.correct = nil
		}
	} else {
		p.log.Warn("hardware timestamps are on the NIC's clock, not the system clock: use -clock phc with them", "clock", p.cfg.Clock.Source)
	}
}

func (lc *liveCapture) closeAll() {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, s := range lc.srcs {
		s.Close()
	}
	lc.srcs = nil
}
