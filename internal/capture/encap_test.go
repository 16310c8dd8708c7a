package capture

import (
	"encoding/binary"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// Raw header builders for encapsulations, as switches and fabrics send them.

func ethHdr(etype uint16) []byte {
	b := []byte{2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 8, 0, 0}
	binary.BigEndian.PutUint16(b[12:], etype)
	return b
}

func vlanTag(id uint16, etype uint16) []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint16(b, id&0x0fff)
	binary.BigEndian.PutUint16(b[2:], etype)
	return b
}

func ipv4Outer(proto byte, payload int) []byte {
	b := make([]byte, 20)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(20+payload))
	b[8] = 63
	b[9] = proto
	copy(b[12:], []byte{172, 16, 0, 1, 172, 16, 0, 2})
	return b
}

func udpOuter(dport uint16, payload int) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b, 49152)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+payload))
	return b
}

func mplsLabel(label uint32, bottom bool) []byte {
	v := label<<12 | 64
	if bottom {
		v |= 1 << 8
	}
	b := make([]byte, 4)
	binary.BigEndian.PutUint32(b, v)
	return b
}

func greHdr(proto uint16) []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint16(b[2:], proto)
	return b
}

func vxlanHdr(vni uint32) []byte {
	b := make([]byte, 8)
	b[0] = 0x08
	binary.BigEndian.PutUint32(b[4:], vni<<8)
	return b
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

type encapCase struct {
	frame []byte
	inner []byte // the bare frame it must match
	tag   uint32 // with FlowTag
}

// encapCases wraps test packets the ways mirror ports and fabrics do.
func encapCases(t testing.TB) map[string]encapCase {
	bare := testFrames(t)["ipv4-tcp"]
	bare6 := testFrames(t)["ipv6-udp"]
	ip, ip6 := bare[14:], bare6[14:]
	erspan2 := []byte{0x10, 0x64, 0x00, 0x07, 0, 0, 0, 0}             // version 1, VLAN 100, session 7
	erspan3 := []byte{0x20, 0x64, 0x00, 0x07, 0, 0, 0, 1, 0, 0, 0, 0} // version 2
	erspan3o := append(append([]byte{}, erspan3...), make([]byte, 8)...)
	erspan3o[11] = 1 // O: platform-specific subheader follows
	return map[string]encapCase{
		"qinq":              {cat(ethHdr(0x88a8), vlanTag(10, 0x8100), vlanTag(20, 0x0800), ip), bare, 20},
		"mpls-1":            {cat(ethHdr(0x8847), mplsLabel(100, true), ip), bare, 0},
		"mpls-3-ipv6":       {cat(ethHdr(0x8847), mplsLabel(100, false), mplsLabel(200, false), mplsLabel(300, true), ip6), bare6, 0},
		"mpls-pw-cw":        {cat(ethHdr(0x8847), mplsLabel(100, true), make([]byte, 4), bare), bare, 0},
		"gre-ip":            {cat(ethHdr(0x0800), ipv4Outer(47, 4+len(ip)), greHdr(0x0800), ip), bare, 0},
		"gre-teb":           {cat(ethHdr(0x0800), ipv4Outer(47, 4+len(bare)), greHdr(0x6558), bare), bare, 0},
		"erspan-ii":         {cat(ethHdr(0x0800), ipv4Outer(47, 8+len(erspan2)+len(bare)), []byte{0x10, 0, 0x88, 0xbe, 0, 0, 0, 1}, erspan2, bare), bare, 0},
		"erspan-iii":        {cat(ethHdr(0x0800), ipv4Outer(47, 8+len(erspan3)+len(bare)), []byte{0x10, 0, 0x22, 0xeb, 0, 0, 0, 1}, erspan3, bare), bare, 0},
		"erspan-iii-subhdr": {cat(ethHdr(0x0800), ipv4Outer(47, 8+len(erspan3o)+len(bare)), []byte{0x10, 0, 0x22, 0xeb, 0, 0, 0, 1}, erspan3o, bare), bare, 0},
		"vxlan-4789":        {cat(ethHdr(0x0800), ipv4Outer(17, 8+8+len(bare)), udpOuter(4789, 8+len(bare)), vxlanHdr(5000), bare), bare, 1<<24 | 5000},
		"vxlan-8472":        {cat(ethHdr(0x0800), ipv4Outer(17, 8+8+len(bare)), udpOuter(8472, 8+len(bare)), vxlanHdr(42), bare), bare, 1<<24 | 42},
		"vlan-in-vxlan":     {cat(ethHdr(0x0800), ipv4Outer(17, 8+8+4+len(bare)), udpOuter(4789, 8+4+len(bare)), vxlanHdr(7), ethHdr(0x8100), vlanTag(300, 0x0800), ip), bare, 300},
		"ipip":              {cat(ethHdr(0x0800), ipv4Outer(4, len(ip)), ip), bare, 0},
	}
}

// TestEncapsulations checks that the identity and flow of a packet are those
// of the innermost IP packet, however it is wrapped.
func TestEncapsulations(t *testing.T) {
	frames := encapCases(t)
	bare := testFrames(t)["ipv4-tcp"]
	ip := bare[14:]
	erspan3 := []byte{0x20, 0x64, 0x00, 0x07, 0, 0, 0, 1, 0, 0, 0, 0}
	cfg := DefaultIdentityConfig()
	cfg.VXLANPort = 8472
	d, err := NewDecoder(layers.LinkTypeEthernet, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tagCfg := cfg
	tagCfg.FlowTag = true
	dt, _ := NewDecoder(layers.LinkTypeEthernet, tagCfg)
	for name, tt := range frames {
		t.Run(name, func(t *testing.T) {
			want := decode(t, d, tt.inner)
			got := decode(t, d, tt.frame)
			if got.ID != want.ID || got.Flow != want.Flow || got.IPLen != want.IPLen {
				t.Errorf("wrapped %+v, bare %+v", got, want)
			}
			if tagged := decode(t, dt, tt.frame); tagged.Flow.Tag != tt.tag || tagged.ID != want.ID {
				t.Errorf("tag %#x, want %#x", tagged.Flow.Tag, tt.tag)
			}
		})
	}
	// Without VXLANPort, port 8472 is plain UDP: the outer packet counts.
	plain, _ := NewDecoder(layers.LinkTypeEthernet, DefaultIdentityConfig())
	if p := decode(t, plain, frames["vxlan-8472"].frame); p.Flow.DstPort != 8472 {
		t.Errorf("port 8472 decoded as VXLAN without VXLANPort: %v", p.Flow)
	}
	// Broken wrappers are errors, not panics.
	for name, f := range map[string][]byte{
		"mpls cut":       cat(ethHdr(0x8847), mplsLabel(1, false)),
		"erspan-iii cut": cat(ethHdr(0x0800), ipv4Outer(47, 12), []byte{0x10, 0, 0x22, 0xeb, 0, 0, 0, 1}, erspan3[:6]),
		"erspan-iii ver": cat(ethHdr(0x0800), ipv4Outer(47, 40), []byte{0x10, 0, 0x22, 0xeb, 0, 0, 0, 1}, append([]byte{0x30}, erspan3[1:]...), bare),
		"deep mpls": cat(ethHdr(0x8847), cat(func() [][]byte {
			var l [][]byte
			for i := 0; i < 40; i++ {
				l = append(l, mplsLabel(uint32(i), false))
			}
			return l
		}()...), ip),
	} {
		var p Packet
		if err := d.Decode(f, 1, &p); err == nil {
			t.Errorf("%s: decoded as %+v", name, p)
		}
	}
}
