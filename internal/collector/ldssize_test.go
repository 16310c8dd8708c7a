package collector

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/lds"

	"google.golang.org/protobuf/proto"
)

// ldsPair builds the two sides' sketches, at cols cells per row, of large
// flows of 600 packets and small ones of 3, all delayed by delayNS. It
// returns their wire forms and the heaviest flow's key.
func ldsPair(t testing.TB, cfg lds.Config, cols, large, small int, delayNS int64) (up, down []byte, heavy capture.FlowKey) {
	t.Helper()
	return lossyLDSPair(t, cfg, cols, large, small, delayNS, 0)
}

// lossyLDSPair is ldsPair with every lossEvery-th packet (0: none) left
// out of the downstream sketch, as a loss reconciliation did not repair.
func lossyLDSPair(t testing.TB, cfg lds.Config, cols, large, small int, delayNS int64, lossEvery int) (up, down []byte, heavy capture.FlowKey) {
	t.Helper()
	cfg.Cols = cols
	u, err := lds.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := lds.New(cfg)
	r := rand.New(rand.NewPCG(uint64(large), uint64(small)))
	seq := 0
	for i := range large + small {
		f := capture.FlowKey{Src: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Dst: netip.MustParseAddr("10.1.0.1"), SrcPort: 1, DstPort: 2, Proto: 6}
		if i == 0 {
			heavy = f
		}
		n := 3
		if i < large {
			n = 600
		}
		h := f.Hash(cfg.Seed)
		for range n {
			id, ts := r.Uint64(), r.Int64N(900_000_000)
			u.Insert(h, id, ts, 1)
			if seq++; lossEvery == 0 || seq%lossEvery != 0 {
				d.Insert(h, id, ts+delayNS, 1)
			}
		}
	}
	up, _ = u.MarshalBinary()
	down, _ = d.MarshalBinary()
	return up, down, heavy
}

// ldsSizes forwards the LDS sizes a probe's stream is told, and its acks.
func ldsSizes(st owlv1.ProbeService_ConnectClient) (sizes chan *owlv1.LDSSize, acks chan *owlv1.Ack) {
	sizes, acks = make(chan *owlv1.LDSSize, 16), make(chan *owlv1.Ack, 16)
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				return
			}
			if s := m.GetLdsSize(); s != nil && s.GetPath() == "p" {
				sizes <- s
			}
			if a := m.GetAck(); a != nil {
				acks <- a
			}
		}
	}()
	return sizes, acks
}

