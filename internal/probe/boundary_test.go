package probe

import (
	"maps"
	"slices"
	"testing"

	"github.com/gopacket/gopacket/layers"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/params"
)

// TestBoundaryCopies: a packet seen in the last 10 ms of an epoch and
// again in the first 10 ms of the next is reported as a boundary copy of
// the next; one seen once, one whose copies are farther from the
// boundary, and one whose first copy came two epochs before are not.
func TestBoundaryCopies(t *testing.T) {
	p := params.Default()
	l, base := int64(p.Epoch.Length), p.Epoch.StartNS(100)
	ms := int64(1e6)
	pkt := func(port uint16) []byte { return frame(t, "10.0.0.1", "10.0.0.2", port, 2000) }
	a, b, c, d, e, f := pkt(1000), pkt(1001), pkt(1002), pkt(1003), pkt(1004), pkt(1005)
	frames := []capture.Frame{
		{Data: c, TimeNS: base + l/2},        // C in the middle of epoch 100
		{Data: a, TimeNS: base + l - 2*ms},   // A in epoch 100's tail
		{Data: d, TimeNS: base + l - ms},     // D in epoch 100's tail
		{Data: a, TimeNS: base + l + ms},     // A again in 101's head: a copy
		{Data: b, TimeNS: base + l + 2*ms},   // B once
		{Data: c, TimeNS: base + l + 3*ms},   // C again, its first copy 497 ms before the boundary
		{Data: e, TimeNS: base + 2*l - ms},   // E in 101's tail
		{Data: d, TimeNS: base + 2*l + ms},   // D again, its first copy two epochs before
		{Data: e, TimeNS: base + 2*l + ms/2}, // E again in 102's head: a copy
		{Data: f, TimeNS: base + 3*l - ms},   // F in 102's tail (where 100's was kept)
		{Data: f, TimeNS: base + 3*l + ms},   // F again in 103's head: a copy
		{Data: a, TimeNS: base + 3*l + 2*ms}, // A a third time: 100's tail is gone
	}
	slices.SortStableFunc(frames, func(x, y capture.Frame) int { return int(x.TimeNS - y.TimeNS) })
	dec, _ := capture.NewDecoder(layers.LinkTypeEthernet, p.Identity)
	id := func(b []byte) uint64 {
		var pk capture.Packet
		if err := dec.Decode(b, 0, &pk); err != nil {
			t.Fatal(err)
		}
		return pk.ID
	}
	want := map[int64][]uint64{101: {id(a)}, 102: {id(e)}, 103: {id(f)}}

	for _, workers := range []int{1, 2} {
		got := map[int64][]uint64{}
		clock := func(int64, int64) *owlv1.ClockStatus { return &owlv1.ClockStatus{} }
		rep := &reporter{caches: newCacheStore(8, 1<<20), topFlows: 5, clock: clock, grid: p.Epoch,
			emit: func(r *owlv1.EpochReport) {
				if len(r.GetBoundaryCopies()) > 0 {
					got[r.GetEpoch()] = append(got[r.GetEpoch()], r.GetBoundaryCopies()...)
				}
			}}
		m := newMerger(workers, p.Epoch, p.Sample.MaxEntries, rep.report)
		set, err := newPathSet(&owlv1.PathConfig{Paths: []*owlv1.PathAssignment{
			{Path: &owlv1.Path{Name: "all", Upstream: "a", Downstream: "b"}, Role: owlv1.Role_ROLE_DOWNSTREAM}}})
		if err != nil {
			t.Fatal(err)
		}
		var stats counters
		var pls []*pipeline
		for w := range workers {
			pl, err := newPipeline(p, 1000, 5, func(ce closedEpoch) { m.add(w, ce) }, &stats)
			if err != nil {
				t.Fatal(err)
			}
			_ = pl.setLink(layers.LinkTypeEthernet)
			pl.setPaths(set)
			pls = append(pls, pl)
		}
		for _, f := range frames {
			// Copies of a packet go to one worker, as fanout by flow
			// sends them; the workers' epochs are merged.
			var pk capture.Packet
			_ = dec.Decode(f.Data, 0, &pk)
			pls[int(pk.Flow.SrcPort)%workers].frame(f.Data, f.TimeNS)
		}
		for w, pl := range pls {
			pl.flush()
			m.watermark(w, base+10*l)
		}
		if !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%d workers: boundary copies by epoch %v, want %v", workers, got, want)
		}
	}
}
