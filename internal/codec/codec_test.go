package codec

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/experimental"
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

// TestCodec marshals messages of many sizes, largest first, through
// the same buffers: each comes out as proto.Marshal makes it, nothing of
// an earlier one left in it, and reads back.
func TestCodec(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := New()
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

// BenchmarkCodec marshals a report of three 15 KB synopses with
// gRPC's codec and with this one, and frees it as the transport does.
func BenchmarkCodec(b *testing.B) {
	m := codecReport(rand.New(rand.NewPCG(1, 2)), 15_000)
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"grpc", encoding.GetCodecV2("proto")}, {"owl", New()}} {
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

// TestEchoThroughPools sends messages of many sizes, largest first, to a
// gRPC server over a socket and back, both ends taking their buffers from
// Buffers without clearing them: each message comes back as it was sent.
func TestEchoThroughPools(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	echo := func(_ any, s grpc.ServerStream) error {
		for {
			m := &owlv1.ProbeMessage{}
			if err := s.RecvMsg(m); err != nil {
				return nil
			}
			if err := s.SendMsg(m); err != nil {
				return err
			}
		}
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(New()), experimental.BufferPool(Buffers), grpc.UnknownServiceHandler(echo))
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		experimental.WithBufferPool(Buffers), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(New())))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/owl.test.Echo/Echo")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1_000_000, 300_000, 40_000, 33_000, 17_000, 5_000, 1_000, 100, 0, 300_000} {
		for range 3 {
			m := codecReport(rng, n)
			if err := s.SendMsg(m); err != nil {
				t.Fatalf("%d-byte synopses: send: %v", n, err)
			}
			back := &owlv1.ProbeMessage{}
			if err := s.RecvMsg(back); err != nil {
				t.Fatalf("%d-byte synopses: receive: %v", n, err)
			}
			if !proto.Equal(back, m) {
				t.Fatalf("%d-byte synopses: the message came back changed", n)
			}
		}
	}
}
