package exact

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/synopsistest"
)

// randomList has n packets of a few flows, some IDs repeated (a packet
// seen twice).
func randomList(seed uint64, n int) *List {
	rng := rand.New(rand.NewPCG(seed, 1))
	l := &List{}
	for i := range n {
		p := Packet{ID: rng.Uint64(), OffsetNS: rng.Int64N(1e9), Flow: uint64(rng.IntN(20)), Weight: 1 + uint64(rng.IntN(3))}
		if i > 0 && i%17 == 0 {
			p.ID = l.Packets[i-1].ID
		}
		l.Packets = append(l.Packets, p)
	}
	return l
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 2, 1000} {
		l := randomList(uint64(n), n)
		want := slices.Clone(l.Packets)
		sortPackets(want)
		b, err := l.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%d packets: %v", n, err)
		}
		if !slices.Equal(got.Packets, want) {
			t.Fatalf("%d packets: decoded list differs", n)
		}
		if n == 1000 {
			// IDs as differences, times as varints, flow indices: far
			// below 16 bytes for the ID and time alone plus the flow.
			if per := float64(len(b)) / float64(n); per > 15 {
				t.Errorf("%.1f bytes per packet", per)
			}
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, _ := randomList(3, 10).MarshalBinary()
	noFlows, _ := (&List{}).MarshalBinary()
	cases := map[string][]byte{
		"truncated":        good[:len(good)-1],
		"trailing":         append(slices.Clone(good), 0),
		"no envelope":      []byte("OWL"),
		"packets no flows": append(noFlows[:len(noFlows)-1], 1, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0),
	}
	// A flow index past the table: the last byte is the last packet's.
	bad := slices.Clone(good)
	bad[len(bad)-1] = 100
	cases["flow index"] = bad
	for name, b := range cases {
		if _, err := Decode(b); !errors.Is(err, synopsis.ErrFormat) {
			t.Errorf("%s: error %v, want ErrFormat", name, err)
		}
	}
	if _, err := (&List{Packets: make([]Packet, MaxPackets+1)}).MarshalBinary(); err == nil {
		t.Error("a list over MaxPackets was encoded")
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := randomList(5, 60).MarshalBinary()
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		var l *List
		var err error
		if n := synopsistest.Allocated(uint64(16*len(b)+4096), func() { l, err = Decode(b) }); n > uint64(16*len(b)+4096) {
			t.Fatalf("%d bytes allocated for %d of input", n, len(b))
		}
		if err != nil {
			if !errors.Is(err, synopsis.ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		want := slices.Clone(l.Packets)
		again, err := l.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(again)
		if err != nil || !slices.Equal(back.Packets, want) {
			t.Fatalf("re-encoding differs (%v)", err)
		}
	})
}
