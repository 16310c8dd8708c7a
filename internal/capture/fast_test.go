package capture

import (
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// decoderPairs are decoders with the fast path and without it, by link
// and settings, as the fuzz tests pick them.
func decoderPairs(tb testing.TB) [4][2]*Decoder {
	tb.Helper()
	cfg := DefaultIdentityConfig()
	nat := cfg
	nat.NATSafe = true
	tagged := cfg
	tagged.FlowTag, tagged.VXLANPort = true, 8472
	var out [4][2]*Decoder
	for i, c := range []struct {
		link layers.LinkType
		cfg  IdentityConfig
	}{{layers.LinkTypeEthernet, cfg}, {layers.LinkTypeRaw, cfg}, {layers.LinkTypeEthernet, nat}, {layers.LinkTypeEthernet, tagged}} {
		for j := range 2 {
			d, err := NewDecoder(c.link, c.cfg)
			if err != nil {
				tb.Fatal(err)
			}
			d.noFast = j == 1
			out[i][j] = d
		}
	}
	return out
}

// sameDecode decodes frame both ways and fails where they differ.
func sameDecode(t *testing.T, pair [2]*Decoder, frame []byte) {
	t.Helper()
	var p, q Packet
	errP := pair[0].Decode(frame, 7, &p)
	errQ := pair[1].Decode(frame, 7, &q)
	if (errP == nil) != (errQ == nil) || ReasonOf(errP) != ReasonOf(errQ) || p != q {
		t.Fatalf("frame %x:\nfast path   %+v (%v)\nparser only %+v (%v)", frame, p, errP, q, errQ)
	}
}

// FuzzFastDecode: the fast path and gopacket's parser turn every frame
// into the same packet, or the same error.
func FuzzFastDecode(f *testing.F) {
	addDecodeSeeds(f)
	pairs := decoderPairs(f)
	f.Fuzz(func(t *testing.T, frame []byte, link uint8) {
		sameDecode(t, pairs[link%4], frame)
	})
}

// TestFastDecodeAgrees runs the comparison of FuzzFastDecode over every
// frame of the bundled trace and the test frames, each cut at every
// length and with each of its first 80 bytes changed; and checks that the
// trace's TCP and UDP frames do take the fast path.
func TestFastDecodeAgrees(t *testing.T) {
	pairs := decoderPairs(t)
	frames, _ := traceFrames(t)
	fast := 0
	for _, fr := range frames {
		for _, pair := range pairs {
			sameDecode(t, pair, fr)
		}
		if pairs[0][0].fast(fr) {
			fast++
		}
	}
	if fast < len(frames)*99/100 {
		t.Errorf("%d of %d trace frames took the fast path", fast, len(frames))
	}
	var cases [][]byte
	for _, fr := range testFrames(t) {
		cases = append(cases, fr, fr[14:])
	}
	for _, c := range encapCases(t) {
		cases = append(cases, c.frame)
	}
	for _, fr := range cases {
		for n := range len(fr) + 1 {
			for _, pair := range pairs {
				sameDecode(t, pair, fr[:n])
			}
		}
		for i := range min(len(fr), 80) {
			for _, v := range []byte{0x00, 0xff, fr[i] ^ 0x01, fr[i] ^ 0x40, 0x45, 0x60, 0x11, 0x06, 0x81, 0x86} {
				m := append([]byte(nil), fr...)
				m[i] = v
				for _, pair := range pairs {
					sameDecode(t, pair, m)
				}
			}
		}
	}
}
