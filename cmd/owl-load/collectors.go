package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/collector"
	"github.com/owl-latency/owl/internal/netpath"
)

// collectorSetup is what differs between the collector configurations
// owl-load writes.
type collectorSetup struct {
	grpc, http, dataDir string
	pprof               bool
	// cluster: gossip bind address and member name; join lists the
	// members to join (none for the first).
	clusterBind, clusterName string
	join                     []string
}

// collectorYAML is a collector configuration with the default parameters
// and the generated paths.
func collectorYAML(s collectorSetup, paths []netpath.Path) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Collector configuration for owl-load: default parameters, %d generated paths.\n", len(paths))
	fmt.Fprintf(&b, "grpc_listen: %q\nhttp_listen: %q\ndata_dir: %q\n", s.grpc, s.http, s.dataDir)
	// The emulated probes connect in plaintext: a load generator is for a lab.
	b.WriteString("insecure: true\n")
	if s.pprof {
		b.WriteString("pprof: true\n")
	}
	if s.clusterBind != "" {
		fmt.Fprintf(&b, "cluster:\n  bind: %q\n  name: %q\n", s.clusterBind, s.clusterName)
		if len(s.join) > 0 {
			quoted := make([]string, len(s.join))
			for i, a := range s.join {
				quoted[i] = strconv.Quote(a)
			}
			fmt.Fprintf(&b, "  join: [%s]\n", strings.Join(quoted, ", "))
		}
	}
	b.WriteString("paths:\n")
	for _, p := range paths {
		fmt.Fprintf(&b, "  - {name: %s, upstream: %s, downstream: %s}\n", p.Name, p.Upstream, p.Downstream)
	}
	return b.String()
}

// writeConfig writes the configuration of a collector for the generated
// paths (-write-config).
func writeConfig(cfg config) error {
	y := collectorYAML(collectorSetup{grpc: ":7700", http: ":7701", dataDir: "owl-load-data"}, loadPaths(cfg.probes, cfg.paths))
	if err := os.WriteFile(cfg.writeConfig, []byte(y), 0o644); err != nil {
		return fmt.Errorf("writing the collector configuration: %w", err)
	}
	fmt.Fprintf(os.Stderr, "wrote %s: %d paths between %d probes; start the collector with -config %s, then run owl-load -collector HOST:7700 -probes %d -paths %d\n",
		cfg.writeConfig, cfg.paths, cfg.probes, cfg.writeConfig, cfg.probes, cfg.paths)
	return nil
}

// loadPaths are the generated paths: path i from probe 2i mod probes to
// probe 2i+1 mod probes.
func loadPaths(probes, paths int) []netpath.Path {
	out := make([]netpath.Path, paths)
	for i := range out {
		out[i] = netpath.Path{Name: fmt.Sprintf("load-%d", i), Upstream: probeName(2 * i % probes), Downstream: probeName((2*i + 1) % probes)}
	}
	return out
}

// probeName names emulated probe j.
func probeName(j int) string { return fmt.Sprintf("load-p%d", j) }

// collectorBinary finds the collector to spawn: the flag's, else the one
// next to owl-load, else the one on PATH.
func collectorBinary(flagValue string) (string, error) {
	if flagValue != "" {
		if _, err := os.Stat(flagValue); err != nil {
			return "", fmt.Errorf("-collector-bin: %w", err)
		}
		return flagValue, nil
	}
	if self, err := os.Executable(); err == nil {
		next := filepath.Join(filepath.Dir(self), "collector")
		if _, err := os.Stat(next); err == nil {
			return next, nil
		}
	}
	p, err := exec.LookPath("collector")
	if err != nil {
		return "", errors.New("no collector binary next to owl-load nor on PATH: build it (go build -o DIR/ ./cmd/collector ./cmd/owl-load) or give -collector-bin")
	}
	return p, nil
}

// collectorProc is a collector owl-load started.
type collectorProc struct {
	name    string
	yaml    string // its configuration
	cmd     *exec.Cmd
	addrs   collector.Addrs
	logPath string
	exited  chan struct{} // closed when the process exited
	waitErr error         // set before exited is closed
	// peakAnon is the most anonymous resident memory (RssAnon) seen:
	// VmHWM counts the store's mapped file too.
	peakAnon atomic.Int64
}

// spawnCollectors starts n collectors of paths in dir on loopback, the
// first the seed of a cluster that the others join (n > 1), and waits
// until they listen and, in a cluster, see each other; member fixed (if
// any) gossips on a port it can be restarted on. On error the ones
// started are stopped.
func spawnCollectors(ctx context.Context, bin string, n int, dir string, paths []netpath.Path, fixed string, log *slog.Logger) ([]*collectorProc, error) {
	var procs []*collectorProc
	fail := func(err error) ([]*collectorProc, error) {
		for _, p := range procs {
			p.stop(5 * time.Second)
		}
		return nil, err
	}
	for i := range n {
		s := collectorSetup{grpc: "127.0.0.1:0", http: "127.0.0.1:0", dataDir: filepath.Join(dir, fmt.Sprintf("c%d-data", i)), pprof: true}
		if n > 1 {
			s.clusterBind, s.clusterName = "127.0.0.1:0", fmt.Sprintf("c%d", i)
			if s.clusterName == fixed {
				// A member that comes back must come back on its gossip
				// address: a port from below the ephemeral range, which
				// no outgoing connection takes meanwhile.
				var err error
				if s.clusterBind, err = cli.FreePort(); err != nil {
					return fail(err)
				}
			}
			if i > 0 {
				s.join = []string{procs[0].addrs.Gossip}
			}
		}
		p, err := startCollector(ctx, bin, fmt.Sprintf("c%d", i), dir, collectorYAML(s, paths))
		if err != nil {
			return fail(err)
		}
		procs = append(procs, p)
		log.Info("collector started", "name", p.name, "grpc", p.addrs.GRPC, "http", p.addrs.HTTP, "log", p.logPath)
	}
	if n > 1 {
		if err := waitMembers(ctx, procs); err != nil {
			return fail(err)
		}
	}
	return procs, nil
}

