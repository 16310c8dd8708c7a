package params

import (
	"errors"
	"testing"
	"time"
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
