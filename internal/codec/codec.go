// Package codec is gRPC's protobuf codec with buffers that are not
// cleared. gRPC takes each message above 1 KiB from its buffer pool, whose
// classes jump from 32 KiB to 1 MiB, and clears a buffer's whole capacity
// on every take: a report of a few tens of KiB cost clearing a megabyte,
// once to send it and once to receive it. Marshalling writes every byte
// it sends and gRPC's transport reads every byte it keeps, so nothing of
// an earlier message is seen.
package codec

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Codec marshals with buffers from Buffers and unmarshals with gRPC's own
// codec. Use it with grpc.ForceCodecV2 (clients) and
// grpc.ForceServerCodecV2 (servers).
type Codec struct {
	encoding.CodecV2 // gRPC's own, for Unmarshal and Name
}

// New is the codec.
func New() Codec {
	return Codec{CodecV2: encoding.GetCodecV2("proto")}
}

// Marshal encodes v, a protobuf message, into a buffer of Buffers.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
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
	buf := Buffers.Get(size)
	b, err := o.MarshalAppend((*buf)[:0], m)
	if err != nil {
		Buffers.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, Buffers)}, nil
}

// Pool is a mem.BufferPool of buffers in classes of powers of two, handed
// out as they were left: for writers that fill every byte they are given
// (grpc.experimental.BufferPool and WithBufferPool: the transport reads
// each frame whole into its buffer).
type Pool struct{ classes [40]sync.Pool }

// Buffers is the process's pool.
var Buffers = &Pool{}

// Get is a buffer of length n, its bytes as its last user left them.
func (p *Pool) Get(n int) *[]byte {
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

// Put returns b to the pool.
func (p *Pool) Put(b *[]byte) {
	c := bits.Len(uint(cap(*b))) - 1 // the class cap(*b) fills: 2^c <= cap
	if c >= 0 && c < len(p.classes) {
		p.classes[c].Put(b)
	}
}
