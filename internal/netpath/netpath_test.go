package netpath

import (
	"bytes"
	"net/netip"
	"testing"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
)

func flow(src, dst string, sp, dp uint16, proto uint8) capture.FlowKey {
	return capture.FlowKey{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), SrcPort: sp, DstPort: dp, Proto: proto}
}

func TestMatch(t *testing.T) {
	s := Selector{SrcCIDRs: []string{"10.0.0.0/8", "fd00::/8"}, DstCIDRs: []string{"192.0.2.7"}, Protocol: "tcp", DstPorts: []string{"80", "8000-8999"}}
	m, err := s.Compile()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		f    capture.FlowKey
		want bool
	}{
		{flow("10.1.2.3", "192.0.2.7", 1234, 80, 6), true},
		{flow("10.1.2.3", "192.0.2.7", 1234, 8443, 6), true},
		{flow("10.1.2.3", "192.0.2.7", 1234, 9000, 6), false},
		{flow("10.1.2.3", "192.0.2.7", 1234, 80, 17), false},
		{flow("11.1.2.3", "192.0.2.7", 1234, 80, 6), false},
		{flow("10.1.2.3", "192.0.2.8", 1234, 80, 6), false},
		{flow("::ffff:10.1.2.3", "::ffff:192.0.2.7", 1, 80, 6), true},
	}
	for _, tt := range tests {
		if got := m.Match(tt.f); got != tt.want {
			t.Errorf("Match(%v) = %v", tt.f, got)
		}
	}
	all, _ := Selector{}.Compile()
	if !all.Match(flow("1.1.1.1", "2.2.2.2", 0, 0, 1)) {
		t.Error("empty selector does not match everything")
	}
}

func TestValidate(t *testing.T) {
	good := Path{Name: "a-b", Upstream: "a", Downstream: "b"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Path{
		{Name: "", Upstream: "a", Downstream: "b"},
		{Name: "x y", Upstream: "a", Downstream: "b"},
		{Name: "p", Upstream: "a", Downstream: "a"},
		{Name: "p", Upstream: "a", Downstream: "b", Selector: Selector{SrcCIDRs: []string{"10.0.0.0/33"}}},
		{Name: "p", Upstream: "a", Downstream: "b", Selector: Selector{SrcCIDRs: []string{"10.1.2.3/8"}}}, // host bits: a typo
		{Name: "p", Upstream: "a", Downstream: "b", Selector: Selector{Protocol: "tcpx"}},
		{Name: "p", Upstream: "a", Downstream: "b", Selector: Selector{DstPorts: []string{"90-80"}}},
		{Name: "p", Upstream: "a", Downstream: "b", Selector: Selector{DstPorts: []string{"70000"}}},
	}
	for _, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

func TestProtoRoundTrip(t *testing.T) {
	p := Path{Name: "p", Upstream: "a", Downstream: "b", Selector: Selector{SrcCIDRs: []string{"10.0.0.0/8"}, Protocol: "udp", DstPorts: []string{"53"}}}
	got, err := FromProto(p.ToProto())
	if err != nil {
		t.Fatal(err)
	}
	if got.Selector.Protocol != "17" || got.Name != "p" || got.Selector.DstPorts[0] != "53" {
		t.Errorf("round trip %+v", got)
	}
	if _, err := FromProto(nil); err == nil {
		t.Error("nil path accepted")
	}
}

// A top flow's packed key names the flow its text key does, in 13 bytes
// for IPv4 and 37 for IPv6; flows of two address families keep the text
// form.
func TestPackedFlow(t *testing.T) {
	for _, c := range []struct {
		src, dst string
		size     int
	}{{"10.77.0.2", "192.168.1.20", 13}, {"2001:db8::1", "fe80::2", 37}, {"::ffff:10.0.0.1", "2001:db8::3", 37}, {"10.0.0.1", "2001:db8::3", 0}} {
		f := capture.FlowKey{Src: netip.MustParseAddr(c.src), Dst: netip.MustParseAddr(c.dst), SrcPort: 34184, DstPort: 8080, Proto: 6}
		b, ok := AppendPackedFlow(nil, f)
		if ok != (c.size > 0) || len(b) != c.size {
			t.Errorf("%v: packed in %d bytes (%t), want %d", f, len(b), ok, c.size)
			continue
		}
		if !ok {
			continue
		}
		back, err := TopFlowKey(&owlv1.TopFlow{Key: b})
		if err != nil || back != f {
			t.Errorf("%v: back as %v, %v", f, back, err)
		}
		text, err := TopFlowKey(&owlv1.TopFlow{Flow: FlowToProto(f)})
		if err != nil || text != back {
			t.Errorf("%v: text key %v, packed %v (%v)", f, text, back, err)
		}
		if _, err := TopFlowKey(&owlv1.TopFlow{Key: b, Flow: FlowToProto(f)}); err == nil {
			t.Errorf("%v: a top flow with both keys accepted", f)
		}
		if _, err := PackedFlow(b[1:]); err == nil {
			t.Errorf("%v: a packed key of %d bytes accepted", f, len(b)-1)
		}
	}
}

// FuzzPackedFlow: any bytes parse to a flow or an error, and a parsed
// flow packs back to the same bytes.
func FuzzPackedFlow(f *testing.F) {
	k, _ := AppendPackedFlow(nil, capture.FlowKey{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 1, DstPort: 2, Proto: 17})
	f.Add(k)
	f.Add(make([]byte, 37))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		fk, err := PackedFlow(b)
		if err != nil {
			return
		}
		again, ok := AppendPackedFlow(nil, fk)
		if !ok || !bytes.Equal(again, b) {
			t.Fatalf("%x parsed as %v, packed back as %x", b, fk, again)
		}
	})
}
