package collector

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// TestNotifyCopies: a result is copied for the watchers of its path (or
// of every path), who then do not see the worker's later changes, and
// not copied at all while no one watches it.
func TestNotifyCopies(t *testing.T) {
	h := newHub(prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"}), 4)
	res := &owlv1.PathStats{Path: "a", Epoch: 7, MeanNs: 100}
	if n := testing.AllocsPerRun(100, func() { h.notify(res) }); n != 0 {
		t.Errorf("no watcher: %v allocations a result, want 0", n)
	}
	other := h.watch("b")
	if n := testing.AllocsPerRun(100, func() { h.notify(res) }); n != 0 {
		t.Errorf("a watcher of another path: %v allocations a result, want 0", n)
	}
	mine, all := h.watch("a"), h.watch("")
	h.notify(res)
	res.MeanNs = 200 // boundary matching changes it afterwards
	for name, ch := range map[string]chan *owlv1.PathStats{"the path's": mine, "every path's": all} {
		select {
		case got := <-ch:
			if got == res || got.GetMeanNs() != 100 || !proto.Equal(got, &owlv1.PathStats{Path: "a", Epoch: 7, MeanNs: 100}) {
				t.Errorf("%s watcher got %v (the result itself: %v), want a copy as notified", name, got, got == res)
			}
		default:
			t.Errorf("%s watcher got nothing", name)
		}
	}
	if len(other) != 0 {
		t.Errorf("the other path's watcher got %d results", len(other))
	}
}
