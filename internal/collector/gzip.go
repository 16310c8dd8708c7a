package collector

import (
	"bufio"
	"compress/gzip"
	"io"
	"sync"

	"google.golang.org/grpc/encoding"
	grpcgzip "google.golang.org/grpc/encoding/gzip" // probes gzip their streams
)

// gzipReadBuffer is the bytes a gzip stream is read ahead by: about a
// compressed report (25–40 KiB) at most in one copy.
const gzipReadBuffer = 32 << 10

// bufferedGzip is grpc's gzip compressor with a decompressor that reads
// its input through a buffer. grpc hands a decompressor its message as a
// mem.Reader, whose ReadByte, which compress/flate calls once per byte of
// input when given an io.ByteReader, costs more than the decompression
// itself: a bufio.Reader in between takes the input in copies of up to
// gzipReadBuffer bytes. Compressing is grpc's own.
type bufferedGzip struct {
	encoding.Compressor // grpc's, for Compress and Name
	readers             sync.Pool
}

// gzipReader is one message's decompressor with its read-ahead buffer;
// grpc closes it once the message is read (a reader not closed is left
// to the garbage collector).
type gzipReader struct {
	gzip.Reader
	buf  *bufio.Reader
	pool *sync.Pool
}

func init() {
	encoding.RegisterCompressor(&bufferedGzip{Compressor: encoding.GetCompressor(grpcgzip.Name)})
}

// Decompress returns a reader of the decompressed message read from r.
func (g *bufferedGzip) Decompress(r io.Reader) (io.Reader, error) {
	z, ok := g.readers.Get().(*gzipReader)
	if !ok {
		z = &gzipReader{buf: bufio.NewReaderSize(r, gzipReadBuffer), pool: &g.readers}
	} else {
		z.buf.Reset(r)
	}
	if err := z.Reset(z.buf); err != nil {
		z.buf.Reset(nil)
		g.readers.Put(z)
		return nil, err
	}
	return z, nil
}

// Close ends the message: the reader and its buffer are used again.
func (z *gzipReader) Close() error {
	err := z.Reader.Close()
	z.buf.Reset(nil)
	z.pool.Put(z)
	return err
}