func TestLDSSizeFollowsFlows(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	conn := serve(t, c)
	st := [2]owlv1.ProbeService_ConnectClient{probeStream(t, conn, "a", cfg.Params), probeStream(t, conn, "b", cfg.Params)}
	var sizes [2]chan *owlv1.LDSSize
	var acks [2]chan *owlv1.Ack
	for i := range st {
		sizes[i], acks[i] = ldsSizes(st[i])
	}
	// told returns the size both probes were told next (0: none within
	// wait), and checks that it starts ldsLead epochs past the newest
	// reported (both sides change together).
	newest := int64(0)
	var rows uint32 // the rows told with the last size
	told := func(wait time.Duration) uint32 {
		var got [2]*owlv1.LDSSize
		for i := range got {
			select {
			case got[i] = <-sizes[i]:
			case <-time.After(wait):
			}
		}
		if !proto.Equal(got[0], got[1]) {
			t.Fatalf("the probes were told %v and %v", got[0], got[1])
		}
		if got[0] != nil && got[0].GetFromEpoch() != newest+sizeLead {
			t.Errorf("a size from epoch %d, after epoch %d", got[0].GetFromEpoch(), newest)
		}
		rows = got[0].GetRows()
		return got[0].GetCols()
	}
	lossEvery := 0
	send := func(e int64, cols, large, small int) {
		newest = e
		ub, db, heavy := lossyLDSPair(t, cfg.Params.LDS, cols, large, small, 1000, lossEvery)
		up, down := ldaPair(t, cfg.Params.LDA, 100, 1000, uint64(e))
		for i, r := range []*owlv1.EpochReport{report("p", e, owlv1.Role_ROLE_UPSTREAM, up), report("p", e, owlv1.Role_ROLE_DOWNSTREAM, down)} {
			r.Lds, r.Seq = [2][]byte{ub, db}[i], uint64(e)
			r.TopFlows = []*owlv1.TopFlow{{Flow: netpath.FlowToProto(heavy), Packets: 600}}
			if err := st[i].Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}); err != nil {
				t.Fatal(err)
			}
		}
		<-acks[0]
		<-acks[1]
		waitResult(t, c, "p", e, anyResult)
	}
	// Five large flows among 200 small ones: 2·5·4/ε^(1/16) = 54 cells
	// for the large flows, 2·3,600·4/128 = 225 for the packets: 256, once
	// 8 epochs said so.
	for e := int64(10); e < 17; e++ {
		send(e, 4096, 5, 200)
	}
	if got := told(200 * time.Millisecond); got != 0 {
		t.Fatalf("told %d cells per row after 7 epochs", got)
	}
	send(17, 4096, 5, 200)
	if got := told(2 * time.Second); got != 256 || rows != 0b1100 {
		t.Fatalf("few large flows: told %d cells per row, rows %04b, want 256 and the two densest", got, rows)
	}
	// 300 large flows fill a row of 256: back to the most, 4,096, at once.
	send(18, 256, 300, 0)
	if got := told(2 * time.Second); got != 4096 {
		t.Fatalf("many large flows: told %d cells per row, want 4096", got)
	}
	// 60 large flows: 2·60·5.33 = 640 cells, 1,024 by the power of two,
	// but the last 8 epochs still had 300 (in a sketch too small to tell):
	// nothing changes.
	send(19, 4096, 60, 100)
	if got := told(time.Second); got != 0 {
		t.Fatalf("told %d cells per row while an epoch of the last 8 had more flows", got)
	}
	c.paths["p"].mu.Lock()
	cols := c.paths["p"].ldsCols
	c.paths["p"].mu.Unlock()
	if pc := c.pathConfig("a"); cols != 4096 || pc.GetPaths()[0].GetLdsCols() != 4096 || pc.GetPaths()[0].GetLdsRows() != 0b1100 {
		t.Errorf("path state %d cells per row, PathConfig %v", cols, pc.GetPaths())
	}
	// One packet in 100 lost and not repaired: twice that, over a 600-packet
	// flow's 150 a cell, spoils rows sampling more than 1/3. The row
	// sampling 1/8 joins at once, the cells staying.
	lossEvery = 100
	send(20, 4096, 60, 100)
	if got := told(2 * time.Second); got != 4096 || rows != 0b1110 {
		t.Fatalf("unrepaired loss: told %d cells per row, rows %04b; want 4096 and the rows sampling 1/8 to 1", got, rows)
	}
}

func TestLDSShapeMismatch(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	ub, _, heavy := ldsPair(t, cfg.Params.LDS, 4096, 3, 10, 5000)
	_, db, _ := ldsPair(t, cfg.Params.LDS, 2048, 3, 10, 5000)
	up, down := ldaPair(t, cfg.Params.LDA, 100, 5000, 3)
	ru := report("p", 4, owlv1.Role_ROLE_UPSTREAM, up)
	ru.Lds, ru.TopFlows = ub, []*owlv1.TopFlow{{Flow: netpath.FlowToProto(heavy), Packets: 600}}
	rd := report("p", 4, owlv1.Role_ROLE_DOWNSTREAM, down)
	rd.Lds = db
	if err := c.report("a", ru); err != nil {
		t.Fatal(err)
	}
	if err := c.report("b", rd); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, c, "p", 4, anyResult)
	if !strings.Contains(r.GetFlowsNote(), "4096 and 2048") || r.GetMeanNs() != 5000 {
		t.Errorf("result of sketches of two shapes: note %q, mean %v", r.GetFlowsNote(), r.GetMeanNs())
	}
	n := 0
	err := c.store.LDSPairs("p", 0, 100, func(store.LDSPair) bool { n++; return true })
	if err != nil || n != 0 {
		t.Errorf("stored %d sketch pairs of two shapes (%v)", n, err)
	}
	fs, err := queryService{c: c}.GetFlowStats(context.Background(), &owlv1.GetFlowStatsRequest{Path: "p", Flow: netpath.FlowToProto(heavy)})
	if err != nil || len(fs.GetStats()) != 0 {
		t.Errorf("per-flow results of the epoch: %v, %v", fs, err)
	}
	// A sketch larger than the parameters allow is refused when it comes.
	big, _, _ := ldsPair(t, cfg.Params.LDS, 8192, 1, 1, 1)
	ru = report("p", 5, owlv1.Role_ROLE_UPSTREAM, up)
	ru.Lds = big
	if err := c.report("a", ru); err == nil || !strings.Contains(err.Error(), "exceeds params.lds.cols") {
		t.Errorf("an LDS of 8192 cells per row: %v", err)
	}
}

