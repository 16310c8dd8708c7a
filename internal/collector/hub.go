package collector

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// watchBuffer is how many results a watcher may fall behind before it is
// cut off.
const watchBuffer = 1024

// hub hands new results to the watchers of their path. A send never
// blocks: a watcher that does not keep up is cut off.
type hub struct {
	dropped prometheus.Counter

	watchersMu sync.Mutex                       // guards watchers
	watchers   map[chan *owlv1.PathStats]string // channel → path filter ("" for all)
}

func newHub(dropped prometheus.Counter) *hub {
	return &hub{dropped: dropped, watchers: map[chan *owlv1.PathStats]string{}}
}

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

// notify sends a result to the watchers of its path.
func (h *hub) notify(res *owlv1.PathStats) {
	h.watchersMu.Lock()
	defer h.watchersMu.Unlock()
	for ch, path := range h.watchers {
		if path != "" && path != res.GetPath() {
			continue
		}
		h.send(ch, res)
	}
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
