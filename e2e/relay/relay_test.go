package main

import (
	"io"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

func TestParseConfig(t *testing.T) {
	base := []string{"-a", "rin", "-b", "rout"}
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"defaults", nil, ""},
		{"prefixes", []string{"-reorder", "0.005", "-reorder-prefix", "10.78.0.0/24=0.05", "-reorder-prefix", "10.78.0.7=1,2001:db8::/48=0.1", "-flow-order"}, ""},
		{"no probability", []string{"-reorder-prefix", "10.78.0.0/24"}, "want PREFIX=PROBABILITY"},
		{"bad prefix", []string{"-reorder-prefix", "10.78.0.0/33=0.1"}, "bad prefix"},
		{"probability above 1", []string{"-reorder-prefix", "10.78.0.0/24=1.5"}, "not in [0, 1]"},
		{"percent", []string{"-reorder-prefix", "10.78.0.0/24=5%"}, "not in [0, 1]"},
		{"given twice", []string{"-reorder-prefix", "10.78.0.0/24=0.1", "-reorder-prefix", "10.78.0.9/24=0.2"}, "given twice"},
		{"no extra hold", []string{"-reorder-prefix", "10.78.0.0/24=0.1", "-reorder-extra", "0"}, "positive reorder extra"},
		{"bad loss", []string{"-loss", "1.5"}, "loss probability"},
		{"bad delay", []string{"-delay", "gauss:mean=1ms"}, "unknown delay model"},
		{"stray argument", []string{"rin"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(append(append([]string(nil), base...), tc.args...), io.Discard)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.a != "rin" || c.b != "rout" || c.imp.Delay == nil {
				t.Errorf("config %+v", c)
			}
		})
	}
	if _, err := parseConfig([]string{"-b", "rout"}, io.Discard); err == nil || !strings.Contains(err.Error(), "needs -a and -b") {
		t.Errorf("without -a: %v", err)
	}
	c, err := parseConfig(append(base, "-reorder-prefix", "10.78.0.0/24=0.05,2001:db8::/48=0.1"), io.Discard)
	if err != nil || len(c.imp.PrefixReorder) != 2 || c.imp.PrefixReorder[0].Prefix != netip.MustParsePrefix("10.78.0.0/24") ||
		c.imp.PrefixReorder[0].Reorder != 0.05 {
		t.Errorf("prefixes %v, %v", c.imp.PrefixReorder, err)
	}
}

// tcpFrame is an Ethernet frame of a TCP segment from src:sport to
// 10.77.0.2:80 with sequence number seq.
func tcpFrame(t *testing.T, src string, sport uint16, seq uint32) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.ParseIP(src).To4(), DstIP: net.IPv4(10, 77, 0, 2).To4()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: 80, Seq: seq, ACK: true, Window: 1000}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, eth, ip, tcp, gopacket.Payload(make([]byte, 100))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sent is a planned frame: its place in its flow and when it leaves.
type sent struct {
	i   int
	due time.Time
}

// planned plans n frames of one flow from src, 5 µs apart, and returns
// when they leave (a duplicate twice) and how many were dropped.
func planned(t *testing.T, p *planner, src string, n int) (out []sent, dropped int) {
	t.Helper()
	now := time.Unix(1e9, 0)
	var d [2]time.Time
	for i := range n {
		k := p.plan(tcpFrame(t, src, 40000, uint32(100*i)), now.Add(time.Duration(i)*5*time.Microsecond), &d)
		if k == 0 {
			dropped++
		}
		for _, at := range d[:k] {
			out = append(out, sent{i, at})
		}
	}
	return out, dropped
}

// reordered counts the frames that leave after one that came after them,
// as the relay's queue sends them (by due time, then arrival).
func reordered(out []sent) int {
	s := slices.Clone(out)
	slices.SortStableFunc(s, func(a, b sent) int { return a.due.Compare(b.due) })
	n := 0
	for k := 1; k < len(s); k++ {
		if s[k].i < s[k-1].i {
			n++
		}
	}
	return n
}

// TestPlanPrefix: a prefix's frames are held back with its probability
// and the others with -reorder's, under a constant delay.
func TestPlanPrefix(t *testing.T) {
	cfg, err := parseConfig([]string{"-a", "x", "-b", "y", "-delay", "const:100us", "-reorder", "0.01",
		"-reorder-prefix", "10.78.0.0/24=0.2", "-reorder-extra", "3ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPlanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	for _, tc := range []struct {
		src  string
		want float64
	}{{"10.78.0.1", 0.2}, {"10.77.0.1", 0.01}} {
		out, _ := planned(t, p, tc.src, n)
		held := 0
		for _, f := range out {
			if extra := f.due.Sub(time.Unix(1e9, 0).Add(time.Duration(f.i) * 5 * time.Microsecond)); extra > 100*time.Microsecond {
				held++
				if extra > 3100*time.Microsecond {
					t.Fatalf("%s frame %d held %v, more than the delay and -reorder-extra", tc.src, f.i, extra)
				}
			}
		}
		if got := float64(held) / n; math.Abs(got-tc.want) > 4*math.Sqrt(tc.want*(1-tc.want)/n) {
			t.Errorf("%s: %.4f of the frames held back, want %g", tc.src, got, tc.want)
		}
	}
}

// TestPlanFlowOrder: the delay's jitter reorders a flow's frames sent
// closer together than it unless -flow-order; with it, only the frames
// held back (2%) and some copies (up to 1%) leave after a later frame;
// loss and duplicates are as asked.
func TestPlanFlowOrder(t *testing.T) {
	const n = 20000
	for _, tc := range []struct {
		flowOrder bool
		lo, hi    float64 // share of frames reordered
	}{{false, 0.2, 1}, {true, 0.015, 0.035}} {
		args := []string{"-a", "x", "-b", "y", "-delay", "weibull:shape=0.65,scale=100us,base=50us", "-reorder", "0.02",
			"-reorder-extra", "3ms", "-loss", "0.01", "-duplicate", "0.01"}
		if tc.flowOrder {
			args = append(args, "-flow-order")
		}
		cfg, err := parseConfig(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		p, err := newPlanner(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out, dropped := planned(t, p, "10.77.0.1", n)
		dups := len(out) - n + dropped
		got := float64(reordered(out)) / n
		t.Logf("-flow-order %t: %.4f of the frames reordered, %d dropped, %d duplicated", tc.flowOrder, got, dropped, dups)
		if got < tc.lo || got > tc.hi {
			t.Errorf("-flow-order %t: %.4f of the frames reordered, want [%g, %g]", tc.flowOrder, got, tc.lo, tc.hi)
		}
		if dropped < n/200 || dropped > n/50 || dups < n/200 || dups > n/50 {
			t.Errorf("%d of %d dropped, %d duplicated: want about 1%% each", dropped, n, dups)
		}
	}
}