// TestLDSDamagedCells: a sketch whose shape is sound and whose cells are
// not is taken when it comes (only its shape is checked then); the epoch
// gets its path result and, in place of per-flow results, a note.
func TestLDSDamagedCells(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	ub, db, heavy := ldsPair(t, cfg.Params.LDS, 1024, 3, 10, 5000)
	l, _ := lds.Decode(db)
	l.SetPacked(true)
	db, _ = l.MarshalBinary()
	if _, err := lds.Shape(db[:len(db)-1]); err != nil {
		t.Fatalf("shape of a sketch one byte short: %v", err)
	}
	if _, err := lds.Check(db[:len(db)-1]); err == nil {
		t.Fatal("a sketch one byte short decodes")
	}
	up, down := ldaPair(t, cfg.Params.LDA, 100, 5000, 3)
	ru := report("p", 4, owlv1.Role_ROLE_UPSTREAM, up)
	ru.Lds, ru.TopFlows = ub, []*owlv1.TopFlow{{Flow: netpath.FlowToProto(heavy), Packets: 600}}
	rd := report("p", 4, owlv1.Role_ROLE_DOWNSTREAM, down)
	rd.Lds = db[:len(db)-1]
	if err := c.report("a", ru); err != nil {
		t.Fatal(err)
	}
	if err := c.report("b", rd); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, c, "p", 4, anyResult)
	if !strings.Contains(r.GetFlowsNote(), "did not decode") || r.GetMeanNs() != 5000 {
		t.Errorf("result with a damaged sketch: note %q, mean %v", r.GetFlowsNote(), r.GetMeanNs())
	}
	// A body too short for its cells is refused when it comes.
	rd = report("p", 5, owlv1.Role_ROLE_DOWNSTREAM, down)
	rd.Lds = db[:40]
	if err := c.report("b", rd); err == nil {
		t.Error("a sketch too short for its cells was taken")
	}
}

// TestRDASizeFollowsDifferences: a path's RDA starts at params.rda.buckets
// and, once 8 epochs' set differences need no more than rda.min_buckets,
// shrinks to it (never on a path's first epochs, often partial: a path
// sized to them decoded later epochs only by rebuilding from the probes'
// caches, which a failover may have lost), then grows at once for a
// large difference.
func TestRDASizeFollowsDifferences(t *testing.T) {
	cfg := testConfig(t)
	cfg.Params.RDA.Buckets, cfg.RDA.MinBuckets = 1024, 0 // 16: sampled
	c := newTest(t, cfg)
	defer c.Close()
	ps := c.paths["p"]
	size := func() int {
		ps.mu.Lock()
		defer ps.mu.Unlock()
		return ps.rdaBuckets
	}
	if got := size(); got != 1024 {
		t.Fatalf("starts at %d buckets", got)
	}
	c.worker.noteSetDifference(ps, reconcile.Difference{Lost: make([]uint64, 2)})
	for i := 1; i < 7; i++ {
		c.worker.noteSetDifference(ps, reconcile.Difference{Lost: make([]uint64, 5)})
	}
	if got := size(); got != 1024 {
		t.Errorf("after 7 epochs: %d buckets, want still 1024", got)
	}
	c.worker.noteSetDifference(ps, reconcile.Difference{Lost: make([]uint64, 5)})
	if got := size(); got != 16 {
		t.Errorf("after 8 epochs of differences of up to 5: %d buckets, want the floor, 16", got)
	}
	c.worker.noteSetDifference(ps, reconcile.Difference{Lost: make([]uint64, 400)})
	if got := size(); got != 1000 {
		t.Errorf("after a difference of 400: %d buckets, want 1000", got)
	}
}

