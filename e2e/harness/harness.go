// Package harness runs owl's binaries as real processes for end-to-end
// tests and the demo: it builds them, starts a collector and probes on
// loopback, and queries the collector over gRPC.
package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// Env is a directory with built binaries and the processes started from it.
type Env struct {
	Dir string
	Bin string

	mu    sync.Mutex
	procs []*Proc
}

// ModuleRoot finds the directory of owl's go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside owl's module")
	}
	return filepath.Dir(mod), nil
}

// NewEnv builds the commands (probe, collector, tracegen, the test tools
// relay and trafficgen, and facebook/time's ptp4u grandmaster) into dir/bin,
// with the race detector when OWL_E2E_RACE=1. Race-built commands skip the
// probe's and the collector's profile-guided optimization (default.pgo):
// it speeds nothing a race run measures and costs a build of every
// dependency per profile.
func NewEnv(dir string) (*Env, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "bin")
	args := []string{"build", "-o", bin + string(filepath.Separator)}
	if os.Getenv("OWL_E2E_RACE") == "1" {
		args = append(args, "-race", "-pgo=off")
	}
	cmd := exec.Command("go", append(args, "./cmd/probe", "./cmd/collector", "./cmd/tracegen", "./e2e/relay", "./e2e/trafficgen")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building owl: %v\n%s", err, out)
	}
	// ptp4u is not ours: built without the race detector, whose reports
	// on it are not owl's to fix.
	cmd = exec.Command("go", "build", "-o", bin+string(filepath.Separator), "github.com/facebook/time/cmd/ptp4u")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building ptp4u: %v\n%s", err, out)
	}
	return &Env{Dir: dir, Bin: bin}, nil
}

// Proc is a started process whose output goes to a log file.
type Proc struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// Start runs a binary of the environment.
func (e *Env) Start(name, binary string, args ...string) (*Proc, error) {
	return e.StartIn("", name, binary, args...)
}

// StartIn runs a binary of the environment in a network namespace ("" for
// the current one).
func (e *Env) StartIn(netns, name, binary string, args ...string) (*Proc, error) {
	if filepath.Base(binary) == "probe" {
		var err error
		if args, err = probeTLS(args); err != nil {
			return nil, err
		}
	}
	logPath := filepath.Join(e.Dir, name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(e.Bin, binary)
	if filepath.IsAbs(binary) || strings.Contains(binary, "/") {
		path = binary
	} else if _, err := os.Stat(path); err != nil {
		if p, err := exec.LookPath(binary); err == nil {
			path = p // a system tool (tcpdump)
		}
	}
	if netns != "" {
		args = append([]string{"netns", "exec", netns, path}, args...)
		path = "ip"
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p, nil
}

// Wait waits up to d for the process to exit and returns its error.
func (p *Proc) Wait(d time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		return fmt.Errorf("%s still running after %v", p.Name, d)
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill ends the process at once (SIGKILL), as a crash would.
func (p *Proc) Kill() {
	if !p.Exited() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Stop asks the process to shut down (SIGTERM) and waits up to d.
func (p *Proc) Stop(d time.Duration) error {
	return p.Signal(syscall.SIGTERM, d)
}

// Signal sends sig and waits up to d for the process to end.
func (p *Proc) Signal(sig os.Signal, d time.Duration) error {
	if p.Exited() {
		return p.err
	}
	_ = p.cmd.Process.Signal(sig)
	if err := p.Wait(d); err != nil {
		p.Kill()
		return err
	}
	return nil
}

// Freeze stops the process (SIGSTOP) for d and lets it go on
// (SIGCONT), as a machine that gives it no CPU for that long would.
func (p *Proc) Freeze(d time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stopping %s: %w", p.Name, err)
	}
	time.Sleep(d)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("continuing %s: %w", p.Name, err)
	}
	return nil
}

// Raced reports whether a race-detector build of the process reported a race.
func (p *Proc) Raced() bool { return strings.Contains(p.Log(), "WARNING: DATA RACE") }

// Log returns what the process wrote.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// RaceReports is the data race reports of the environment's processes
// (each from the detector's warning to its closing line).
func (e *Env) RaceReports() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, p := range e.procs {
		log := p.Log()
		for {
			i := strings.Index(log, "WARNING: DATA RACE")
			if i < 0 {
				break
			}
			end := strings.Index(log[i:], "==================")
			if end < 0 {
				end = len(log) - i
			}
			fmt.Fprintf(&b, "%s:\n%s\n", p.Name, log[i:i+end])
			log = log[i+end:]
		}
	}
	return b.String()
}

// Close kills every process still running and returns the names of those
// whose race detector reported a data race.
func (e *Env) Close() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var raced []string
	for _, p := range e.procs {
		p.Kill()
		if p.Raced() {
			raced = append(raced, p.Name)
		}
	}
	return raced
}

