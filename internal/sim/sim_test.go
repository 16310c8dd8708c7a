package sim

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gopacket/gopacket"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
)

func TestParseDelay(t *testing.T) {
	tests := []struct {
		in   string
		want DelayModel
	}{
		{"weibull:shape=0.6,scale=10us,base=1ms", Weibull{Shape: 0.6, Scale: 10 * time.Microsecond, Base: time.Millisecond}},
		{"weibull", Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond}},
		{"const:5ms", Constant{5 * time.Millisecond}},
		{"const:delay=7us", Constant{7 * time.Microsecond}},
		{"bimodal:p=0.5,low=1us,high=2us", Bimodal{P: 0.5, Low: time.Microsecond, High: 2 * time.Microsecond}},
	}
	for _, tt := range tests {
		got, err := ParseDelay(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDelay(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if again, err := ParseDelay(got.String()); err != nil || again != got {
			t.Errorf("String() of %v does not parse back: %v, %v", got, again, err)
		}
	}
	for _, bad := range []string{"gauss:1", "weibull:shape=0", "weibull:shape=x", "const:-1s", "bimodal:p=2", "weibull:foo=1", "weibull:shape"} {
		if _, err := ParseDelay(bad); err == nil {
			t.Errorf("ParseDelay(%q) accepted", bad)
		}
	}
}

func TestWeibullMoments(t *testing.T) {
	w := Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond}
	r := rand.New(rand.NewPCG(1, 2))
	var sum float64
	const n = 400000
	for i := 0; i < n; i++ {
		sum += float64(w.SampleNS(r))
	}
	want := float64(w.Base) + float64(w.Scale)*math.Gamma(1+1/w.Shape)
	if got := sum / n; math.Abs(got-want)/want > 0.01 {
		t.Errorf("mean %.0f ns, want %.0f", got, want)
	}
}

func TestImpair(t *testing.T) {
	link, frames, err := ReadCapture("../../testdata/trace.pcap")
	if err != nil {
		t.Fatal(err)
	}
	id := capture.DefaultIdentityConfig()
	m := Impairment{Delay: Constant{100 * time.Microsecond}, Loss: 0.05, Reorder: 0.02, ReorderExtra: time.Millisecond,
		Duplicate: 0.01, DuplicateGap: 10 * time.Microsecond, DownClockOffset: 3 * time.Microsecond, Seed: 3}
	tr, err := Impair(link, frames, id, m)
	if err != nil {
		t.Fatal(err)
	}
	var lost, dup, delivered int
	for _, r := range tr.Truth {
		switch {
		case r.Lost:
			lost++
		default:
			delivered++
			if r.Copies == 2 {
				dup++
			}
			if d := r.DelayNS(); d < int64(100*time.Microsecond) || d > int64(1100*time.Microsecond) {
				t.Fatalf("delay %d ns outside the model", d)
			}
		}
	}
	n := float64(len(tr.Truth))
	if math.Abs(float64(lost)/n-0.05) > 0.01 || math.Abs(float64(dup)/float64(delivered)-0.01) > 0.005 {
		t.Errorf("lost %d, duplicated %d of %d", lost, dup, len(tr.Truth))
	}
	if len(tr.Down) != delivered+dup+tr.NonIP {
		t.Errorf("%d downstream frames, want %d", len(tr.Down), delivered+dup+tr.NonIP)
	}
	// Downstream frames are in time order, one hop older, and keep their IDs.
	dec, _ := capture.NewDecoder(link, id)
	seen := map[uint64]int64{}
	frameOf := map[uint64][]byte{}
	for i, f := range tr.Down {
		if i > 0 && f.TimeNS < tr.Down[i-1].TimeNS {
			t.Fatal("downstream frames out of time order")
		}
		var p capture.Packet
		if dec.Decode(f.Data, f.TimeNS, &p) == nil {
			if _, ok := seen[p.ID]; !ok {
				seen[p.ID] = f.TimeNS
				frameOf[p.ID] = f.Data
			}
		}
	}
	for _, r := range tr.Truth {
		if r.Lost {
			continue
		}
		at, ok := seen[r.ID]
		if !ok {
			t.Fatalf("frame %d delivered but its ID is not downstream", r.Frame)
		}
		if at > r.DownNS+int64(m.DownClockOffset) {
			t.Fatalf("frame %d seen at %d, truth says %d + offset", r.Frame, at, r.DownNS)
		}
	}
	aged := 0
	for _, r := range tr.Truth {
		up := tr.Up[r.Frame-1].Data
		if r.Lost || up[12] != 0x08 || up[13] != 0x00 {
			continue // IPv4 only
		}
		down := frameOf[r.ID]
		if down[14+8] != up[14+8]-1 {
			t.Fatalf("frame %d: TTL %d upstream, %d downstream", r.Frame, up[14+8], down[14+8])
		}
		if gopacket.FoldChecksum(gopacket.ComputeChecksum(down[14:14+20], 0)) != 0 {
			t.Fatalf("frame %d: bad IPv4 checksum downstream", r.Frame)
		}
		aged++
	}
	if aged < 1000 {
		t.Errorf("only %d IPv4 packets checked", aged)
	}
}

