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
package main

import (
	"container/heap"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
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
	a := flag.String("a", "", "interface whose frames are impaired")
	b := flag.String("b", "", "interface the impaired frames leave by")
	delay := flag.String("delay", "const:100us", "delay model (weibull:shape=,scale=,base= | const:D | bimodal:p=,low=,high=)")
	loss := flag.Float64("loss", 0, "probability that a frame a→b is dropped")
	reorder := flag.Float64("reorder", 0, "probability that a frame a→b is held back by up to -reorder-extra")
	reorderExtra := flag.Duration("reorder-extra", 5*time.Millisecond, "largest extra hold of a reordered frame")
	dup := flag.Float64("duplicate", 0, "probability that a frame a→b is sent twice")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	m, err := sim.ParseDelay(*delay)
	if err != nil || *a == "" || *b == "" {
		log.Error("relay needs -a, -b and a valid -delay", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &relay{model: m, loss: *loss, reorder: *reorder, reorderExtra: *reorderExtra, dup: *dup,
		rnd: rand.New(rand.NewPCG(*seed, 0x72656c6179)), log: log}
	if err := r.run(ctx, *a, *b); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("relay failed", "err", err)
		os.Exit(1)
	}
	log.Info("relay done", "forwarded", r.forwarded.Load(), "dropped", r.dropped.Load(), "duplicated", r.duplicated.Load(), "returned", r.returned.Load())
}

type relay struct {
	model        sim.DelayModel
	loss         float64
	reorder      float64
	reorderExtra time.Duration
	dup          float64
	rnd          *rand.Rand
	log          *slog.Logger

	forwarded, dropped, duplicated, returned atomic.Uint64
}

// open opens a socket that reads frames arriving on ifname (not those sent
// out of it) and can send frames out of it.
func open(ifname string) (*capture.LiveSource, *afpacket.TPacket, error) {
	cfg := capture.DefaultLiveConfig()
	cfg.Interface, cfg.NumBlocks, cfg.FrameSize = ifname, 8, 16384 // jumbo frames too; the block size is a multiple
	cfg.PollTimeout = 20 * time.Millisecond
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
func (r *relay) run(ctx context.Context, a, b string) error {
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
	r.log.Info("relaying", "a", a, "b", b, "delay", r.model, "loss", r.loss, "reorder", r.reorder, "duplicate", r.dup)

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

// impair reads frames a → b from in and queues them with the model's delay,
// loss, reordering and duplication, until ctx ends or in fails (sent on errc).
func (r *relay) impair(ctx context.Context, in *capture.LiveSource, q *queue, errc chan<- error) {
	eachFrame(ctx, in, errc, func(f capture.Frame) {
		if r.rnd.Float64() < r.loss {
			r.dropped.Add(1)
			return
		}
		d := time.Duration(r.model.SampleNS(r.rnd))
		if r.reorder > 0 && r.rnd.Float64() < r.reorder {
			d += time.Duration(1 + r.rnd.Int64N(int64(r.reorderExtra)))
		}
		data := append([]byte(nil), f.Data...)
		now := time.Now()
		q.push(now.Add(d), data)
		if r.dup > 0 && r.rnd.Float64() < r.dup {
			q.push(now.Add(d+time.Duration(1+r.rnd.Int64N(int64(20*time.Microsecond)))), data)
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
