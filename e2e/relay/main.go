// Command relay is a userspace delay line for end-to-end tests on this
// kernel, which has no netem: it forwards Ethernet frames between two
// interfaces with AF_PACKET, applying to one direction a delay model, loss,
// reordering and duplication, and passing the other direction through.
//
//	relay -a r-in -b r-out -delay weibull:shape=0.65,scale=200us,base=100us -loss 0.01
//
// Frames from a go out of b after the model's delay (in order of their due
// times, so that a packet drawn a shorter delay overtakes one drawn a
// longer one); frames from b go out of a at once. Run it with nothing else
// forwarding between the interfaces (no bridge, IP forwarding off).
//
// Reordering can differ by prefix, matched on a frame's source address as
// owl's reordering tracker groups flows by their senders' prefixes:
//
//	relay -a r-in -b r-out -reorder 0.005 -reorder-prefix 10.78.0.0/24=0.05 -flow-order
//
// holds back 5% of the frames from 10.78.0.0/24 and 0.5% of the others
// (the longest prefix that holds the source wins; frames that are not IP
// take -reorder). The delay model's jitter reorders too: two frames of a
// flow that arrive closer together than the jitter often swap, so that a
// bulk transfer sees far more reordering than -reorder asks for.
// -flow-order keeps each flow's frames in order but for those held back
// (a frame leaves no earlier than the one before it in its flow), so that
// the reordering of each prefix is what the flags say.
package main

import (
	"container/heap"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gopacket/gopacket/afpacket"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/sim"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := parseConfig(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		log.Error("bad flags", "err", err)
		os.Exit(2)
	}
	p, err := newPlanner(cfg)
	if err != nil {
		log.Error("relay failed", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &relay{cfg: cfg, plan: p, log: log}
	if err := r.run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("relay failed", "err", err)
		os.Exit(1)
	}
	log.Info("relay done", "forwarded", r.forwarded.Load(), "dropped", r.dropped.Load(), "duplicated", r.duplicated.Load(), "returned", r.returned.Load())
}

type relay struct {
	cfg  config
	plan *planner // only impair uses it
	log  *slog.Logger

	forwarded, dropped, duplicated, returned atomic.Uint64
}

// open opens a socket that reads frames arriving on ifname (not those sent
// out of it) and can send frames out of it.
func open(ifname string) (*capture.LiveSource, *afpacket.TPacket, error) {
	cfg := capture.DefaultLiveConfig()
	cfg.Interface, cfg.NumBlocks, cfg.FrameSize = ifname, 8, 16384 // jumbo frames too; the block size is a multiple
	cfg.PollTimeout = 20 * time.Millisecond
	// Blocks handed over every 10 ms: a relay that held frames in the
	// kernel for a probe's block timeout would make the link's delay.
	cfg.BlockTimeout = 10 * time.Millisecond
	in, err := capture.OpenLive(cfg, 0)
	if err != nil {
		return nil, nil, err
	}
	out, err := afpacket.NewTPacket(afpacket.OptInterface(ifname), afpacket.OptNumBlocks(1))
	if err != nil {
		in.Close()
		return nil, nil, fmt.Errorf("opening a sending socket on %s: %w", ifname, err)
	}
	return in, out, nil
}

// run relays frames between interfaces a and b until ctx ends or a socket fails.
func (r *relay) run(ctx context.Context) error {
	a, b := r.cfg.a, r.cfg.b
	inA, outA, err := open(a)
	if err != nil {
		return err
	}
	defer inA.Close()
	defer outA.Close()
	inB, outB, err := open(b)
	if err != nil {
		return err
	}
	defer inB.Close()
	defer outB.Close()
	imp := r.cfg.imp
	r.log.Info("relaying", "a", a, "b", b, "delay", imp.Delay, "loss", imp.Loss, "reorder", imp.Reorder,
		"reorder_prefix", sim.PrefixReorders{P: &imp.PrefixReorder}, "reorder_extra", imp.ReorderExtra,
		"flow_order", r.cfg.flowOrder, "duplicate", imp.Duplicate)

	q := &queue{wake: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Go(func() { r.impair(ctx, inA, q, errc) })
	wg.Go(func() { r.release(ctx, q, outB) })
	wg.Go(func() { r.passBack(ctx, inB, outA, errc) })
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	wg.Wait()
	return err
}

// impair reads frames a → b from in and queues them as the planner says,
// until ctx ends or in fails (sent on errc).
func (r *relay) impair(ctx context.Context, in *capture.LiveSource, q *queue, errc chan<- error) {
	var due [2]time.Time
	eachFrame(ctx, in, errc, func(f capture.Frame) {
		n := r.plan.plan(f.Data, time.Now(), &due)
		if n == 0 {
			r.dropped.Add(1)
			return
		}
		data := append([]byte(nil), f.Data...)
		for _, at := range due[:n] {
			q.push(at, data)
		}
		if n == 2 {
			r.duplicated.Add(1)
		}
	})
}

// eachFrame hands every frame read from in to f until ctx ends or in
// fails (its error sent on errc).
func eachFrame(ctx context.Context, in *capture.LiveSource, errc chan<- error, f func(capture.Frame)) {
	for ctx.Err() == nil {
		fr, err := in.Next()
		if errors.Is(err, capture.ErrTimeout) {
			continue
		}
		if err != nil {
			errc <- err
			return
		}
		f(fr)
	}
}

// release sends queued frames out of out (b) as they fall due, until ctx ends.
func (r *relay) release(ctx context.Context, q *queue, out *afpacket.TPacket) {
	for {
		data, ok := q.pop(ctx)
		if !ok {
			return
		}
		if err := out.WritePacketData(data); err != nil {
			r.log.Warn("sending", "err", err)
			continue
		}
		r.forwarded.Add(1)
	}
}

// passBack forwards frames b → a from in to out at once, until ctx ends or
// in fails (sent on errc).
func (r *relay) passBack(ctx context.Context, in *capture.LiveSource, out *afpacket.TPacket, errc chan<- error) {
	eachFrame(ctx, in, errc, func(f capture.Frame) {
		if err := out.WritePacketData(f.Data); err == nil {
			r.returned.Add(1)
		}
	})
}

// queue holds frames until they are due, earliest first.
type queue struct {
	mu   sync.Mutex
	h    frameHeap
	seq  uint64
	wake chan struct{}
}

type held struct {
	due  time.Time
	seq  uint64 // frames due at the same time leave in arrival order
	data []byte
}

type frameHeap []held

func (h frameHeap) Len() int { return len(h) }
func (h frameHeap) Less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].seq < h[j].seq
	}
	return h[i].due.Before(h[j].due)
}
func (h frameHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *frameHeap) Push(x any)   { *h = append(*h, x.(held)) }
func (h *frameHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (q *queue) push(due time.Time, data []byte) {
	q.mu.Lock()
	q.seq++
	heap.Push(&q.h, held{due: due, seq: q.seq, data: data})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop waits for the earliest frame to be due and returns it.
func (q *queue) pop(ctx context.Context) ([]byte, bool) {
	for {
		q.mu.Lock()
		var wait time.Duration = time.Hour
		if q.h.Len() > 0 {
			wait = time.Until(q.h[0].due)
			if wait <= 0 {
				f := heap.Pop(&q.h).(held)
				q.mu.Unlock()
				return f.data, true
			}
		}
		q.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false
		case <-q.wake:
			t.Stop()
		case <-t.C:
		}
	}
}
