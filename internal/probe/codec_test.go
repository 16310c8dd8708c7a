package probe

import (
	"bytes"
	"math/rand/v2"
	"testing"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
)

// codecReport is a report whose synopses are n random bytes each.
func codecReport(rng *rand.Rand, n int) *owlv1.ProbeMessage {
	blob := func() []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	return &owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: &owlv1.EpochReport{
		Path: "p", Epoch: rng.Int64(), Lda: blob(), Rda: blob(), Lds: blob(),
	}}}
}

// TestReportCodec marshals messages of many sizes, largest first, through
// the same buffers: each comes out as proto.Marshal makes it, nothing of
// an earlier one left in it, and reads back.
func TestReportCodec(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := newReportCodec()
	for _, n := range []int{300_000, 200_000, 40_000, 33_000, 20_000, 5_000, 1_000, 100, 0, 300_000} {
		for range 3 {
			m := codecReport(rng, n)
			want, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			bs, err := c.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got := bs.Materialize()
			if !bytes.Equal(got, want) {
				t.Fatalf("%d-byte synopses: the codec's %d bytes differ from proto.Marshal's %d", n, len(got), len(want))
			}
			back := &owlv1.ProbeMessage{}
			if err := c.Unmarshal(bs, back); err != nil || !proto.Equal(back, m) {
				t.Fatalf("%d-byte synopses: read back %v, err %v", n, back.GetReport().GetEpoch(), err)
			}
			bs.Free()
		}
	}
	// A message sent again after a change (the probe resends reports
	// with a new sequence number) is measured again.
	m := codecReport(rng, 20_000)
	for _, seq := range []uint64{0, 1, 300, 1 << 40} {
		m.GetReport().Seq = seq
		bs, err := c.Marshal(m)
		if err != nil {
			t.Fatalf("resent with seq %d: %v", seq, err)
		}
		back := &owlv1.ProbeMessage{}
		if err := c.Unmarshal(bs, back); err != nil || back.GetReport().GetSeq() != seq {
			t.Fatalf("resent with seq %d: read back seq %d, err %v", seq, back.GetReport().GetSeq(), err)
		}
		bs.Free()
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Fatal("a string marshalled")
	}
}

// BenchmarkReportCodec marshals a report of three 15 KB synopses with
// gRPC's codec and with the probe's, and frees it as the transport does.
func BenchmarkReportCodec(b *testing.B) {
	m := codecReport(rand.New(rand.NewPCG(1, 2)), 15_000)
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"grpc", encoding.GetCodecV2("proto")}, {"probe", newReportCodec()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bs, err := c.codec.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				bs.Free()
			}
		})
	}
}
