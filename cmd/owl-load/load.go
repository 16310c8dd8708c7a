package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/probe"
)

// loadRun is one run of owl-load: its collectors, probes and results.
type loadRun struct {
	cfg     config
	log     *slog.Logger
	paths   []netpath.Path
	grid    epoch.Config
	traffic *probe.Traffic
	procs   []*collectorProc // spawned; none with -collector
	seed    string           // the collector the probes and queries go to
	q       owlv1.QueryServiceClient
	probes  []*probe.Emulated
	res     *results
	sent    atomic.Int64 // epochs sent
	// kill is -kill and -restart-after; killMid is the probes' counters
	// halfway to the kill.
	kill    killPlan
	killMid probeCounts
	// killed and back (the killed member started again) are set by send
	// once they happened, and read by the snapshots.
	killed atomic.Pointer[killed]
	back   atomic.Pointer[back]
	bin    string // the collector binary spawned
	dir    string // the spawned collectors' directory
}

// run generates the traffic, starts or reaches the collectors, drives the
// probes and returns the summary (also after an error, when there is
// something to tell).
func run(ctx context.Context, cfg config, log *slog.Logger) (sum *summary, err error) {
	p := params.Default()
	l := &loadRun{cfg: cfg, log: log, paths: loadPaths(cfg.probes, cfg.paths), grid: p.Epoch, seed: cfg.collector}
	if l.kill, err = parseKill(cfg.kill, cfg.killSignal, cfg.restartAfter, cfg.spawn, cfg.epochs); err != nil {
		return nil, err
	}
	t0 := time.Now()
	if l.traffic, err = probe.NewTraffic(p, cfg.traffic); err != nil {
		return nil, err
	}
	log.Info("traffic generated", "variants", cfg.traffic.Variants, "took", time.Since(t0).Round(time.Millisecond))
	if cfg.spawn > 0 {
		stop, serr := l.spawn(ctx)
		if serr != nil {
			return nil, serr
		}
		defer func() { stop(err != nil) }() // the run's error
	}
	conn, err := dialQuery(l.seed)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	l.q = owlv1.NewQueryServiceClient(conn)
	if err := l.checkCollector(ctx); err != nil {
		return nil, err
	}
	first, err := l.firstEpoch(ctx)
	if err != nil {
		return nil, err
	}
	l.res = newResults(first, cfg.epochs, cfg.probes, l.grid, l.paths)
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	wg.Go(func() { l.res.watch(wctx, l.q, log) })
	sum, err = l.drive(ctx)
	return sum, errors.Join(err, l.exited())
}

// exited reports the spawned collectors that exited during the run.
func (l *loadRun) exited() error {
	var errs []error
	procs := l.procs
	if b := l.back.Load(); b != nil && b.proc != nil {
		procs = append(slices.Clone(procs), b.proc)
	}
	for _, p := range procs {
		if k := l.killed.Load(); k != nil && k.proc == p {
			continue
		}
		select {
		case <-p.exited:
			errs = append(errs, fmt.Errorf("collector %s exited during the run (%v): see %s", p.name, p.waitErr, p.logPath))
		default:
		}
	}
	return errors.Join(errs...)
}

// dialQuery connects to a collector's gRPC address.
func dialQuery(addr string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		return nil, fmt.Errorf("collector address %q: %w", addr, err)
	}
	return conn, nil
}

