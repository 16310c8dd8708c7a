package collector

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
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
