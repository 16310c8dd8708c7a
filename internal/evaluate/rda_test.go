package evaluate

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// TestRDAPolicyOnCaptures runs the collector's reconciliation policy
// (reconcile.Epoch) offline on the bundled trace with loss, reordering
// and duplicates, starting from RDAs far too small for the set
// difference: late binding must grow them, and every epoch's mean must
// then be exact against the ground truth (packets delivered within the
// epoch; the boundary crossers are left to the collector's matching).
func TestRDAPolicyOnCaptures(t *testing.T) {
	link, frames, ep := bundled(t)
	id := capture.DefaultIdentityConfig()
	tr, up, down := impairedPackets(t, link, frames, id, ep, sim.Impairment{Delay: weibull(), Loss: 0.01, Reorder: 0.01, ReorderExtra: time.Millisecond,
		Duplicate: 0.002, DuplicateGap: 100 * time.Microsecond, Seed: 3})
	cfg := RDAConfig{RDA: rda.Config{Banks: 2, Buckets: 32, Seed: 9, Check: true},
		Limits: reconcile.Limits{MinBuckets: 32, MaxBuckets: 1 << 16, MaxRebuilds: 4}}
	rows, err := CompareRDA(context.Background(), up, down, sim.EpochTruths(tr.Truth, ep, 0), ep, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	_ = WriteRDATable(&b, rows)
	t.Logf("\n%s", b.String())
	checked := 0
	for _, r := range rows {
		if r.Truth.Sent < 10_000 {
			continue
		}
		checked++
		switch {
		case r.Err != nil:
			t.Errorf("epoch %d: %v", r.Truth.Epoch, r.Err)
		case !r.Out.Diff.Complete() || r.Out.Rebuilds == 0:
			t.Errorf("epoch %d: decoded %t after %d rebuilds", r.Truth.Epoch, r.Out.Diff.Complete(), r.Out.Rebuilds)
		case r.MeanRelErr() > 1e-9:
			t.Errorf("epoch %d: mean %v, truth %v", r.Truth.Epoch, r.Out.Estimate.MeanNS, r.Truth.MeanNS)
		case r.Out.Lost != r.Truth.Lost+r.Truth.Crossed:
			t.Errorf("epoch %d: %d lost, truth %d lost and %d crossed", r.Truth.Epoch, r.Out.Lost, r.Truth.Lost, r.Truth.Crossed)
		}
	}
	if checked < 2 {
		t.Fatalf("only %d epochs of 10⁴ packets", checked)
	}
}

// impairedPackets sends frames across a simulated path and returns the
// trace and both points' packets per epoch.
func impairedPackets(t *testing.T, link layers.LinkType, frames []sim.Frame, id capture.IdentityConfig, ep epoch.Config, m sim.Impairment) (tr *sim.Trace, up, down Packets) {
	t.Helper()
	tr, err := sim.Impair(link, frames, id, m)
	if err == nil {
		up, err = BuildPackets(link, tr.Up, id, ep)
	}
	if err == nil {
		down, err = BuildPackets(link, tr.Down, id, ep)
	}
	if err != nil {
		t.Fatal(err)
	}
	return tr, up, down
}

// TestBoundaryCopies: the offline evaluator names the boundary copies a
// probe would: a packet in the last 10 ms of an epoch and again in the
// first 10 ms of the next; not one seen once, nor one whose copies are
// farther from the boundary.
func TestBoundaryCopies(t *testing.T) {
	ep := epoch.DefaultConfig()
	ms := int64(time.Millisecond)
	pkt := func(id uint64, off int64) reconcile.Packet {
		return reconcile.Packet{ID: id, Entry: reconcile.Entry{OffsetNS: off}}
	}
	p := Packets{
		1: {pkt(1, 1000*ms-2*ms), pkt(2, 500*ms), pkt(4, 1000*ms-ms)},
		2: {pkt(1, ms), pkt(2, 3*ms), pkt(3, 2*ms), pkt(4, 11*ms)},
	}
	got := BoundaryCopies(p, ep)
	if len(got) != 1 || !slices.Equal(got[2], []uint64{1}) {
		t.Errorf("boundary copies %v, want epoch 2: [1]", got)
	}
}