// spawn starts the collectors in a temporary directory and returns what
// stops them and removes the directory, unless -keep or the run failed.
func (l *loadRun) spawn(ctx context.Context) (func(failed bool), error) {
	bin, err := collectorBinary(l.cfg.collectorBin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "owl-load-")
	if err != nil {
		return nil, fmt.Errorf("directory for the collectors: %w", err)
	}
	l.bin, l.dir = bin, dir
	fixed := ""
	if l.kill.restart > 0 {
		fixed = l.kill.name // restarted on its gossip address
	}
	l.procs, err = spawnCollectors(ctx, bin, l.cfg.spawn, dir, l.paths, fixed, l.log)
	if err != nil {
		return nil, fmt.Errorf("%w (collectors' files kept in %s)", err, dir)
	}
	l.seed = l.procs[0].addrs.GRPC
	for _, p := range l.procs {
		fmt.Fprintf(os.Stderr, "collector %s: grpc %s, http %s (metrics, /debug/pprof/), log %s\n", p.name, p.addrs.GRPC, p.addrs.HTTP, p.logPath)
	}
	return func(failed bool) {
		for _, p := range l.procs {
			p.stop(15 * time.Second)
		}
		if b := l.back.Load(); b != nil {
			<-b.done
			if b.proc != nil {
				b.proc.stop(15 * time.Second)
			}
		}
		if l.cfg.keep || failed {
			fmt.Fprintf(os.Stderr, "collectors' data and logs kept in %s\n", dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			l.log.Warn("removing the collectors' directory", "dir", dir, "err", err)
		}
	}, nil
}

// checkCollector asks the collector for its paths: they must include the
// generated ones, and no other path may name an emulated probe.
func (l *loadRun) checkCollector(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := l.q.ListPaths(cctx, &owlv1.ListPathsRequest{})
	if err != nil {
		return fmt.Errorf("cannot reach the collector at %s: %w", l.seed, err)
	}
	probes := map[string]bool{}
	want := map[string]netpath.Path{}
	for _, p := range l.paths {
		want[p.Name] = p
		probes[p.Upstream], probes[p.Downstream] = true, true
	}
	var wrong []string
	have := map[string]bool{}
	for _, pp := range resp.GetPaths() {
		have[pp.GetName()] = true
		w, ours := want[pp.GetName()]
		switch {
		case ours && (w.Upstream != pp.GetUpstream() || w.Downstream != pp.GetDownstream()):
			wrong = append(wrong, fmt.Sprintf("%s goes from %s to %s, not %s to %s", pp.GetName(), pp.GetUpstream(), pp.GetDownstream(), w.Upstream, w.Downstream))
		case !ours && (probes[pp.GetUpstream()] || probes[pp.GetDownstream()]):
			wrong = append(wrong, fmt.Sprintf("%s names emulated probes but is not generated", pp.GetName()))
		}
	}
	missing := 0
	for _, p := range l.paths {
		if !have[p.Name] {
			if missing == 0 {
				wrong = append(wrong, fmt.Sprintf("%s is not configured", p.Name))
			}
			missing++
		}
	}
	if len(wrong) == 0 {
		return nil
	}
	return fmt.Errorf("the collector at %s is not configured with the paths owl-load generates (%d of %d missing; %s), and it rejects reports of paths it does not configure: write its configuration with owl-load -probes %d -paths %d -write-config collector.yaml and start it with -config collector.yaml",
		l.seed, missing, len(l.paths), strings.Join(wrong[:min(3, len(wrong))], "; "), l.cfg.probes, l.cfg.paths)
}

// firstEpoch is the epoch as many epochs back as the run sends, so that
// at any rate none is ahead of the clock (the collector refuses epochs
// ahead of its clock; the emulated probes say they replay, so past ones
// are taken), or the one after the newest result of the first path when
// an earlier run got further: reports of an epoch already reconciled are
// duplicates.
func (l *loadRun) firstEpoch(ctx context.Context) (int64, error) {
	now, _ := l.grid.Of(time.Now().UnixNano())
	start := now - int64(l.cfg.epochs)
	resp, err := l.q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: l.paths[0].Name,
		From: timestamppb.New(time.Unix(0, l.grid.StartNS(start))), Limit: 100_000})
	if err != nil {
		return 0, fmt.Errorf("asking the collector at %s for the results of %s: %w", l.seed, l.paths[0].Name, err)
	}
	first := start
	for _, s := range resp.GetStats() {
		first = max(first, s.GetEpoch()+1)
	}
	// The collector refuses epochs that start more than max_epoch_ahead
	// (a minute by default) after its clock.
	if ahead := time.Duration(l.grid.StartNS(first+int64(l.cfg.epochs)-1) - l.grid.StartNS(now)); first > start && ahead > 30*time.Second {
		return 0, fmt.Errorf("the collector at %s holds results of %s up to epoch %d, from an earlier run: this run's %d epochs after it would end %v ahead of the clock, and the collector refuses epochs far ahead; send fewer epochs, wait, or start the collector on an empty data directory",
			l.seed, l.paths[0].Name, first-1, l.cfg.epochs, ahead.Round(time.Second))
	}
	return first, nil
}

