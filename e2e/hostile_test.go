package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/security"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// hostileRSSBound is what the collector may grow to in TestHostileClient:
// its pending bound (max_pending_bytes 64 MiB, of which one probe may hold
// half), one report of up to max_message_bytes (64 MiB) per stream being
// read, the largest legitimate RDA decoded, and the Go runtime's slack.
const hostileRSSBound = 512 << 20

// hostile is a client that holds op-x's certificate (a probe of the
// deployment that was taken over) and a reader's.
type hostile struct {
	t       *testing.T
	addr    string
	probe   *grpc.ClientConn
	p       params.Params
	refused atomic.Int64 // answers that refused something
	errs    atomic.Int64 // streams that ended in an error
}

// stream opens a probe stream as id, live (its epochs must be near the
// collector's clock).
func (h *hostile) stream(ctx context.Context, id string) (owlv1.ProbeService_ConnectClient, *owlv1.CollectorMessage, error) {
	st, err := owlv1.NewProbeServiceClient(h.probe).Connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Hello{Hello: &owlv1.Hello{ProbeId: id}}}); err != nil {
		return nil, nil, err
	}
	m, err := st.Recv()
	return st, m, err
}

// bogusIDs says hello as n ids its certificate does not name.
func (h *hostile) bogusIDs(ctx context.Context, n int) {
	for i := range n {
		_, m, err := h.stream(ctx, fmt.Sprintf("bogus-%d", i))
		if err != nil {
			h.errs.Add(1)
			continue
		}
		if m.GetReject() != nil {
			h.refused.Add(1)
		}
	}
}

// send sends reports on one stream as op-x and reads the answers until
// every report got one or the stream ended. It returns the rejections'
// reasons in the order they came, and the error that ended the stream.
func (h *hostile) send(ctx context.Context, reports []*owlv1.EpochReport) (rejected []string, ended error) {
	st, m, err := h.stream(ctx, "op-x")
	if err != nil || m.GetPaths() == nil {
		h.errs.Add(1)
		return nil, fmt.Errorf("hello: %v %v", m, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for answers := 0; answers < len(reports); {
			m, err := st.Recv()
			if err != nil {
				h.errs.Add(1)
				ended = err
				return
			}
			// A rejected report is acknowledged after its rejection:
			// every report gets one acknowledgement.
			if rj := m.GetReject(); rj != nil {
				h.refused.Add(1)
				rejected = append(rejected, rj.GetReason())
			} else if m.GetAck() != nil {
				answers++
			}
		}
	}()
	for i, r := range reports {
		r.Seq = uint64(i + 1)
		if st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}) != nil {
			break
		}
	}
	<-done
	_ = st.CloseSend()
	return rejected, ended
}