// Addrs are a collector's bound addresses.
type Addrs struct {
	GRPC   string `json:"grpc"`
	HTTP   string `json:"http"`
	Gossip string `json:"gossip"`
}

// StartCollector writes config as the collector's YAML, starts it with a
// ready file and waits until it listens.
func (e *Env) StartCollector(name, config string, extra ...string) (*Proc, Addrs, error) {
	cfgPath := filepath.Join(e.Dir, name+".yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return nil, Addrs{}, err
	}
	ready := filepath.Join(e.Dir, name+".ready")
	os.Remove(ready)
	args, err := collectorTLS(name, config, append([]string{"-config", cfgPath, "-ready-file", ready}, extra...))
	if err != nil {
		return nil, Addrs{}, err
	}
	p, err := e.Start(name, "collector", args...)
	if err != nil {
		return nil, Addrs{}, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(ready); err == nil {
			var a Addrs
			if err := json.Unmarshal(b, &a); err != nil {
				return p, Addrs{}, err
			}
			return p, a, nil
		}
		if p.Exited() {
			return p, Addrs{}, fmt.Errorf("collector exited: %v\n%s", p.err, p.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p, Addrs{}, fmt.Errorf("collector not listening after 15s\n%s", p.Log())
}

// WaitEpochs polls GetPathStats until the path has a result (of any
// status) for each of the epochs, or ctx ends. It returns all the path's
// results. Tests wait for the epochs their traffic filled: the epoch in
// which a traffic client was seen to exit may have seen none of its
// packets (a slow exit), and then has no result at all. An epoch's result
// is final once the next one is reconciled too (packets that crossed the
// boundary move from lost to boundary-matched), so a test that checks an
// epoch's counts waits for the next one as well.
func WaitEpochs(ctx context.Context, q owlv1.QueryServiceClient, path string, epochs []int64) ([]*owlv1.PathStats, error) {
	for {
		resp, err := q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: path, Limit: 100000})
		var missing []int64
		if err == nil {
			have := map[int64]bool{}
			for _, s := range resp.GetStats() {
				have[s.GetEpoch()] = true
			}
			for _, e := range epochs {
				if !have[e] {
					missing = append(missing, e)
				}
			}
			if len(missing) == 0 {
				return resp.GetStats(), nil
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return nil, fmt.Errorf("path %s: querying results: %w", path, err)
			}
			return nil, fmt.Errorf("path %s: no result for epochs %v (of %d asked for) after waiting", path, missing, len(epochs))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Epochs lists the epochs from first to last.
func Epochs(first, last int64) []int64 {
	var out []int64
	for e := first; e <= last; e++ {
		out = append(out, e)
	}
	return out
}

// WaitStats polls GetPathStats until the path has at least n results (of
// any status) or ctx ends.
func WaitStats(ctx context.Context, q owlv1.QueryServiceClient, path string, n int) ([]*owlv1.PathStats, error) {
	for {
		resp, err := q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: path, Limit: 100000})
		if err == nil && len(resp.GetStats()) >= n {
			return resp.GetStats(), nil
		}
		select {
		case <-ctx.Done():
			got := 0
			if resp != nil {
				got = len(resp.GetStats())
			}
			return nil, fmt.Errorf("path %s: %d of %d results after waiting (last error %v)", path, got, n, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// PeakRSS is the most memory the running process has held (VmHWM), in
// bytes.
func (p *Proc) PeakRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("%s: no VmHWM in /proc/%d/status", p.Name, p.cmd.Process.Pid)
}

// CPUTime is the CPU time, user and system, of a process that exited.
func (p *Proc) CPUTime() time.Duration {
	if st := p.cmd.ProcessState; st != nil {
		return st.UserTime() + st.SystemTime()
	}
	return 0
}