// drive runs the emulated probes while measure sends and watches.
func (l *loadRun) drive(ctx context.Context) (*summary, error) {
	pctx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	g, gctx := errgroup.WithContext(pctx)
	for j := range l.cfg.probes {
		e := probe.NewEmulated(probeName(j), l.seed, l.traffic, l.log)
		e.Gzip(l.cfg.gzip)
		l.probes = append(l.probes, e)
		g.Go(func() error { return e.Run(gctx) })
	}
	sum, err := l.measure(gctx)
	stopProbes()
	if perr := g.Wait(); perr != nil {
		var rej *probe.RejectedError
		if errors.As(perr, &rej) {
			perr = fmt.Errorf("%w (owl-load's probes use the default parameters and the paths -write-config writes)", perr)
		}
		return sum, perr
	}
	return sum, err
}

// snapshot is the CPU time used so far, by owl-load and each spawned
// collector, and the results in by then.
type snapshot struct {
	at      time.Time
	self    time.Duration
	procs   []procStats
	back    procStats // the killed member started again, since its start
	results int
}

// snapshot reads the CPU times now.
func (l *loadRun) snapshot() snapshot {
	s := snapshot{at: time.Now()}
	s.results, _ = l.res.count()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, p := range l.procs {
		ps, err := p.stats()
		if k := l.killed.Load(); err != nil && (k == nil || k.proc != p) {
			l.log.Warn("reading a collector's CPU time", "err", err)
		}
		s.procs = append(s.procs, ps)
	}
	if b := l.back.Load(); b != nil {
		select {
		case <-b.done:
			if b.proc != nil {
				s.back, _ = b.proc.stats() // not ok once it exited: exited says so
			}
		default: // not listening yet
		}
	}
	return s
}

// measure waits for the probes' paths, sends the epochs, waits for their
// results and sums up. ctx ends early when a probe fails.
func (l *loadRun) measure(ctx context.Context) (*summary, error) {
	if err := l.waitReady(ctx); err != nil {
		return nil, err
	}
	before := l.snapshot()
	pctx, stopProgress := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { l.progress(pctx, before.at) })
	var half snapshot
	wg.Go(func() { half = l.halfway(pctx) })
	for _, p := range l.procs {
		wg.Go(func() { p.sampleAnon(pctx) })
	}
	sendErr := l.send(ctx)
	sendEnd := time.Now()
	var waitErr error
	if sendErr == nil {
		waitErr = l.waitResults(ctx)
	}
	var backErr error
	if b := l.back.Load(); b != nil {
		<-b.done
		backErr = b.err
	}
	after := l.snapshot()
	stopProgress()
	wg.Wait()
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fillErr := l.res.fill(fctx, l.q)
	sum := l.summarize(before, half, after, sendEnd)
	err := errors.Join(sendErr, waitErr, fillErr, backErr)
	if err == nil && sum.NoResult > 0 {
		err = fmt.Errorf("%d of %d path-epochs have no result", sum.NoResult, sum.PathEpochsSent)
	}
	return sum, err
}

// waitReady waits until every probe has its path configuration and
// checks that it is the generated one.
func (l *loadRun) waitReady(ctx context.Context) error {
	deadline := time.After(30 * time.Second)
	for _, e := range l.probes {
		select {
		case <-e.Ready():
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("the emulated probes got no path configuration from %s within 30s (see the warnings above)", l.seed)
		}
	}
	want := make([]map[string]owlv1.Role, len(l.probes))
	for j := range want {
		want[j] = map[string]owlv1.Role{}
	}
	idx := map[string]int{}
	for j := range l.probes {
		idx[probeName(j)] = j
	}
	for _, p := range l.paths {
		want[idx[p.Upstream]][p.Name] = owlv1.Role_ROLE_UPSTREAM
		want[idx[p.Downstream]][p.Name] = owlv1.Role_ROLE_DOWNSTREAM
	}
	for j, e := range l.probes {
		got := e.Assigned()
		for name, role := range want[j] {
			if got[name] != role {
				return fmt.Errorf("the collector at %s does not make %s the %v of %s: its paths must be the ones owl-load generates (see -write-config)", l.seed, probeName(j), role, name)
			}
		}
		if len(got) != len(want[j]) {
			return fmt.Errorf("the collector at %s gives %s %d paths, owl-load generated %d: its paths must be the ones owl-load generates (see -write-config)", l.seed, probeName(j), len(got), len(want[j]))
		}
	}
	return nil
}

