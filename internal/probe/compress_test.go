package probe

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// countingListener counts the bytes its connections read.
type countingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &l.read}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// oneReport is a ProbeService that takes one message and says so.
type oneReport struct {
	owlv1.UnimplementedProbeServiceServer
	got chan int
}

func (o *oneReport) Connect(s owlv1.ProbeService_ConnectServer) error {
	m, err := s.Recv()
	if err != nil {
		return err
	}
	o.got <- len(m.GetReport().GetLda())
	return nil
}

// TestStreamsAreGzipped: a probe's stream to its collector is gzipped
// when asked (-gzip): a report holding 256 KiB of zeros (as a synopsis of
// few packets is) takes a few KiB on the wire to a real gRPC server on a
// TCP port; and sent whole when not (the default).
func TestStreamsAreGzipped(t *testing.T) {
	for _, gzipped := range []bool{true, false} {
		const size = 256 << 10
		wire := sendZeros(t, size, gzipped)
		if gzipped && wire > size/16 || !gzipped && wire < size {
			t.Errorf("gzip %t: %d bytes on the wire for a report of %d zero bytes", gzipped, wire, size)
		}
	}
}

// sendZeros sends a report with an LDA of size zero bytes to a real gRPC
// server and returns the bytes it read.
func sendZeros(t *testing.T, size int, gzipped bool) int64 {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &countingListener{Listener: inner}
	srv := grpc.NewServer()
	got := &oneReport{got: make(chan int, 1)}
	owlv1.RegisterProbeServiceServer(srv, got)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := dial(inner.Addr().String(), nil, gzipped)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := owlv1.NewProbeServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: &owlv1.EpochReport{Path: "p", Lda: make([]byte, size)}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got.got:
		if n != size {
			t.Fatalf("the server read an LDA of %d bytes, want %d", n, size)
		}
	case <-ctx.Done():
		t.Fatal("the server saw no message")
	}
	return lis.read.Load()
}
