package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/netpath"
)

// pathEpoch names one epoch of one path.
type pathEpoch struct {
	path  string
	epoch int64
}

// outcome is what became of one path-epoch.
type outcome struct {
	res     *owlv1.PathStats // the newest result seen
	watched bool             // the first result came by the watch (else: fetched at the end)
	updates int              // results after the first (boundary matching changed it)
}

// latencySample is the time from an epoch's later report to its first
// result.
type latencySample struct {
	epoch int64
	at    time.Time // when the result came
	d     time.Duration
}

// results collects the collectors' results of the path-epochs owl-load
// sends, as it watches them. Safe for concurrent use.
type results struct {
	first  int64
	epochs int
	grid   epoch.Config
	ends   map[string][2]int // path → its upstream and downstream probe

	outcomesMu sync.Mutex    // guards the fields below
	sentAt     [][]time.Time // [epoch − first][probe]: when the probe queued the epoch's reports
	outcomes   map[pathEpoch]*outcome
	perEpoch   []int // path-epochs with a result, by epoch − first
	latencies  []latencySample
	lastAt     time.Time // when the newest first result came
	watchCuts  int       // watches that ended early
	changed    chan struct{}
}

// newResults collects the results of epochs [first, first+epochs) of paths
// reported by probes.
func newResults(first int64, epochs, probes int, grid epoch.Config, paths []netpath.Path) *results {
	r := &results{first: first, epochs: epochs, grid: grid, ends: map[string][2]int{}, outcomes: map[pathEpoch]*outcome{},
		perEpoch: make([]int, epochs), sentAt: make([][]time.Time, epochs), changed: make(chan struct{}, 1)}
	idx := map[string]int{}
	for j := range probes {
		idx[probeName(j)] = j
	}
	for _, p := range paths {
		r.ends[p.Name] = [2]int{idx[p.Upstream], idx[p.Downstream]}
	}
	for i := range r.sentAt {
		r.sentAt[i] = make([]time.Time, probes)
	}
	return r
}

// sent notes when probe j queued its reports of an epoch.
func (r *results) sent(e int64, j int, at time.Time) {
	r.outcomesMu.Lock()
	defer r.outcomesMu.Unlock()
	r.sentAt[e-r.first][j] = at
}

// take counts a result that came at at (zero: fetched at the end, no
// latency). Results of other paths and epochs are ignored.
func (r *results) take(res *owlv1.PathStats, at time.Time) {
	ends, ok := r.ends[res.GetPath()]
	i := res.GetEpoch() - r.first
	if !ok || i < 0 || i >= int64(r.epochs) {
		return
	}
	k := pathEpoch{res.GetPath(), res.GetEpoch()}
	r.outcomesMu.Lock()
	defer r.outcomesMu.Unlock()
	if o := r.outcomes[k]; o != nil {
		o.res = res // the stored result, newer than any watched
		if !at.IsZero() {
			o.updates++
		}
		return
	}
	r.outcomes[k] = &outcome{res: res, watched: !at.IsZero()}
	r.perEpoch[i]++
	if !at.IsZero() {
		later := r.sentAt[i][ends[0]]
		if d := r.sentAt[i][ends[1]]; d.After(later) {
			later = d
		}
		r.latencies = append(r.latencies, latencySample{epoch: res.GetEpoch(), at: at, d: at.Sub(later)})
		r.lastAt = at
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// resolved says whether every path has a result of epoch e (true before
// the first epoch).
func (r *results) resolved(e int64) bool {
	if e < r.first {
		return true
	}
	r.outcomesMu.Lock()
	defer r.outcomesMu.Unlock()
	return r.perEpoch[e-r.first] == len(r.ends)
}

// count is the number of path-epochs with a result, and when the newest
// came.
func (r *results) count() (int, time.Time) {
	r.outcomesMu.Lock()
	defer r.outcomesMu.Unlock()
	return len(r.outcomes), r.lastAt
}

// recentLatency is the median latency of the results that came since t,
// and their number.
func (r *results) recentLatency(since time.Time) (time.Duration, int) {
	r.outcomesMu.Lock()
	var ds []time.Duration
	for i := len(r.latencies) - 1; i >= 0 && r.latencies[i].at.After(since); i-- {
		ds = append(ds, r.latencies[i].d)
	}
	r.outcomesMu.Unlock()
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2], len(ds)
}

// watch takes every result the collector at q computes (in a cluster: all
// members' results) until ctx ends, watching again when a watch ends.
func (r *results) watch(ctx context.Context, q owlv1.QueryServiceClient, log *slog.Logger) {
	const minBackoff, maxBackoff = 200 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for ctx.Err() == nil {
		n, _ := r.count()
		err := r.watchOnce(ctx, q)
		if ctx.Err() != nil {
			return
		}
		r.outcomesMu.Lock()
		r.watchCuts++
		r.outcomesMu.Unlock()
		if m, _ := r.count(); m > n {
			backoff = minBackoff // it worked a while
		}
		level := slog.LevelWarn
		if backoff > minBackoff {
			level = slog.LevelDebug // said once already
		}
		log.Log(ctx, level, "result watch ended; watching again (results missed meanwhile are fetched once none come for a while)", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// watchOnce runs one WatchPathStats stream of every path.
func (r *results) watchOnce(ctx context.Context, q owlv1.QueryServiceClient) error {
	st, err := q.WatchPathStats(ctx, &owlv1.WatchPathStatsRequest{})
	if err != nil {
		return fmt.Errorf("watching results: %w", err)
	}
	for {
		res, err := st.Recv()
		if err != nil {
			return fmt.Errorf("watching results: %w", err)
		}
		r.take(res, time.Now())
	}
}

// cuts is how many times the watch has ended early so far.
func (r *results) cuts() int {
	r.outcomesMu.Lock()
	defer r.outcomesMu.Unlock()
	return r.watchCuts
}

// fill asks for the results the watch did not see (it was cut off, or
// they were missing-side results, which are not published to watchers).
func (r *results) fill(ctx context.Context, q owlv1.QueryServiceClient) error {
	r.outcomesMu.Lock()
	var paths []string
	for p := range r.ends {
		for i := range int64(r.epochs) {
			if r.outcomes[pathEpoch{p, r.first + i}] == nil {
				paths = append(paths, p)
				break
			}
		}
	}
	r.outcomesMu.Unlock()
	from := timestamppb.New(time.Unix(0, r.grid.StartNS(r.first)))
	to := timestamppb.New(time.Unix(0, r.grid.StartNS(r.first+int64(r.epochs)-1)))
	var errs []error
	for _, p := range paths {
		resp, err := q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: p, From: from, To: to, Limit: uint32(r.epochs) + 16})
		if err != nil {
			errs = append(errs, fmt.Errorf("path %s: %w", p, err))
			if status.Code(err) == codes.Unavailable || ctx.Err() != nil {
				break
			}
			continue
		}
		for _, res := range resp.GetStats() {
			r.take(res, time.Time{})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fetching the results not watched: %w", err)
	}
	return nil
}
