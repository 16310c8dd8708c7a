package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/synopsis/colate"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// BenchmarkEpochCloseToResult measures, on loopback TCP with the store on
// disk, the time from a probe sending the second side of an epoch (the
// moment that epoch is closed at both ends) to the result reaching a
// WatchPathStats client, i.e. being stored and queryable. It also reports
// the bytes one side sends per path and epoch for 5,000 packets.
func BenchmarkEpochCloseToResult(b *testing.B) {
	cfg := testConfig(b)
	cfg.ReadyFile = filepath.Join(b.TempDir(), "ready")
	c := newTest(b, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var addrs Addrs
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if bs, err := os.ReadFile(cfg.ReadyFile); err == nil && json.Unmarshal(bs, &addrs) == nil {
			break
		}
	}
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	watch, err := owlv1.NewQueryServiceClient(conn).WatchPathStats(ctx, &owlv1.WatchPathStatsRequest{Path: "p"})
	if err != nil {
		b.Fatal(err)
	}
	a := probeStream(b, conn, "a", cfg.Params)
	d := probeStream(b, conn, "b", cfg.Params)
	up, down := ldaPair(b, cfg.Params.LDA, 5000, 90_000, 1)
	size := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r := report("p", int64(i), owlv1.Role_ROLE_UPSTREAM, up)
		if err := a.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}); err != nil {
			b.Fatal(err)
		}
		nextAck(b, a)
		m := &owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: report("p", int64(i), owlv1.Role_ROLE_DOWNSTREAM, down)}}
		size = proto.Size(m)
		b.StartTimer()
		if err := d.Send(m); err != nil {
			b.Fatal(err)
		}
		if _, err := watch.Recv(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		nextAck(b, d)
		b.StartTimer()
	}
	b.ReportMetric(float64(size), "report_bytes")
}

// rdaPair builds both sides' RDAs and caches of an epoch: n common packets,
// lost packets only upstream, extra packets only downstream.
func rdaPair(cfg rda.Config, n, lost, extra int) (up, down []byte, upTS, downTS map[uint64]int64) {
	r := rand.New(rand.NewPCG(9, 9))
	u, _ := rda.New(cfg)
	d, _ := rda.New(cfg)
	upTS, downTS = map[uint64]int64{}, map[uint64]int64{}
	for i := 0; i < n+lost; i++ {
		id, ts := r.Uint64(), r.Int64N(900_000_000)
		u.Insert(id, ts)
		upTS[id] = ts
		if i < n {
			d.Insert(id, ts+90_000)
			downTS[id] = ts + 90_000
		}
	}
	for i := 0; i < extra; i++ {
		id, ts := r.Uint64(), r.Int64N(100_000)
		d.Insert(id, ts)
		downTS[id] = ts
	}
	up, _ = u.MarshalBinary()
	down, _ = d.MarshalBinary()
	return up, down, upTS, downTS
}

// answer plays a probe's side of the repair protocol on a stream: it
// answers fetches from ts (one copy of each packet) and passes
// acknowledgements to acks.
func answer(st owlv1.ProbeService_ConnectClient, ts map[uint64]int64, acks chan<- *owlv1.Ack) {
	copies := make(map[uint64][]int64, len(ts))
	for id, off := range ts {
		copies[id] = []int64{off}
	}
	answerCaches(st, copies, acks)
}