func TestTruthRoundTripAndEpochs(t *testing.T) {
	truth := []Record{
		{Frame: 1, ID: 0xabc, UpNS: 100, DownNS: 300, Copies: 1},
		{Frame: 2, ID: 0xdef, UpNS: 200, Lost: true},
		{Frame: 3, ID: 0x123, UpNS: 900, DownNS: 1100, Copies: 2},
		{Frame: 4, ID: 0x456, UpNS: 1500, DownNS: 1600, Copies: 1},
	}
	var b bytes.Buffer
	if err := WriteTruth(&b, truth); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTruth(&b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range truth {
		truth[i].Flow = capture.FlowKey{}
		if got[i] != truth[i] {
			t.Errorf("record %d: %+v, want %+v", i, got[i], truth[i])
		}
	}
	ep := epoch.Config{Length: 1000}
	es := EpochTruths(truth, ep, 0)
	if len(es) != 2 {
		t.Fatalf("%d epochs", len(es))
	}
	e0, e1 := es[0], es[1]
	if e0.Sent != 3 || e0.Lost != 1 || e0.SameEpoch != 1 || e0.Crossed != 1 || e0.MeanNS != 200 || e0.AllMeanNS != 200 {
		t.Errorf("epoch 0: %+v", e0)
	}
	if e1.Sent != 1 || e1.CrossedIn != 1 || e1.MeanNS != 100 {
		t.Errorf("epoch 1: %+v", e1)
	}
	if _, err := ReadTruth(bytes.NewBufferString("a,b\n")); err == nil {
		t.Error("bad header accepted")
	}
	if _, err := ReadTruth(bytes.NewBufferString("frame,id,up_ns,down_ns,copies\n1,zz,1,2,1\n")); err == nil {
		t.Error("bad id accepted")
	}
}

func TestShapeApply(t *testing.T) {
	in := []Frame{{TimeNS: 100}, {TimeNS: 250}, {TimeNS: 900}}
	if got := (Shape{}).Apply(in); len(got) != 3 || &got[0] != &in[0] {
		t.Errorf("an empty shape changed the frames: %v", got)
	}
	got := Shape{Rate: 1e8, Repeat: 2, Every: 1000}.Apply(in)
	want := []int64{100, 110, 120, 1100, 1110, 1120}
	if len(got) != len(want) {
		t.Fatalf("%d frames, want %d", len(got), len(want))
	}
	for i, f := range got {
		if f.TimeNS != want[i] {
			t.Errorf("frame %d at %d, want %d", i, f.TimeNS, want[i])
		}
	}
	if in[1].TimeNS != 250 {
		t.Errorf("Apply changed its input: %v", in)
	}
	// Every defaults to the span rounded up to a second, plus one.
	if got := (Shape{Repeat: 2}).Apply(in); got[3].TimeNS != 100+2e9 {
		t.Errorf("second copy at %d, want %d", got[3].TimeNS, int64(100+2e9))
	}
}
