package capture

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// FuzzDecode feeds arbitrary frames to the decoder: it must never panic, and
// a frame it accepts must decode the same way twice.
func FuzzDecode(f *testing.F) {
	addDecodeSeeds(f)
	cfg := DefaultIdentityConfig()
	eth, _ := NewDecoder(layers.LinkTypeEthernet, cfg)
	raw, _ := NewDecoder(layers.LinkTypeRaw, cfg)
	nat := cfg
	nat.NATSafe = true
	ethNAT, _ := NewDecoder(layers.LinkTypeEthernet, nat)
	tagged := cfg
	tagged.FlowTag, tagged.VXLANPort = true, 8472
	ethTag, _ := NewDecoder(layers.LinkTypeEthernet, tagged)
	f.Fuzz(func(t *testing.T, frame []byte, link uint8) {
		d := eth
		switch link % 4 {
		case 1:
			d = raw
		case 2:
			d = ethNAT
		case 3:
			d = ethTag
		}
		var p, q Packet
		err := d.Decode(frame, 7, &p)
		if err != nil {
			if ReasonOf(err) == ReasonNone {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		if p.TimeNS != 7 || !p.Flow.Src.IsValid() || !p.Flow.Dst.IsValid() {
			t.Fatalf("accepted frame gave packet %+v", p)
		}
		if err := d.Decode(bytes.Clone(frame), 7, &q); err != nil || q != p {
			t.Fatalf("second decode differs: %+v vs %+v (%v)", q, p, err)
		}
	})
}

// addDecodeSeeds seeds a fuzz test of (frame, link) with frames of the
// bundled trace, the test frames (Ethernet, and raw from link 1), and the
// encapsulations (from links 0 and 3, which knows VXLAN on 8472).
func addDecodeSeeds(f *testing.F) {
	frames, _ := traceFrames(f)
	for i := 0; i < len(frames); i += len(frames) / 40 {
		f.Add(frames[i], uint8(0))
	}
	for _, fr := range testFrames(f) {
		f.Add(fr, uint8(0))
		f.Add(fr[14:], uint8(1))
		f.Add(fr, uint8(3))
	}
	for _, c := range encapCases(f) {
		f.Add(c.frame, uint8(0))
		f.Add(c.frame, uint8(3))
	}
}

// FuzzFileSource feeds arbitrary bytes as a capture file.
func FuzzFileSource(f *testing.F) {
	// A real pcap header and a few records.
	data, err := os.ReadFile("../../testdata/trace.pcap")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data[:24+5*(16+160)])
	f.Add(data[:30])
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := NewFileSource("fuzz", bytes.NewReader(b))
		if err != nil {
			return
		}
		for i := 0; i < 1000; i++ {
			if _, err := s.Next(); err != nil {
				if err != io.EOF && err.Error() == "" {
					t.Fatal("empty error")
				}
				return
			}
		}
	})
}