// BenchmarkRepairRoundTrip measures a whole RDA reconciliation on loopback
// TCP with the store on disk: from the second side's report of an epoch
// (5,000 packets, 50 lost, 50 extra, RDA 2 × 1024 buckets) to the repaired,
// exact result reaching a watcher. It includes peeling, two timestamp
// fetches from the probes, repair, estimation and storage.
func BenchmarkRepairRoundTrip(b *testing.B) {
	cfg := testConfig(b)
	cfg.ReadyFile = filepath.Join(b.TempDir(), "ready")
	c := newTest(b, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var addrs Addrs
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if bs, err := os.ReadFile(cfg.ReadyFile); err == nil && json.Unmarshal(bs, &addrs) == nil {
			break
		}
	}
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	watch, err := owlv1.NewQueryServiceClient(conn).WatchPathStats(ctx, &owlv1.WatchPathStatsRequest{Path: "p"})
	if err != nil {
		b.Fatal(err)
	}
	upB, downB, upTS, downTS := rdaPair(cfg.Params.RDA, 5000, 50, 50)
	ldaUp, ldaDown := ldaPair(b, cfg.Params.LDA, 5000, 90_000, 1)
	a := probeStream(b, conn, "a", cfg.Params)
	d := probeStream(b, conn, "b", cfg.Params)
	aAcks, dAcks := make(chan *owlv1.Ack, 16), make(chan *owlv1.Ack, 16)
	go answer(a, upTS, aAcks)
	go answer(d, downTS, dAcks)
	var res *owlv1.PathStats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r := report("p", int64(i), owlv1.Role_ROLE_UPSTREAM, ldaUp)
		r.Rda = upB
		if err := a.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}); err != nil {
			b.Fatal(err)
		}
		<-aAcks
		r = report("p", int64(i), owlv1.Role_ROLE_DOWNSTREAM, ldaDown)
		r.Rda = downB
		b.StartTimer()
		if err := d.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}); err != nil {
			b.Fatal(err)
		}
		if res, err = watch.Recv(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		<-dAcks
		if res.GetEstimator() != "rda" || res.GetMeanNs() != 90_000 || res.GetLost() != 50 {
			b.Fatalf("result %v", res)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(res.GetExchangedBytes()), "bytes_exchanged")
}

// BenchmarkColateQuery is GetFlowLatencyHistoric for one flow over stored
// vectors (2^16 counters, 20 per flow, 20,000 packets and flows each) of
// two points. The first query over a range reads every counter of each
// pair of vectors for the statistics all flows share; later queries, for
// any flow, read only the flow's counters and counts.
func BenchmarkColateQuery(b *testing.B) {
	for _, run := range []struct {
		epochs int
		cold   bool
	}{{10, true}, {10, false}, {60, true}, {60, false}} {
		epochs := run.epochs
		name := fmt.Sprintf("epochs=%d/cached", epochs)
		if run.cold {
			name = fmt.Sprintf("epochs=%d/first", epochs)
		}
		b.Run(name, func(b *testing.B) {
			cfg := testConfig(b)
			cfg.Params.Colate.Enabled = true
			cfg.Params.Colate.Counters = 1 << 16
			c := newTest(b, cfg)
			vc := cfg.Params.ColateConfig()
			rng := rand.New(rand.NewPCG(1, 2))
			key := capture.FlowKey{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 1, DstPort: 2, Proto: 17}
			fh := key.Hash(c.cfg.Params.LDS.Seed)
			for e := range int64(epochs) {
				start := cfg.Params.Epoch.StartNS(e)
				s, _ := colate.New(vc, start)
				r, _ := colate.New(vc, start)
				for i := range 20_000 {
					f := rng.Uint64()
					if i%10 == 0 {
						f = fh
					}
					id, ts := rng.Uint64(), start+rng.Int64N(int64(cfg.Params.Epoch.Length)-1e6)
					s.Insert(f, id, ts)
					r.Insert(f, id, ts+100_000)
				}
				for probe, v := range map[string]*colate.Vector{"a": s, "b": r} {
					raw, _ := v.MarshalBinary()
					if err := c.colates.put(probe, &owlv1.ColateVector{Epoch: e, Vector: raw}); err != nil {
						b.Fatal(err)
					}
				}
			}
			req := &owlv1.GetFlowLatencyHistoricRequest{Flow: netpath.FlowToProto(key), Upstream: "a", Downstream: "b"}
			b.ResetTimer()
			for b.Loop() {
				if run.cold {
					// The first query over a range reads every counter
					// of the pairs; later ones (any flow) do not.
					c.colates.pairs.Purge()
				}
				res, err := c.colates.historic(context.Background(), req)
				if err != nil || res.GetVectors() != uint32(epochs) {
					b.Fatalf("%v %v", res, err)
				}
			}
		})
	}
}
