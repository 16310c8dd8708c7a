// Command trafficgen makes real traffic between two hosts for owl's recorded
// traces and end-to-end tests: HTTP bulk downloads and small request/response
// exchanges over TCP, DNS queries over UDP, and a paced UDP stream.
//
// Run "trafficgen -mode server" on one host and "trafficgen -mode client
// -server ADDR" on the other. The client runs for -duration and prints what
// it exchanged.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/errgroup"
)

// config holds the command's settings.
type config struct {
	mode       string
	server     string
	httpPort   int
	dnsPort    int
	udpPort    int
	duration   time.Duration
	bulkFlows  int
	bulkRate   int // bytes per second per bulk flow
	rrRate     int // HTTP request/response exchanges per second
	dnsRate    int // DNS queries per second
	udpRate    int // UDP datagrams per second
	udpPayload int // bytes per UDP datagram
}

func main() {
	var cfg config
	flag.StringVar(&cfg.mode, "mode", "", "server or client")
	flag.StringVar(&cfg.server, "server", "", "server address (client mode)")
	flag.IntVar(&cfg.httpPort, "http-port", 8080, "HTTP port")
	flag.IntVar(&cfg.dnsPort, "dns-port", 5353, "DNS port (UDP)")
	flag.IntVar(&cfg.udpPort, "udp-port", 9000, "UDP sink port")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "how long the client runs")
	flag.IntVar(&cfg.bulkFlows, "bulk-flows", 2, "concurrent HTTP bulk downloads")
	flag.IntVar(&cfg.bulkRate, "bulk-rate", 1<<20, "bytes per second per bulk download (0: unlimited)")
	flag.IntVar(&cfg.rrRate, "rr-rate", 100, "small HTTP request/response exchanges per second")
	flag.IntVar(&cfg.dnsRate, "dns-rate", 200, "DNS queries per second")
	flag.IntVar(&cfg.udpRate, "udp-rate", 500, "UDP datagrams per second")
	flag.IntVar(&cfg.udpPayload, "udp-payload", 200, "UDP payload bytes")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	switch cfg.mode {
	case "server":
		err = runServer(ctx, cfg, log)
	case "client":
		err = runClient(ctx, cfg, log)
	default:
		err = fmt.Errorf("-mode must be server or client, got %q", cfg.mode)
	}
	if err != nil {
		log.Error("trafficgen failed", "err", err)
		os.Exit(1)
	}
}

// runServer serves HTTP, DNS and a UDP sink until ctx ends.
func runServer(ctx context.Context, cfg config, log *slog.Logger) error {
	mux := http.NewServeMux()
	// /bulk streams pseudo-random bytes at the rate the client asks for.
	mux.HandleFunc("/bulk", func(w http.ResponseWriter, r *http.Request) {
		rate, _ := strconv.Atoi(r.URL.Query().Get("rate"))
		dur, _ := time.ParseDuration(r.URL.Query().Get("dur"))
		if dur <= 0 || dur > time.Hour {
			dur = 5 * time.Second
		}
		streamBytes(r.Context(), w, rate, dur)
	})
	mux.HandleFunc("/rr", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if n <= 0 || n > 1<<16 {
			n = 512
		}
		buf := make([]byte, n)
		_, _ = rand.Read(buf)
		_, _ = w.Write(buf)
	})
	hs := &http.Server{Addr: net.JoinHostPort("", strconv.Itoa(cfg.httpPort)), Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	dmux := dns.NewServeMux()
	dmux.HandleFunc(".", func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		for _, qq := range q.Question {
			if qq.Qtype == dns.TypeA {
				rr, err := dns.NewRR(qq.Name + " 60 IN A 192.0.2.1")
				if err == nil {
					m.Answer = append(m.Answer, rr)
				}
			}
		}
		_ = w.WriteMsg(m)
	})
	ds := &dns.Server{Addr: net.JoinHostPort("", strconv.Itoa(cfg.dnsPort)), Net: "udp", Handler: dmux}

	uc, err := net.ListenPacket("udp", net.JoinHostPort("", strconv.Itoa(cfg.udpPort)))
	if err != nil {
		return fmt.Errorf("listening on UDP port %d: %w", cfg.udpPort, err)
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := hs.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	g.Go(func() error { return ds.ListenAndServe() })
	g.Go(func() error {
		buf := make([]byte, 65536)
		for {
			if _, _, err := uc.ReadFrom(buf); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("udp sink: %w", err)
			}
		}
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		_ = ds.ShutdownContext(sctx)
		_ = uc.Close()
		return nil
	})
	log.Info("trafficgen server up", "http", cfg.httpPort, "dns", cfg.dnsPort, "udp", cfg.udpPort)
	return g.Wait()
}

