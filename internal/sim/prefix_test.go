package sim

import (
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/capture"
)

func TestParsePrefixReorder(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PrefixReorder
		err  string
	}{
		{"10.1.2.0/24=0.02", PrefixReorder{netip.MustParsePrefix("10.1.2.0/24"), 0.02}, ""},
		{" 2001:db8::/48=1 ", PrefixReorder{netip.MustParsePrefix("2001:db8::/48"), 1}, ""},
		{"10.1.2.7/24=0", PrefixReorder{netip.MustParsePrefix("10.1.2.0/24"), 0}, ""},
		{"10.99.0.2=0.5", PrefixReorder{netip.MustParsePrefix("10.99.0.2/32"), 0.5}, ""},
		{"fd99::1=0.5", PrefixReorder{netip.MustParsePrefix("fd99::1/128"), 0.5}, ""},
		{"10.1.2.0/24", PrefixReorder{}, "want PREFIX=PROBABILITY"},
		{"10.1.2.0/33=0.1", PrefixReorder{}, "bad prefix"},
		{"example.com=0.1", PrefixReorder{}, "bad prefix"},
		{"10.1.2.0/24=1.5", PrefixReorder{}, "not in [0, 1]"},
		{"10.1.2.0/24=-0.1", PrefixReorder{}, "not in [0, 1]"},
		{"10.1.2.0/24=NaN", PrefixReorder{}, "not in [0, 1]"},
		{"10.1.2.0/24=2%", PrefixReorder{}, "not in [0, 1]"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParsePrefixReorder(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestPrefixReordersFlag(t *testing.T) {
	var ps []PrefixReorder
	f := PrefixReorders{P: &ps}
	if err := f.Set("10.1.2.0/24=0.02"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set("10.1.0.0/16=0.01,2001:db8::/48=0.1"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set("10.9.0.0/16"); err == nil {
		t.Error("a prefix without a probability was taken")
	}
	if got, want := f.String(), "10.1.2.0/24=0.02,10.1.0.0/16=0.01,2001:db8::/48=0.1"; got != want {
		t.Errorf("flag %q, want %q", got, want)
	}
	for _, tc := range []struct {
		addr string
		want float64
	}{{"10.1.2.9", 0.02}, {"10.1.3.9", 0.01}, {"::ffff:10.1.2.9", 0.02}, {"2001:db8::1", 0.1}, {"10.2.0.1", 0.5}} {
		if got := ReorderOf(ps, netip.MustParseAddr(tc.addr), 0.5); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.addr, got, tc.want)
		}
	}
	m := Impairment{Delay: Constant{0}, PrefixReorder: append(ps, ps[0])}
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a prefix given twice: %v", err)
	}
	m.PrefixReorder = ps
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "reorder extra") {
		t.Errorf("per-prefix reordering without an extra delay: %v", err)
	}
}

// TestImpairReordersOnePrefix holds back half the packets from the
// bundled trace's IPv4 server and none of the others.
func TestImpairReordersOnePrefix(t *testing.T) {
	link, frames, err := ReadCapture("../../testdata/trace.pcap")
	if err != nil {
		t.Fatal(err)
	}
	base := 100 * time.Microsecond
	m := Impairment{Delay: Constant{base}, ReorderExtra: time.Millisecond, Seed: 7,
		PrefixReorder: []PrefixReorder{{netip.MustParsePrefix("10.99.0.2/32"), 0.5}}}
	tr, err := Impair(link, frames, capture.DefaultIdentityConfig(), m)
	if err != nil {
		t.Fatal(err)
	}
	held := map[netip.Addr][2]int{}
	for _, r := range tr.Truth {
		c := held[r.Flow.Src]
		c[1]++
		if r.DelayNS() > int64(base) {
			c[0]++
		}
		held[r.Flow.Src] = c
	}
	server := netip.MustParseAddr("10.99.0.2")
	if c := held[server]; c[1] < 10_000 || math.Abs(float64(c[0])/float64(c[1])-0.5) > 0.02 {
		t.Errorf("%v: %d of %d held back, want half", server, c[0], c[1])
	}
	for a, c := range held {
		if a != server && c[0] != 0 {
			t.Errorf("%v: %d of %d held back, want none", a, c[0], c[1])
		}
	}
	if len(held) < 4 {
		t.Errorf("packets from %d addresses, want the trace's 4", len(held))
	}
}
