package collector

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/cluster"
	"github.com/owl-latency/owl/internal/store"
)

// In a cluster, each path's state is kept by two members, the first two
// by rendezvous hashing of its name (cluster.Holders): the owner, and the
// replica, which becomes the owner when the owner is gone. The owner
// sends the replica a copy of what it stores, epoch by epoch
// (ClusterService.Replicate): results, per-flow results, sketches and
// boundary records, stored by the replica as the owner stored them, and
// lone sides, which the replica keeps apart (replica-pending) until it
// owns the path. The copies wait in a bounded queue for one goroutine. A
// copy that finds the queue full waits for room, which holds up the epoch
// worker or ingest that made it: a cluster whose members cannot take the
// copies as fast as they are made slows down (its workers fall behind,
// and the probes are paused) instead of storing results the replica
// never gets. A copy is dropped when the sender has delivered nothing
// for replicaStall (a member does not answer), or when a member does not
// take it; catch-up (catchup.go) fetches what a holder lacks after each
// change of members.

// replicaQueueLen and replicaQueueBytes bound the copies waiting to be
// sent, in number and in bytes (a copy with its sketches is ~100 KiB).
const (
	replicaQueueLen   = 4096
	replicaQueueBytes = 128 << 20
)

// replicaStall is how long the sender may go without progress before the
// copies waiting for room are dropped: as long as one call to a member
// may take, so only a sender held up by a member that does not answer
// (gone, or not yet found gone) sheds copies. Progress is a batch
// delivered, or taken after one that was: a sender whose calls all fail
// still takes a batch each replicaTimeout, which would otherwise keep
// every copy waiting, and its worker with it, for minutes. Dropped at
// once when the queue was full, as before, a busy cluster lost its
// copies by the thousand (docs/evaluation.md).
const replicaStall = replicaTimeout

// replicaRecheck is how often a copy waiting for room checks that the
// sender still makes progress (room, when it comes, wakes it at once). At
// 250 ms, hundreds of copies waiting again and again took 1.4% of a busy
// member's CPU.
const replicaRecheck = time.Second

// replicaBatchCopies bounds the copies taken from the queue at once, and
// so those sent to a member in one call. Batches of 256 (about 15 MB)
// took a busy member over replicaTimeout to store: the call failed and
// its copies counted dropped.
const replicaBatchCopies = 64

// replicaTimeout bounds one Replicate call.
const replicaTimeout = 10 * time.Second

// replicaWarnEvery spaces the warnings about dropped copies.
const replicaWarnEvery = 10 * time.Second

// replicator queues the copies of what this member stored for the other
// holders of the paths. Its methods are safe for concurrent use; enqueue
// blocks while the queue is full and its sender takes copies. A nil
// replicator (no cluster) drops everything silently.
type replicator struct {
	queue chan queuedCopy
	room  *semaphore.Weighted // bytes the queued copies may still take
	// progress is when the sender last made progress (unix ns: a batch
	// delivered, or taken after one that was; delivered says whether
	// the last one was); a copy waits for room until progress is
	// stall old (replicaStall; shorter in tests).
	progress  atomic.Int64
	delivered atomic.Bool
	stall     time.Duration
	// sending ends when the sender is gone (stop): nothing waits for
	// room then.
	sending  context.Context
	stop     context.CancelFunc
	dropped  prometheus.Counter
	log      *slog.Logger
	lastWarn atomic.Int64 // unix ns of the last warning about drops
}

// queuedCopy is a copy waiting to be sent, its size, and what to close
// once it is sent or given up (nil: nothing waits for it).
type queuedCopy struct {
	ec   *owlv1.EpochCopy
	size int64
	done chan struct{}
}

// closedDone stands for a copy nothing has to wait for.
var closedDone = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