// streamBytes writes random bytes at rate bytes/s (0: as fast as possible) for dur.
func streamBytes(ctx context.Context, w io.Writer, rate int, dur time.Duration) {
	chunk := make([]byte, 16<<10)
	_, _ = rand.Read(chunk)
	end := time.Now().Add(dur)
	start := time.Now()
	var sent int
	for time.Now().Before(end) && ctx.Err() == nil {
		if rate > 0 {
			due := start.Add(time.Duration(float64(sent) / float64(rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		n, err := w.Write(chunk)
		sent += n
		if err != nil {
			return
		}
	}
}

// counters tallies what the client exchanged.
type counters struct {
	bulkBytes, rr, dnsOK, dnsErr, udp atomic.Int64
}

// runClient drives all traffic kinds against the server for cfg.duration.
func runClient(ctx context.Context, cfg config, log *slog.Logger) error {
	if cfg.server == "" {
		return errors.New("client mode needs -server")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	base := "http://" + net.JoinHostPort(cfg.server, strconv.Itoa(cfg.httpPort))
	var c counters
	var wg sync.WaitGroup

	for i := 0; i < cfg.bulkFlows; i++ {
		wg.Go(func() { bulkDownload(ctx, cfg, base, &c) })
	}
	if cfg.rrRate > 0 {
		wg.Go(func() { requestResponses(ctx, cfg, base, &c) })
	}
	if cfg.dnsRate > 0 {
		wg.Go(func() { dnsQueries(ctx, cfg, &c) })
	}
	if cfg.udpRate > 0 {
		conn, err := net.Dial("udp", net.JoinHostPort(cfg.server, strconv.Itoa(cfg.udpPort)))
		if err != nil {
			return fmt.Errorf("dialing UDP sink: %w", err)
		}
		defer conn.Close()
		wg.Go(func() { udpStream(ctx, cfg, conn, &c) })
	}
	wg.Wait()
	log.Info("trafficgen client done", "bulk_bytes", c.bulkBytes.Load(), "rr", c.rr.Load(),
		"dns_ok", c.dnsOK.Load(), "dns_err", c.dnsErr.Load(), "udp", c.udp.Load())
	return nil
}

// bulkDownload fetches one paced HTTP bulk download from base and counts its bytes.
func bulkDownload(ctx context.Context, cfg config, base string, c *counters) {
	url := fmt.Sprintf("%s/bulk?rate=%d&dur=%s", base, cfg.bulkRate, cfg.duration)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.bulkBytes.Add(n)
}

// requestResponses makes small HTTP exchanges with base at cfg.rrRate until ctx ends.
func requestResponses(ctx context.Context, cfg config, base string, c *counters) {
	// A fresh connection now and then gives many short TCP flows.
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	cl := &http.Client{Transport: tr}
	every(ctx, cfg.rrRate, func(i int) {
		if i%20 == 0 {
			tr.CloseIdleConnections()
		}
		url := fmt.Sprintf("%s/rr?n=%d", base, 200+(i*37)%3000)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return
		}
		resp, err := cl.Do(req)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.rr.Add(1)
	})
}

// dnsQueries sends DNS A queries to the server at cfg.dnsRate until ctx ends.
func dnsQueries(ctx context.Context, cfg config, c *counters) {
	cl := &dns.Client{Timeout: time.Second}
	addr := net.JoinHostPort(cfg.server, strconv.Itoa(cfg.dnsPort))
	every(ctx, cfg.dnsRate, func(i int) {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("host%d.example.org.", i%1000), dns.TypeA)
		if _, _, err := cl.ExchangeContext(ctx, m, addr); err != nil {
			c.dnsErr.Add(1)
			return
		}
		c.dnsOK.Add(1)
	})
}

// udpStream writes random datagrams to conn at cfg.udpRate until ctx ends.
func udpStream(ctx context.Context, cfg config, conn net.Conn, c *counters) {
	buf := make([]byte, cfg.udpPayload)
	every(ctx, cfg.udpRate, func(i int) {
		_, _ = rand.Read(buf)
		if _, err := conn.Write(buf); err == nil {
			c.udp.Add(1)
		}
	})
}

// every calls f(i) rate times per second until ctx ends, without overlapping calls.
func every(ctx context.Context, rate int, f func(i int)) {
	start := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		f(i)
	}
}
