// Package cli is what owl's commands share: configuration precedence
// (defaults, then a YAML file, then the flags that were set), logging flags
// and flag helpers; and loopback ports for processes restarted on the
// same address.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// FlagNoter is a configuration that takes note of the flags given on the
// command line, e.g. to tell a value given from a default: Parse calls
// NoteFlags on the result with their names.
type FlagNoter interface {
	NoteFlags(names []string)
}

// Parse builds a configuration from args. bind binds a command's flags to a
// configuration; load reads the YAML file named by -config into one. The
// result is the defaults, overridden by the file, overridden by the flags
// given on the command line.
func Parse[T any](name string, args []string, def func() T, bind func(*flag.FlagSet, *T), load func(string, *T) error) (T, *slog.Logger, error) {
	cfg := def()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	configPath := fs.String("config", "", "YAML configuration file (flags given on the command line override it)")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	format := fs.String("log-format", "text", "log format: text or json")
	bind(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return cfg, nil, err
	}
	if fs.NArg() > 0 {
		return cfg, nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	log, err := Logger(os.Stderr, *level, *format)
	if err != nil {
		return cfg, nil, err
	}
	var given []string
	fs.Visit(func(f *flag.Flag) { given = append(given, f.Name) })
	if *configPath == "" {
		noteFlags(&cfg, given)
		return cfg, log, nil
	}
	fromFile := def()
	if err := load(*configPath, &fromFile); err != nil {
		return cfg, nil, err
	}
	again := flag.NewFlagSet(name, flag.ContinueOnError)
	again.SetOutput(io.Discard)
	bind(again, &fromFile)
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		if again.Lookup(f.Name) == nil {
			return // -config and logging flags
		}
		if err := again.Set(f.Name, f.Value.String()); err != nil {
			errs = append(errs, fmt.Errorf("-%s: %w", f.Name, err))
		}
	})
	noteFlags(&fromFile, given)
	return fromFile, log, errors.Join(errs...)
}

// noteFlags tells cfg the flags given, when it takes note of them.
func noteFlags(cfg any, names []string) {
	if n, ok := cfg.(FlagNoter); ok {
		n.NoteFlags(names)
	}
}

// Logger returns a slog logger writing to w.
func Logger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: want text or json", format)
}

// Uint8List is a flag holding comma-separated small integers, e.g. "0,4".
type Uint8List struct{ P *[]uint8 }

func (l Uint8List) String() string {
	if l.P == nil {
		return ""
	}
	s := make([]string, len(*l.P))
	for i, v := range *l.P {
		s[i] = strconv.Itoa(int(v))
	}
	return strings.Join(s, ",")
}

// Set parses a comma-separated list.
func (l Uint8List) Set(s string) error {
	var out []uint8
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 8)
		if err != nil {
			return fmt.Errorf("%q is not a list of numbers 0–255", s)
		}
		out = append(out, uint8(v))
	}
	*l.P = out
	return nil
}

// IntPairs is a flag holding comma-separated pairs A:B of integers.
type IntPairs struct{ P *[][2]int }

func (l IntPairs) String() string {
	if l.P == nil {
		return ""
	}
	s := make([]string, len(*l.P))
	for i, v := range *l.P {
		s[i] = fmt.Sprintf("%d:%d", v[0], v[1])
	}
	return strings.Join(s, ",")
}

// Set parses a comma-separated list of A:B.
func (l IntPairs) Set(s string) error {
	var out [][2]int
	for _, f := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(f), ":")
		x, err1 := strconv.Atoi(a)
		y, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("%q is not a list of N:M pairs", s)
		}
		out = append(out, [2]int{x, y})
	}
	*l.P = out
	return nil
}

// ByteSizes is a flag holding comma-separated sizes in bytes, each with
// an optional binary suffix k (KiB) or m (MiB): "16k,256k,1m".
type ByteSizes struct{ P *[]int }

func (l ByteSizes) String() string {
	if l.P == nil {
		return ""
	}
	s := make([]string, len(*l.P))
	for i, v := range *l.P {
		switch {
		case v > 0 && v%(1<<20) == 0:
			s[i] = fmt.Sprintf("%dm", v>>20)
		case v > 0 && v%(1<<10) == 0:
			s[i] = fmt.Sprintf("%dk", v>>10)
		default:
			s[i] = strconv.Itoa(v)
		}
	}
	return strings.Join(s, ",")
}

// Set parses a comma-separated list of sizes.
func (l ByteSizes) Set(s string) error {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		shift := 0
		switch {
		case strings.HasSuffix(f, "k"):
			f, shift = f[:len(f)-1], 10
		case strings.HasSuffix(f, "m"):
			f, shift = f[:len(f)-1], 20
		}
		v, err := strconv.ParseUint(f, 10, 31-shift)
		if err != nil {
			return fmt.Errorf("%q is not a list of sizes in bytes (e.g. 16k,256k,1m; at most 2 GiB each)", s)
		}
		out = append(out, int(v)<<shift)
	}
	*l.P = out
	return nil
}

// FreePort returns a loopback address whose port, TCP and UDP, was free
// a moment ago, for a process restarted on the same address (tests,
// owl-load). The port is below the kernel's ephemeral range: a port a
// killed process held, taken from that range, can go meanwhile to any
// outgoing connection as its local port, and then stays taken (a chaos
// run's restarted member found its gossip port in use as the probes
// reconnected; most likely so). Ports are picked at random, not by the
// kernel: two callers may pick one port at once, rarely.
func FreePort() (string, error) {
	lo := ephemeralLow()
	first := lo / 2
	start := first + int(time.Now().UnixNano()%int64(lo-first))
	for i := range 512 {
		port := first + (start-first+i)%(lo-first)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		return addr, nil
	}
	return "", fmt.Errorf("no free port in [%d, %d) after 512 tries", first, lo)
}

// ephemeralLow is the first port of the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), 32768 where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if f := strings.Fields(string(b)); err == nil && len(f) == 2 {
		if lo, err := strconv.Atoi(f[0]); err == nil && lo >= 2048 {
			return lo
		}
	}
	return 32768
}