func newReplicator(m *metrics, log *slog.Logger) *replicator {
	ctx, cancel := context.WithCancel(context.Background())
	r := &replicator{queue: make(chan queuedCopy, replicaQueueLen), room: semaphore.NewWeighted(replicaQueueBytes),
		stall: replicaStall, sending: ctx, stop: cancel, dropped: m.replicaDropped, log: log}
	r.progress.Store(time.Now().UnixNano())
	r.delivered.Store(true)
	return r
}

// enqueue queues copies to send, waiting for room while the queue is
// full, in number or in bytes; they are dropped when the sender is stuck.
func (r *replicator) enqueue(copies ...*owlv1.EpochCopy) {
	if r == nil {
		return
	}
	for _, ec := range copies {
		r.push(ec, nil)
	}
}

// enqueueWait queues a copy and returns a channel closed once the copy
// has been sent to its members, or given up while the member runs
// (dropped, refused, or no member to send it to); never, for a copy the
// member's stop left unsent.
func (r *replicator) enqueueWait(ec *owlv1.EpochCopy) <-chan struct{} {
	if r == nil {
		return closedDone
	}
	done := make(chan struct{})
	r.push(ec, done)
	return done
}

// push queues one copy, waiting for room in the queue, in number and in
// bytes; it drops the copy when the sender is stuck (closing done) or
// gone (leaving done open: see replicateLoop).
func (r *replicator) push(ec *owlv1.EpochCopy, done chan struct{}) {
	if ec.Result != nil {
		// The worker may change the result later (boundary matching)
		// while the copy waits to be sent.
		ec.Result = proto.CloneOf(ec.Result)
	}
	// A copy larger than the whole bound goes in alone.
	q := queuedCopy{ec, min(int64(proto.Size(ec)), replicaQueueBytes), done}
	if r.room.TryAcquire(q.size) {
		select {
		case r.queue <- q:
			return
		default:
			r.room.Release(q.size)
		}
	}
	if r.waitForRoom(q) {
		return
	}
	if r.sending.Err() != nil {
		// The member is stopping: done stays open, so that the report
		// waiting for the copy is not acknowledged and its probe sends
		// it again to the path's next owner.
		r.drop(1, "the member is stopping (their reports are not acknowledged)", "path", ec.GetPath(), "epoch", ec.GetEpoch())
		return
	}
	r.drop(1, "the replication queue is full and its sender stuck", "stuck_for", r.stall, "path", ec.GetPath(), "epoch", ec.GetEpoch())
	if done != nil {
		close(done)
	}
}

// waitForRoom queues q once the queue has room for it, and says whether
// it did: it gives up once the sender has made no progress for r.stall,
// or is gone.
func (r *replicator) waitForRoom(q queuedCopy) bool {
	for r.sending.Err() == nil && time.Since(time.Unix(0, r.progress.Load())) < r.stall {
		ctx, cancel := context.WithTimeout(r.sending, min(replicaRecheck, r.stall))
		if r.room.Acquire(ctx, q.size) == nil {
			select {
			case r.queue <- q:
				cancel()
				return true
			case <-ctx.Done():
				r.room.Release(q.size)
			}
		}
		cancel()
	}
	return false
}

// enqueueWrite queues the copies of what a store.Write of the epoch
// worker holds (writeCopies) and returns a channel closed once the first
// (the epoch's own result) is sent or given up.
func (r *replicator) enqueueWrite(w store.Write) <-chan struct{} {
	if r == nil {
		return closedDone
	}
	copies := writeCopies(w)
	if len(copies) == 0 {
		return closedDone
	}
	done := r.enqueueWait(copies[0])
	r.enqueue(copies[1:]...)
	return done
}

// drop counts copies not sent, with a warning at most every
// replicaWarnEvery.
func (r *replicator) drop(n int, why string, args ...any) {
	r.dropped.Add(float64(n))
	now, last := time.Now().UnixNano(), r.lastWarn.Load()
	if now-last < int64(replicaWarnEvery) || !r.lastWarn.CompareAndSwap(last, now) {
		return
	}
	r.log.Warn("replication: copies dropped, catch-up repairs the replica after the next change of members",
		append([]any{"copies", n, "why", why}, args...)...)
}

