package collector

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// watchBuffer is how many results a watcher may fall behind before it is
// cut off.
const watchBuffer = 1024

// hub hands new results to the watchers of their path. A send never
// blocks: a watcher that does not keep up is cut off. At most max
// watchers are admitted at once.
type hub struct {
	dropped prometheus.Counter
	max     int64
	// open counts the admitted watchers, cut off or not: a stream whose
	// reader does not read stays open (its send blocks on gRPC's flow
	// control) after the hub has cut it off, and holds its buffers.
	open atomic.Int64

	watchersMu sync.Mutex                       // guards watchers
	watchers   map[chan *owlv1.PathStats]string // channel → path filter ("" for all)
}

func newHub(dropped prometheus.Counter, max int) *hub {
	return &hub{dropped: dropped, max: int64(max), watchers: map[chan *owlv1.PathStats]string{}}
}

// admit takes a place for a new watcher; false when all max are taken.
// Each place taken is given back with leave.
func (h *hub) admit() bool {
	for {
		n := h.open.Load()
		if n >= h.max {
			return false
		}
		if h.open.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// leave gives back a watcher's place.
func (h *hub) leave() { h.open.Add(-1) }

// watch subscribes to new results of a path ("" for all).
func (h *hub) watch(path string) chan *owlv1.PathStats {
	ch := make(chan *owlv1.PathStats, watchBuffer)
	h.watchersMu.Lock()
	h.watchers[ch] = path
	h.watchersMu.Unlock()
	return ch
}

// unwatch ends a subscription.
func (h *hub) unwatch(ch chan *owlv1.PathStats) {
	h.watchersMu.Lock()
	defer h.watchersMu.Unlock()
	if _, ok := h.watchers[ch]; ok {
		delete(h.watchers, ch)
		close(ch)
	}
}

// notify sends a result to the watchers of its path: a copy, which they
// read while the worker may change the result (boundary matching), made
// only when someone watches, and outside the lock that every worker's
// results take.
func (h *hub) notify(res *owlv1.PathStats) {
	if !h.watched(res.GetPath()) {
		return
	}
	res = proto.CloneOf(res)
	h.watchersMu.Lock()
	defer h.watchersMu.Unlock()
	for ch, path := range h.watchers {
		if path != "" && path != res.GetPath() {
			continue
		}
		h.send(ch, res)
	}
}

// watched says whether anyone watches path's results.
func (h *hub) watched(path string) bool {
	h.watchersMu.Lock()
	defer h.watchersMu.Unlock()
	for _, p := range h.watchers {
		if p == "" || p == path {
			return true
		}
	}
	return false
}

// notifyOne hands one watcher a result another collector computed.
func (h *hub) notifyOne(ch chan *owlv1.PathStats, res *owlv1.PathStats) {
	h.watchersMu.Lock()
	defer h.watchersMu.Unlock()
	if _, ok := h.watchers[ch]; ok {
		h.send(ch, res)
	}
}

// send hands a watcher a result without blocking; a watcher whose buffer
// is full sees its channel closed and ends its stream with an error.
// h.watchersMu is held.
func (h *hub) send(ch chan *owlv1.PathStats, res *owlv1.PathStats) {
	select {
	case ch <- res:
	default:
		close(ch)
		delete(h.watchers, ch)
		h.dropped.Inc()
	}
}
