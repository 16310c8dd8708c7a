package probe

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// reportCodec is gRPC's protobuf codec with one change: messages are
// marshalled into buffers that are not cleared first. gRPC's codec takes
// messages above 1 KiB from its buffer pool, whose classes jump from 32
// KiB to 1 MiB and which clears a buffer's whole capacity on every take:
// a report of a few tens of KiB cost clearing a megabyte. Marshalling
// writes every byte it sends, so nothing of an earlier message goes out.
type reportCodec struct {
	encoding.CodecV2 // gRPC's own, for Unmarshal
}

func newReportCodec() reportCodec {
	return reportCodec{CodecV2: encoding.GetCodecV2("proto")}
}

func (reportCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshalling %T: not a protobuf message", v)
	}
	// proto.Size measures afresh (a message sent again may have
	// changed) and leaves the sizes that UseCachedSize then reads.
	size := proto.Size(m)
	o := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := o.Marshal(m)
		return mem.BufferSlice{mem.SliceBuffer(b)}, err
	}
	buf := marshalBuffers.Get(size)
	b, err := o.MarshalAppend((*buf)[:0], m)
	if err != nil {
		marshalBuffers.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, marshalBuffers)}, nil
}

// dirtyPool is a mem.BufferPool of buffers in classes of powers of two,
// handed out as they were left.
type dirtyPool struct{ classes [40]sync.Pool }

var marshalBuffers = &dirtyPool{}

func (p *dirtyPool) Get(n int) *[]byte {
	c := bits.Len(uint(max(n, 1) - 1)) // the class whose buffers hold n: 2^c >= n
	if c >= len(p.classes) {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<c)
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := bits.Len(uint(cap(*b))) - 1 // the class cap(*b) fills: 2^c <= cap
	if c >= 0 && c < len(p.classes) {
		p.classes[c].Put(b)
	}
}