// startCollector starts one collector with the configuration y and waits
// for its ready file.
func startCollector(ctx context.Context, bin, name, dir, y string) (*collectorProc, error) {
	cfgPath := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(cfgPath, []byte(y), 0o644); err != nil {
		return nil, fmt.Errorf("collector %s: writing its configuration: %w", name, err)
	}
	ready := filepath.Join(dir, name+".ready")
	p := &collectorProc{name: name, yaml: y, logPath: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, fmt.Errorf("collector %s: %w", name, err)
	}
	p.cmd = exec.Command(bin, "-config", cfgPath, "-ready-file", ready)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting collector %s (%s): %w", name, bin, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	deadline := time.After(30 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil {
			if err := json.Unmarshal(b, &p.addrs); err != nil {
				p.stop(5 * time.Second)
				return nil, fmt.Errorf("collector %s: reading its ready file: %w", name, err)
			}
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("collector %s exited before listening (%v): %s", name, p.waitErr, tail(p.logPath))
		case <-ctx.Done():
			p.stop(5 * time.Second)
			return nil, ctx.Err()
		case <-deadline:
			p.stop(5 * time.Second)
			return nil, fmt.Errorf("collector %s not listening after 30s: %s", name, tail(p.logPath))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitMembers waits until every spawned collector lists all of them as
// members of the cluster.
func waitMembers(ctx context.Context, procs []*collectorProc) error {
	var qs []owlv1.QueryServiceClient
	for _, p := range procs {
		conn, err := dialQuery(p.addrs.GRPC)
		if err != nil {
			return err
		}
		defer conn.Close()
		qs = append(qs, owlv1.NewQueryServiceClient(conn))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		joined := 0
		for _, q := range qs {
			r, err := q.ListCollectors(ctx, &owlv1.ListCollectorsRequest{})
			if err == nil && len(r.GetCollectors()) == len(procs) {
				joined++
			}
		}
		if joined == len(procs) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the %d collectors did not form a cluster within 30s (%d see all members); see their logs", len(procs), joined)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop ends the collector with SIGTERM (it leaves its cluster and closes
// its store), killing it when it takes longer than d.
func (p *collectorProc) stop(d time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// procStats are a process's CPU time so far and its peak memory; ok is
// false when they could not be read (the process is gone).
type procStats struct {
	cpu       time.Duration
	peakBytes int64 // VmHWM
	peakAnon  int64 // the most RssAnon seen (sampleAnon)
	ok        bool
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times:
// 100 on every Linux architecture Go runs on.
const clockTicks = 100

// stats reads the collector's CPU time (user + system) and peak resident
// memory (VmHWM) from /proc.
func (p *collectorProc) stats() (procStats, error) {
	pid := p.cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStats{}, fmt.Errorf("collector %s: %w", p.name, err)
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ')'. utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(string(b), ')')
	var f []string
	if i >= 0 {
		f = strings.Fields(string(b[i+1:]))
	}
	if len(f) < 13 {
		return procStats{}, fmt.Errorf("collector %s: unexpected /proc/%d/stat", p.name, pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return procStats{}, fmt.Errorf("collector %s: /proc/%d/stat: %w", p.name, pid, err)
	}
	s := procStats{cpu: time.Duration(ut+st) * time.Second / clockTicks}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("collector %s: %w", p.name, err)
	}
	if s.peakBytes, err = statusBytes(status, "VmHWM"); err != nil {
		return s, fmt.Errorf("collector %s: %w", p.name, err)
	}
	if anon, err := statusBytes(status, "RssAnon"); err == nil {
		p.noteAnon(anon)
	}
	s.peakAnon = p.peakAnon.Load()
	s.ok = true
	return s, nil
}

// statusBytes reads a field in kB of /proc/PID/status.
func statusBytes(status []byte, field string) (int64, error) {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s %q: %w", field, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/PID/status", field)
}

// noteAnon keeps the most anonymous memory seen.
func (p *collectorProc) noteAnon(b int64) {
	for {
		old := p.peakAnon.Load()
		if b <= old || p.peakAnon.CompareAndSwap(old, b) {
			return
		}
	}
}

// sampleAnon reads the collector's anonymous resident memory every 200 ms
// until ctx ends (the kernel keeps no peak of it).
func (p *collectorProc) sampleAnon(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
			if err != nil {
				return // exited
			}
			if anon, err := statusBytes(status, "RssAnon"); err == nil {
				p.noteAnon(anon)
			}
		}
	}
}

// tail is the end of a log file, for an error message.
func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	const keep = 2000
	if st, err := f.Stat(); err == nil && st.Size() > keep {
		_, _ = f.Seek(st.Size()-keep, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return "log " + path + ":\n" + string(b)
}