// The LDA follows the same differences: params.lda.rows until 8 epochs
// are seen, then a power of two of at least twice the largest difference
// and rda.lda_min_rows, grown at once; and not at all with lda_min_rows 0.
func TestLDARowsFollowDifferences(t *testing.T) {
	for _, minRows := range []int{32, 0} {
		cfg := testConfig(t)
		cfg.RDA.LDAMinRows = minRows
		c := newTest(t, cfg)
		ps := c.paths["p"]
		rows := func() int {
			ps.mu.Lock()
			defer ps.mu.Unlock()
			return ps.ldaRows
		}
		full := cfg.Params.LDA.Rows
		if got := rows(); got != full {
			t.Fatalf("starts at %d rows, want params.lda.rows %d", got, full)
		}
		for i := 0; i < 7; i++ {
			c.worker.noteSetDifference(ps, reconcile.Difference{Lost: make([]uint64, 5)})
		}
		if got := rows(); got != full {
			t.Errorf("after 7 epochs: %d rows, want still %d", got, full)
		}
		want := func(rows int) int {
			if minRows == 0 {
				return full
			}
			return rows
		}
		for _, c0 := range []struct{ diff, rows int }{{5, want(32)}, {40, want(128)}, {400, want(full)}} {
			c.worker.noteSetDifference(ps, reconcile.Difference{Lost: make([]uint64, c0.diff)})
			if got := rows(); got != c0.rows {
				t.Errorf("lda_min_rows %d, after a difference of %d: %d rows, want %d", minRows, c0.diff, got, c0.rows)
			}
		}
		c.Close()
	}
}

// TestLDSOffWhileTheSampleCovers: with flows.lds "auto", a path's LDS is
// off while a flow of flows.lds_large_packets gets flows.sample_min_delays
// sampled delays and the top flows name their sampled packets, on again
// when the rate falls below that or they stop naming them; an epoch with
// no sampled packet changes nothing; "always" keeps it on. The probes
// are told (LDSSize.off), and so is a probe that connects later
// (PathAssignment.lds_off).
func TestLDSOffWhileTheSampleCovers(t *testing.T) {
	for _, mode := range []string{ldsAuto, ldsAlways} {
		cfg := testConfig(t)
		cfg.Flows.LDS = mode
		c := newTest(t, cfg)
		conn := serve(t, c)
		sizes, _ := ldsSizes(probeStream(t, conn, "a", cfg.Params))
		ps := c.paths["p"]
		off := func() bool {
			ps.mu.Lock()
			defer ps.mu.Unlock()
			return ps.ldsOff
		}
		auto := mode == ldsAuto
		for i, step := range []struct {
			packets  uint64
			sampling flowSampling
			off      bool
		}{
			{1000, samplingNamed, auto},   // rate 1: 128 delays
			{10_000, samplingNamed, auto}, // 1/8: 16
			{10_000, samplingNone, false}, // an older probe: no names
			{10_000, samplingNamed, auto},
			{10_000, samplingUnknown, auto}, // nothing sampled: as it was
			{20_000, samplingNamed, false},  // 1/16: 8
			{0, samplingUnknown, false},
		} {
			was := off()
			c.worker.noteSampleRate(ps, step.packets, step.sampling)
			if got := off(); got != step.off {
				t.Fatalf("%s, step %d (%d packets, sampling %d): off %t, want %t", mode, i, step.packets, step.sampling, got, step.off)
			}
			if step.off == was {
				continue
			}
			select {
			case m := <-sizes:
				if m.GetOff() != step.off {
					t.Errorf("%s, step %d: told off %t", mode, i, m.GetOff())
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s, step %d: the probe was not told", mode, i)
			}
			if a := c.pathConfig("b").GetPaths()[0]; a.GetLdsOff() != step.off {
				t.Errorf("%s, step %d: a new probe's assignment says lds_off %t", mode, i, a.GetLdsOff())
			}
		}
		c.Close()
	}
}
