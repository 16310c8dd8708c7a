package params

import (
	"errors"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/lds"
)

func TestProtoRoundTripAndCompatible(t *testing.T) {
	p := Default()
	p.Epoch.Start = time.Unix(100, 0)
	p.Identity.NATSafe = true
	got, err := FromProto(p.ToProto())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Compatible(got); err != nil {
		t.Errorf("round trip differs: %v", err)
	}
	q := got
	q.LDA.Rows = 2048
	q.Identity.PayloadBytes = 32
	err = p.Compatible(q)
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("mismatch not detected: %v", err)
	}
	t.Log(err)
}

func TestFromProtoRejects(t *testing.T) {
	if _, err := FromProto(nil); err == nil {
		t.Error("nil accepted")
	}
	sp := Default().ToProto()
	sp.Lda.Rows = 1 << 30
	if _, err := FromProto(sp); err == nil {
		t.Error("huge LDA accepted")
	}
	sp = Default().ToProto()
	sp.Lda.BankSampleLog2 = []uint32{0, 300}
	if _, err := FromProto(sp); err == nil {
		t.Error("bank exponent 300 accepted")
	}
	sp = Default().ToProto()
	sp.Epoch.LengthNs = 0
	if _, err := FromProto(sp); err == nil {
		t.Error("zero epoch accepted")
	}
}

// TestLocalSettings: the API form loses the local settings, WithLocal
// puts a point's own back, and only flags of shared parameters count as
// giving them.
func TestLocalSettings(t *testing.T) {
	local := Default()
	local.Epoch.Grace, local.RDA.Buckets = 300*time.Millisecond, 4096
	local.Identity.FlowTag, local.Identity.VXLANPort = true, 8472
	pushed := Default()
	pushed.LDA.Rows = 512
	got, err := FromProto(pushed.ToProto())
	if err != nil {
		t.Fatal(err)
	}
	got = got.WithLocal(local)
	if got.LDA.Rows != 512 || got.Epoch.Grace != local.Epoch.Grace || got.RDA.Buckets != 4096 || !got.Identity.FlowTag || got.Identity.VXLANPort != 8472 {
		t.Errorf("with the local settings: %+v", got)
	}
	for _, tc := range []struct {
		names []string
		want  bool
	}{
		{nil, false},
		{[]string{"config", "id", "grace", "rda-buckets", "flow-tag", "vxlan-port"}, false},
		{[]string{"grace", "lda-rows"}, true},
		{[]string{"colate-solve"}, true},
	} {
		if got := SetsShared(tc.names); got != tc.want {
			t.Errorf("SetsShared(%v) = %v, want %v", tc.names, got, tc.want)
		}
	}
}

// The collector may keep fewer cells per row and some of the parameters'
// LDS rows, in their order; nothing else.
func TestSameLDSHashing(t *testing.T) {
	want := lds.DefaultConfig() // rows sampling 2^-6, 2^-3, 2^-1, 1
	sub := func(cols int, exps ...uint8) lds.Config {
		c := want
		c.Cols, c.Rows, c.RowSampleLog2 = cols, len(exps), exps
		return c
	}
	for _, ok := range []lds.Config{want, sub(64, 6, 3, 1, 0), sub(1024, 1, 0), sub(256, 6, 0), sub(4096, 3)} {
		if err := SameLDSHashing(want, ok); err != nil {
			t.Errorf("%v refused: %v", ok.RowSampleLog2, err)
		}
	}
	other := sub(64, 1, 0)
	other.Seed++
	for _, bad := range []lds.Config{sub(8192, 1, 0), sub(64, 0, 1), sub(64, 2), sub(64, 6, 3, 1, 0, 0), other} {
		if err := SameLDSHashing(want, bad); !errors.Is(err, synopsis.ErrMismatch) {
			t.Errorf("%d cells, rows %v, seed %x: %v, want a mismatch", bad.Cols, bad.RowSampleLog2, bad.Seed, err)
		}
	}
	flat := lds.Config{Rows: 4, Cols: 512, K: 4, Seed: 1}
	if err := SameLDSHashing(flat, lds.Config{Rows: 2, Cols: 512, K: 4, Seed: 1}); err != nil {
		t.Errorf("two of four unsampled rows refused: %v", err)
	}
}
