package collector

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/encoding"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/mem"
)

// gzipped compresses b with the compressor grpc uses for "gzip".
func gzipped(t testing.TB, b []byte) []byte {
	var out bytes.Buffer
	w, err := encoding.GetCompressor(grpcgzip.Name).Compress(&out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// inPieces is b as grpc hands it to a decompressor: a mem.Reader over
// buffers of n bytes.
func inPieces(b []byte, n int) io.Reader {
	var bs mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		bs = append(bs, mem.SliceBuffer(bytes.Clone(b[:k])))
		b = b[k:]
	}
	return bs.Reader()
}

// TestBufferedGzip checks that "gzip" is the buffered decompressor, and
// that it gives back each message whole, from buffers of any size, with
// its readers used again once closed; damaged input is an error.
func TestBufferedGzip(t *testing.T) {
	g, ok := encoding.GetCompressor(grpcgzip.Name).(*bufferedGzip)
	if !ok {
		t.Fatalf("gzip is %T", encoding.GetCompressor(grpcgzip.Name))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 1000, 100_000, 300_000} {
		msg := make([]byte, size)
		for i := range msg {
			msg[i] = byte(r.IntN(16)) // compressible, like a report's cells
		}
		z := gzipped(t, msg)
		for _, piece := range []int{1, 7, 16 << 10, len(z) + 1} {
			d, err := g.Decompress(inPieces(z, piece))
			if err != nil {
				t.Fatalf("%d bytes in pieces of %d: %v", size, piece, err)
			}
			got, err := io.ReadAll(d)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("%d bytes in pieces of %d: %d bytes back, %v", size, piece, len(got), err)
			}
			if err := d.(io.Closer).Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	z := gzipped(t, bytes.Repeat([]byte("owl"), 1000))
	z[len(z)/2] ^= 0xff
	d, err := g.Decompress(inPieces(z, 100))
	if err == nil {
		_, err = io.ReadAll(d)
	}
	if err == nil {
		t.Error("damaged input decompressed")
	}
	if _, err := g.Decompress(inPieces([]byte("not gzip"), 3)); err == nil {
		t.Error("input without a gzip header accepted")
	}
}

// BenchmarkGzipDecompress decompresses a report-sized message from the
// buffers grpc reads it into.
func BenchmarkGzipDecompress(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	msg := make([]byte, 90_000)
	for i := range msg {
		msg[i] = byte(r.IntN(16))
	}
	z := gzipped(b, msg)
	comp := encoding.GetCompressor(grpcgzip.Name)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		d, err := comp.Decompress(inPieces(z, 16<<10))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, d); err != nil {
			b.Fatal(err)
		}
		_ = d.(io.Closer).Close()
	}
}