// next waits for a copy and returns it with those queued behind it, up to
// replicaBatchCopies; false when ctx ends first. A batch taken after one
// delivered is progress.
func (r *replicator) next(ctx context.Context) ([]queuedCopy, bool) {
	var batch []queuedCopy
	take := func(q queuedCopy) {
		r.room.Release(q.size)
		batch = append(batch, q)
	}
	defer func() {
		if r.delivered.Load() {
			r.progress.Store(time.Now().UnixNano())
		}
	}()
	select {
	case <-ctx.Done():
		return nil, false
	case q := <-r.queue:
		take(q)
	}
	for len(batch) < replicaBatchCopies {
		select {
		case q := <-r.queue:
			take(q)
		default:
			return batch, true
		}
	}
	return batch, true
}

// sent notes whether a batch was delivered to every member it was for.
func (r *replicator) sent(ok bool) {
	r.delivered.Store(ok)
	if ok {
		r.progress.Store(time.Now().UnixNano())
	}
}

// writeCopies are the copies of what one store.Write of the epoch worker
// holds, one per epoch: the epoch reconciled, and its neighbours whose
// results boundary matching changed. Their sides are used up (done). The
// results are cloned: boundary matching changes them later.
func writeCopies(w store.Write) []*owlv1.EpochCopy {
	var out []*owlv1.EpochCopy
	by := map[store.EpochRef]*owlv1.EpochCopy{}
	get := func(ref store.EpochRef) *owlv1.EpochCopy {
		if ec := by[ref]; ec != nil {
			return ec
		}
		ec := &owlv1.EpochCopy{Path: ref.Path, Epoch: ref.Epoch, Done: true}
		by[ref] = ec
		out = append(out, ec)
		return ec
	}
	for _, r := range w.Results {
		get(store.EpochRef{Path: r.GetPath(), Epoch: r.GetEpoch()}).Result = r // enqueue copies it
	}
	for _, f := range w.Flows {
		ec := get(store.EpochRef{Path: f.Stats.GetPath(), Epoch: f.Stats.GetEpoch()})
		ec.Flows = append(ec.Flows, &owlv1.StoredFlow{Hash: f.Hash, Stats: f.Stats})
	}
	for _, p := range w.LDS {
		ec := get(p.EpochRef)
		ec.LdsPair, ec.LdsUp, ec.LdsDown = p.Pair, p.Up, p.Down
	}
	for _, b := range w.Boundaries {
		get(b.EpochRef).Boundary = b.Data
	}
	for _, s := range w.Sizes {
		// With the copy of the epoch that changed them.
		if i := slices.IndexFunc(out, func(ec *owlv1.EpochCopy) bool { return ec.GetPath() == s.Path }); i >= 0 {
			out[i].Sizes, out[i].SizesSetting = s.Sizes, s.Setting
		}
	}
	return out
}

// sideCopy is the copy of a lone side just stored.
func sideCopy(p store.Pending) *owlv1.EpochCopy {
	return &owlv1.EpochCopy{Path: p.Report.GetPath(), Epoch: p.Report.GetEpoch(),
		Lone: []*owlv1.LoneSide{{Probe: p.Probe, Received: timestamppb.New(p.Received), Report: p.Report}}}
}

// replicaTargets are the members a copy goes to: the holders of its path
// other than this member. Results go to both (this member may have lost
// the path meanwhile: the new holders get them); lone sides, and the
// word that they are gone, only from the owner to the second holder, so
// that they never touch the copies another owner sent.
func (c *Collector) replicaTargets(ec *owlv1.EpochCopy) []cluster.Member {
	hs := c.cl.Holders(ec.GetPath(), 2)
	if ec.GetResult() == nil {
		if len(hs) == 2 && hs[0].Self {
			return hs[1:]
		}
		return nil
	}
	var out []cluster.Member
	for _, m := range hs {
		if !m.Self {
			out = append(out, m)
		}
	}
	return out
}

