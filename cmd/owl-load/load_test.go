package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
)

// storedResults answers GetPathStats with every epoch's result, as a
// collector whose watch missed some would.
type storedResults struct {
	owlv1.QueryServiceClient
	first int64
	n     int
	asked int
}

func (s *storedResults) GetPathStats(_ context.Context, in *owlv1.GetPathStatsRequest, _ ...grpc.CallOption) (*owlv1.GetPathStatsResponse, error) {
	s.asked++
	resp := &owlv1.GetPathStatsResponse{}
	for i := range s.n {
		resp.Stats = append(resp.Stats, &owlv1.PathStats{Path: in.GetPath(), Epoch: s.first + int64(i)})
	}
	return resp, nil
}

// TestWaitFetchesAfterCut: results the watch missed while it was cut off
// are fetched once none came for a while, and the wait ends without
// -wait's error; without a cut nothing is fetched before -wait ends it.
func TestWaitFetchesAfterCut(t *testing.T) {
	defer func(d time.Duration) { fetchAfter = d }(fetchAfter)
	fetchAfter = 50 * time.Millisecond
	const first, epochs = 100, 3
	paths := []netpath.Path{{Name: "p", Upstream: probeName(0), Downstream: probeName(1)}}
	setup := func(wait time.Duration) (*loadRun, *storedResults) {
		q := &storedResults{first: first, n: epochs}
		l := &loadRun{cfg: config{epochs: epochs, wait: wait}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), paths: paths, q: q,
			res: newResults(first, epochs, 2, params.Default().Epoch, paths)}
		l.res.take(&owlv1.PathStats{Path: "p", Epoch: first}, time.Now()) // watched before the cut
		return l, q
	}

	l, q := setup(10 * time.Second)
	l.res.watchCuts = 1
	start := time.Now()
	if err := l.waitResults(context.Background()); err != nil {
		t.Fatalf("after a cut: %v", err)
	}
	if n, _ := l.res.count(); n != epochs || q.asked != 1 {
		t.Errorf("%d results after %d fetches; want %d after 1", n, q.asked, epochs)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("waited %v for results the watch missed", d)
	}

	l, q = setup(300 * time.Millisecond)
	err := l.waitResults(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no new result") || q.asked != 0 {
		t.Errorf("without a cut: error %v after %d fetches; want -wait's error after none", err, q.asked)
	}
}