// ldaBytes is a valid LDA of the deployment's shape with n packets.
func (h *hostile) ldaBytes(n int) []byte {
	l, err := lda.New(h.p.LDA)
	if err != nil {
		h.t.Fatal(err)
	}
	for i := range n {
		l.Insert(uint64(i)*0x9e3779b97f4a7c15, int64(i)*1000)
	}
	b, err := l.MarshalBinary()
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// attack runs every kind of hostile input once.
func (h *hostile) attack(ctx context.Context) {
	now := time.Now().Unix() // 1 s epochs from the Unix epoch
	rep := func(path string, epoch int64, role owlv1.Role) *owlv1.EpochReport {
		return &owlv1.EpochReport{Path: path, Epoch: epoch, Role: role, Lda: h.ldaBytes(100), Counters: &owlv1.Counters{Packets: 100}, ClosedUnixNs: time.Now().UnixNano()}
	}
	up := owlv1.Role_ROLE_UPSTREAM
	var bad []*owlv1.EpochReport
	// Epochs no probe can have closed, and a day-old replay by a live probe.
	for _, e := range []int64{math.MaxInt64, math.MinInt64, -1, now + 100*365*86400, now + 3600, now - 3*86400} {
		bad = append(bad, rep("x-to-y", e, up))
	}
	// Another probe's path, a path that does not exist, no role.
	bad = append(bad, rep("a-to-b", now-5, up), rep("nowhere", now-5, up), rep("x-to-y", now-5, owlv1.Role_ROLE_UNSPECIFIED))
	// Malformed synopses (an empty RDA or LDS is none: an LDA-only
	// report is a real probe's choice).
	for _, n := range []int{0, 1, 17, 4096} {
		r := rep("x-to-y", now-10-int64(n), up)
		r.Lda = randomBytes(n)
		bad = append(bad, r)
		if n > 0 {
			r = rep("x-to-y", now-20-int64(n), up)
			r.Rda, r.Lds = randomBytes(n), randomBytes(n)
			bad = append(bad, r)
		}
	}
	// An RDA twice the largest the collector allows (2^19 buckets).
	big, err := rda.New(rda.Config{Banks: h.p.RDA.Banks, Buckets: 1 << 20, Seed: h.p.RDA.Seed, Check: h.p.RDA.Check})
	if err != nil {
		h.t.Fatal(err)
	}
	r := rep("x-to-y", now-30, up)
	if r.Rda, err = big.MarshalBinary(); err != nil {
		h.t.Fatal(err)
	}
	bad = append(bad, r)
	if rejected, err := h.send(ctx, bad); len(rejected) != len(bad) {
		h.t.Errorf("%d of %d bad reports rejected (stream ended: %v): %q", len(rejected), len(bad), err, rejected)
	}
	// A message over max_message_bytes ends its stream.
	r = rep("x-to-y", now-31, up)
	r.Lda = make([]byte, 70<<20)
	if _, err := h.send(ctx, []*owlv1.EpochReport{r}); status.Code(err) != codes.ResourceExhausted {
		h.t.Errorf("a 70 MiB report: %v, want ResourceExhausted", err)
	}
	// A flood of lone sides (op-y never reports): the rate limit slows it
	// and its share of the pending bytes turns it away.
	var flood []*owlv1.EpochReport
	for i := range 3000 {
		r := rep("x-to-y", now-40-int64(i), up)
		r.Lda = h.ldaBytes(2000)
		flood = append(flood, r)
	}
	_, _ = h.send(ctx, flood)
}

// TestHostileClient runs hostile clients against a TLS collector while
// two real probes replay the bundled trace to it: thousands of bogus ids,
// oversized and malformed synopses, epochs far ahead, far back and out of
// range, a flood of lone sides, watchers that never read. The real path's
// results are still exact and complete, and the collector stays under
// hostileRSSBound.
func TestHostileClient(t *testing.T) {
	env, out, truths := setup(t)
	paths := pathAB + `  - name: x-to-y
    upstream: op-x
    downstream: op-y
`
	cfg := collectorYAML(filepath.Join(env.Dir, "data"), "127.0.0.1:0", paths) + "max_pending_bytes: 67108864\n"
	coll, addrs, err := env.StartCollector("collector", cfg)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := harness.CertsDir()
	if err != nil {
		t.Fatal(err)
	}
	h := &hostile{t: t, addr: addrs.GRPC, p: params.Default(),
		probe: dialWith(t, addrs.GRPC, clientCreds(t, certs, security.RoleProbe, "op-x", addrs.GRPC))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Watchers that never read, past the limit.
	reader := dialWith(t, addrs.GRPC, clientCreds(t, certs, security.RoleReader, "ops", addrs.GRPC))
	for range 300 {
		if _, err := owlv1.NewQueryServiceClient(reader).WatchPathStats(ctx, &owlv1.WatchPathStatsRequest{Path: "a-to-b"}); err != nil {
			t.Fatal(err)
		}
	}
	var attacks sync.WaitGroup
	attacks.Go(func() {
		h.attack(ctx)
		h.bogusIDs(ctx, 3000)
	})

	runProbes(t, env, addrs.GRPC, out)
	attacks.Wait()
	qctx, qcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer qcancel()
	q := query(t, addrs.GRPC)
	stats, err := harness.WaitStats(qctx, q, "a-to-b", len(truths))
	if err != nil {
		t.Fatalf("%v\n%s", err, coll.Log())
	}
	checkTruth(t, stats, truths, impaired, false)

	rss, err := coll.PeakRSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("collector peak RSS %.0f MiB (bound %d MiB); %d answers refused something, %d hostile streams ended in errors",
		float64(rss)/(1<<20), hostileRSSBound>>20, h.refused.Load(), h.errs.Load())
	// The race detector's shadow memory is several times the program's:
	// the bound is for the binaries as shipped.
	if rss > hostileRSSBound && os.Getenv("OWL_E2E_RACE") != "1" {
		t.Errorf("collector peak RSS %d MiB over the bound %d MiB", rss>>20, hostileRSSBound>>20)
	}
	if h.refused.Load() < 3000 {
		t.Errorf("only %d refusals for 3000 bogus ids and the bad reports", h.refused.Load())
	}
	probes, err := q.ListProbes(qctx, &owlv1.ListProbesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probes.GetProbes() {
		switch p.GetProbeId() {
		case "op-a", "op-b":
			if p.GetRefused() != 0 || !strings.Contains(p.GetIdentity(), "owl://probe/"+p.GetProbeId()) {
				t.Errorf("%s: refused %d, identity %q", p.GetProbeId(), p.GetRefused(), p.GetIdentity())
			}
		case "op-x":
			if p.GetRefused() < 3000 {
				t.Errorf("op-x refused %d times, want its bogus ids and bad reports counted", p.GetRefused())
			}
		default:
			if strings.HasPrefix(p.GetProbeId(), "bogus-") {
				t.Errorf("a bogus id is kept: %v", p)
			}
		}
	}
	if n := len(probes.GetProbes()); n > 3 {
		t.Errorf("%d probes listed, want op-a, op-b, op-x", n)
	}
	if v := metricValue(t, addrs.HTTP, "owl_collector_watchers_refused_total"); v != "44" {
		t.Errorf("%s of 300 watchers refused, want the 44 past 256", v)
	}
	if v := metricValue(t, addrs.HTTP, `owl_collector_auth_refused_total{reason="probe_id"}`); v != "3000" {
		t.Errorf("%s bogus ids refused, want 3000", v)
	}
}