// replicateLoop sends the queued copies to their members until ctx ends.
// A copy's done channel is closed once it is delivered, or given up
// while the member runs (its report is then acknowledged: catch-up
// repairs the replica); the copies still queued when the member stops,
// or whose batch its stop cut short, keep it open, and their reports are
// not acknowledged: a report then lives on in its probe, which sends it
// to the path's next owner, not on this member's disk alone.
func (c *Collector) replicateLoop(ctx context.Context) {
	defer c.repl.stop() // copies waiting for room give up, their reports unacknowledged
	for {
		batch, ok := c.repl.next(ctx)
		if !ok {
			return
		}
		copies := make([]*owlv1.EpochCopy, len(batch))
		for i, q := range batch {
			copies[i] = q.ec
		}
		delivered := c.sendCopies(ctx, copies)
		if !c.repl.settle(batch, delivered, ctx.Err() != nil) {
			return
		}
	}
}

// settle ends the waits of a batch sent (delivered, or given up while
// the member runs) and says so; a batch the member's stop cut short
// leaves them (false): its reports stay unacknowledged, for the path's
// next owner.
func (r *replicator) settle(batch []queuedCopy, delivered, stopping bool) bool {
	r.sent(delivered)
	if !delivered && stopping {
		return false
	}
	for _, q := range batch {
		if q.done != nil {
			close(q.done)
		}
	}
	return true
}

// sendCopies sends a batch of copies, grouped by member, in messages of
// at most half the message bound each, and says whether every member
// took its copies.
func (c *Collector) sendCopies(ctx context.Context, batch []*owlv1.EpochCopy) bool {
	var order []cluster.Member
	groups := map[string][]*owlv1.EpochCopy{}
	for _, ec := range batch {
		for _, m := range c.replicaTargets(ec) {
			if groups[m.Name] == nil {
				order = append(order, m)
			}
			groups[m.Name] = append(groups[m.Name], ec)
		}
	}
	// Members are sent to at once: one that is down (and waited for up
	// to replicaTimeout) holds up no other.
	var wg sync.WaitGroup
	var failed atomic.Bool
	for _, m := range order {
		wg.Go(func() {
			for _, chunk := range chunks(groups[m.Name], c.cfg.MaxMessageBytes/2) {
				if !c.sendChunk(ctx, m, chunk) {
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return !failed.Load()
}

// chunks splits copies into runs of at most maxBytes each (a copy larger
// than that alone).
func chunks(copies []*owlv1.EpochCopy, maxBytes int) [][]*owlv1.EpochCopy {
	var out [][]*owlv1.EpochCopy
	var cur []*owlv1.EpochCopy
	size := 0
	for _, ec := range copies {
		n := proto.Size(ec)
		if len(cur) > 0 && size+n > maxBytes {
			out, cur, size = append(out, cur), nil, 0
		}
		cur, size = append(cur, ec), size+n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// sendChunk sends one Replicate call and says whether the member took
// the copies; those it did not are dropped.
func (c *Collector) sendChunk(ctx context.Context, m cluster.Member, chunk []*owlv1.EpochCopy) bool {
	call, cancel := context.WithTimeout(ctx, replicaTimeout)
	defer cancel()
	conn, err := c.peers.get(m.GRPC)
	if err == nil {
		// A member back from a restart takes the copies as soon as the
		// connection is up again, within replicaTimeout.
		_, err = owlv1.NewClusterServiceClient(conn).Replicate(call, &owlv1.ReplicateRequest{From: c.cl.Name(), Epochs: chunk}, grpc.WaitForReady(true))
	}
	if err != nil && ctx.Err() != nil {
		c.repl.drop(len(chunk), "the member is stopping (their reports are not acknowledged)", "member", m.Name)
		return false
	}
	if err != nil {
		c.repl.drop(len(chunk), "a member did not take them", "member", m.Name, "err", err)
		return false
	}
	c.m.replicated.Add(float64(len(chunk)))
	return true
}