// send queues the epochs' reports on every probe: at -rate epochs per
// second, or with -rate 0 as soon as every path has a result of the epoch
// -window back.
func (l *loadRun) send(ctx context.Context) error {
	start := time.Now()
	for k := range l.cfg.epochs {
		e := l.res.first + int64(k)
		if err := l.pace(ctx, start, k, e); err != nil {
			return err
		}
		for j, p := range l.probes {
			l.res.sent(e, j, time.Now())
			p.Report(e)
		}
		l.sent.Add(1)
		if l.kill.name != "" && k+1 == l.kill.after/2 {
			l.killMid = l.probeCounts()
		}
		if l.kill.name != "" && k+1 == l.kill.after {
			if err := l.killMember(l.kill.name, e); err != nil {
				return err
			}
		}
		if l.kill.restart > 0 && k+1 == l.kill.after+l.kill.restart {
			l.restartMember(ctx, e)
		}
	}
	return nil
}

// pace waits until epoch e, the k-th, may go.
func (l *loadRun) pace(ctx context.Context, start time.Time, k int, e int64) error {
	if l.cfg.rate > 0 {
		at := start.Add(time.Duration(float64(k) / l.cfg.rate * float64(time.Second)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(at)):
			return nil
		}
	}
	back := e - int64(l.cfg.window)
	return l.waitFor(ctx, func() bool { return l.res.resolved(back) },
		fmt.Sprintf("waiting for every path's result of epoch %d to send epoch %d", back, e))
}

// waitResults waits until every path-epoch sent has a result.
func (l *loadRun) waitResults(ctx context.Context) error {
	want := l.cfg.epochs * len(l.paths)
	return l.waitFor(ctx, func() bool { n, _ := l.res.count(); return n >= want }, "waiting for the last results")
}

// waitFor waits until done says so, giving up when no new result came
// for -wait. Results published while the watch was cut off never come
// through it: once none came for fetchAfter since a cut, they are
// fetched.
func (l *loadRun) waitFor(ctx context.Context, done func() bool, what string) error {
	since := time.Now()
	fetched := 0 // the watch's cuts when results were last fetched
	tick := time.NewTicker(min(time.Second, fetchAfter))
	defer tick.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.res.changed:
		case <-tick.C:
		}
		if _, last := l.res.count(); last.After(since) {
			since = last
		}
		if cuts := l.res.cuts(); cuts > fetched && time.Since(since) > fetchAfter {
			fetched = cuts
			if err := l.res.fill(ctx, l.q); err != nil {
				l.log.Warn("fetching the results the watch missed", "err", err)
			}
			continue
		}
		if time.Since(since) > l.cfg.wait {
			return fmt.Errorf("%s: no new result for %v (see the collectors' logs)", what, l.cfg.wait)
		}
	}
	return nil
}

// fetchAfter is how long waitFor waits for a result, after the watch was
// cut, before it fetches those it missed.
var fetchAfter = 3 * time.Second

// halfway takes a snapshot once half of the path-epochs have their
// result (a zero one if ctx ends first): the CPU from there to the end is
// the collectors' cost once each path's synopses have settled to their
// traffic (the first epochs carry the default RDA size, and an LDS until
// the collector turns it off).
func (l *loadRun) halfway(ctx context.Context) snapshot {
	half := (l.cfg.epochs*len(l.paths) + 1) / 2
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return snapshot{}
		case <-tick.C:
			if n, _ := l.res.count(); n >= half {
				return l.snapshot()
			}
		}
	}
}

// progress prints a line every 5 seconds until ctx ends.
func (l *loadRun) progress(ctx context.Context, start time.Time) {
	const every = 5 * time.Second
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			n, _ := l.res.count()
			p50, _ := l.res.recentLatency(now.Add(-every))
			unacked := 0
			for _, e := range l.probes {
				unacked += e.Stats().Unacked
			}
			fmt.Fprintf(os.Stderr, "%6.0fs  sent %d/%d epochs  results %d/%d (%.0f/s)  latency p50 %v  unacked %d\n",
				now.Sub(start).Seconds(), l.sent.Load(), l.cfg.epochs, n, l.cfg.epochs*len(l.paths),
				float64(n-last)/every.Seconds(), p50.Round(time.Millisecond), unacked)
			last = n
		}
	}
}
