package netpath

import (
	"net/netip"
	"testing"

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
