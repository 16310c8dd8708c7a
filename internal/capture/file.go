package capture

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Frame is one captured frame. Data is only valid until the source's next
// call to Next; the source's WireLen is its length on the wire (Data may
// be shorter). Four words at most: the compiler keeps such a struct in
// registers, and a larger one, returned by Next, went through the stack
// and was loaded back in halves that waited on its stores.
type Frame struct {
	Data []byte
	// TimeNS is the capture timestamp, nanoseconds since the Unix epoch.
	TimeNS int64
}

// frameReader is what pcapgo's pcap and pcapng readers have in common.
type frameReader interface {
	ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

// FileSource reads frames from a pcap or pcapng capture, optionally
// gzip-compressed, as fast as the caller takes them.
type FileSource struct {
	name string
	r    frameReader
	// recs reads a pcap file's records (pcapgo has read and checked its
	// header); nil for pcapng.
	recs    *pcapRecords
	closer  io.Closer
	frames  uint64
	wireLen int // of the frame Next returned last
}

// OpenFile opens a pcap, pcapng, or gzip-compressed pcap/pcapng file.
func OpenFile(path string) (*FileSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening capture: %w", err)
	}
	s, err := NewFileSource(path, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	s.closer = f
	return s, nil
}

// NewFileSource reads a capture from r; name is used in errors.
func NewFileSource(name string, r io.Reader) (*FileSource, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("reading capture %q: too short for a capture header: %w", name, err)
	}
	if magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("reading capture %q: %w", name, err)
		}
		br = bufio.NewReaderSize(zr, 1<<16)
		if magic, err = br.Peek(4); err != nil {
			return nil, fmt.Errorf("reading capture %q: too short for a capture header: %w", name, err)
		}
	}
	s := &FileSource{name: name}
	if bytes.Equal(magic, []byte{0x0a, 0x0d, 0x0d, 0x0a}) {
		ng, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return nil, fmt.Errorf("reading pcapng %q: %w", name, err)
		}
		s.r = ng
	} else {
		bigEnd := magic[0] == 0xa1
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("reading pcap %q: %w", name, err)
		}
		s.r = pr
		s.recs = newPCAPRecords(br, bigEnd, pr)
	}
	return s, nil
}

// LinkType is the link type of the capture's frames.
func (s *FileSource) LinkType() layers.LinkType { return s.r.LinkType() }

// Next returns the next frame, or io.EOF after the last one. A capture that
// ends in the middle of a frame gives an error that says so.
func (s *FileSource) Next() (Frame, error) {
	if s.recs != nil {
		data, tsNS, wireLen, err := s.recs.next()
		if err != nil {
			return Frame{}, s.readError(err)
		}
		s.frames++
		s.wireLen = wireLen
		return Frame{Data: data, TimeNS: tsNS}, nil
	}
	data, ci, err := s.r.ZeroCopyReadPacketData()
	if err != nil {
		return Frame{}, s.readError(err)
	}
	s.frames++
	s.wireLen = ci.Length
	return Frame{Data: data, TimeNS: ci.Timestamp.UnixNano()}, nil
}

// WireLen is the length on the wire of the frame Next returned last.
func (s *FileSource) WireLen() int { return s.wireLen }

// readError is what Next returns for a reader's error.
func (s *FileSource) readError(err error) error {
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("capture %q is truncated after %d frames: %w", s.name, s.frames, err)
	default:
		return fmt.Errorf("reading frame %d of %q: %w", s.frames+1, s.name, err)
	}
}

// pcapRecords reads the records of a pcap file in place, in a buffer of
// its own: pcapgo's reader copies each header and frame out of its reader
// through io.ReadFull and makes a time.Time of each timestamp (45 against
// 31 ns a frame of the bundled trace, BenchmarkFileSource), and a
// bufio.Reader's Peek and Discard cost 3 ns a frame more than this.
type pcapRecords struct {
	src      io.Reader // the file after its header
	buf      []byte
	r, w     int   // buf[r:w] is read and not yet taken
	err      error // what src's last read ended with
	bigEnd   bool
	nsFactor int64 // 1000 for microsecond timestamps
	maxLen   int   // the longest record taken, as pcapgo's
	big      []byte
}

// recordBuffer is the size of pcapRecords' buffer: at four times the
// bufio.Reader's it reads through, its reads go past that buffer straight
// into this one.
const recordBuffer = 1 << 18

func newPCAPRecords(src io.Reader, bigEnd bool, pr *pcapgo.Reader) *pcapRecords {
	r := &pcapRecords{src: src, buf: make([]byte, recordBuffer), bigEnd: bigEnd, nsFactor: 1, maxLen: max(int(pr.Snaplen()), 262144)}
	if pr.Resolution() == gopacket.TimestampResolutionMicrosecond {
		r.nsFactor = 1000
	}
	return r
}

// u32 reads a header field.
func (r *pcapRecords) u32(b []byte) int64 {
	if r.bigEnd {
		return int64(binary.BigEndian.Uint32(b))
	}
	return int64(binary.LittleEndian.Uint32(b))
}

// fill reads until the buffer holds n bytes not taken (n at most its
// size), moving them to its start first; it returns src's error if it
// ends before.
func (r *pcapRecords) fill(n int) error {
	if r.w-r.r >= n {
		return nil
	}
	if r.err != nil {
		return r.err
	}
	r.w = copy(r.buf, r.buf[r.r:r.w])
	r.r = 0
	for empty := 0; r.w < n; {
		m, err := r.src.Read(r.buf[r.w:])
		r.w += m
		if err != nil {
			r.err = err
			if r.w >= n {
				return nil
			}
			return err
		}
		if m > 0 {
			empty = 0
		} else if empty++; empty == 100 {
			r.err = io.ErrNoProgress
			return r.err
		}
	}
	return nil
}

// next reads the next record, a frame's data, time and length on the
// wire: io.EOF at the end of the file, io.ErrUnexpectedEOF inside a
// record.
func (r *pcapRecords) next() (data []byte, tsNS int64, wireLen int, err error) {
	if err := r.fill(16); err != nil {
		if r.w > r.r && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, 0, 0, err
	}
	h := r.buf[r.r : r.r+16]
	sec, frac, capLen, wire := r.u32(h[0:4]), r.u32(h[4:8]), r.u32(h[8:12]), r.u32(h[12:16])
	if capLen > int64(r.maxLen) {
		return nil, 0, 0, fmt.Errorf("capture length exceeds snap length: %d > %d", capLen, r.maxLen)
	}
	if capLen > wire {
		return nil, 0, 0, fmt.Errorf("capture length exceeds original packet length: %d > %d", capLen, wire)
	}
	tsNS = sec*1e9 + frac*r.nsFactor
	n := 16 + int(capLen)
	if n > len(r.buf) {
		data, err = r.long(n)
		return data, tsNS, int(wire), err
	}
	if err := r.fill(n); err != nil {
		return nil, 0, 0, unexpected(err)
	}
	data = r.buf[r.r+16 : r.r+n : r.r+n]
	r.r += n
	return data, tsNS, int(wire), nil
}

// long reads a record of n bytes, longer than the buffer, out of it: what
// the buffer holds, then a MiB at a time, so that a length the file does
// not hold (up to the 4 GiB a hostile header allows) takes no more memory
// than the file has.
func (r *pcapRecords) long(n int) ([]byte, error) {
	r.big = append(r.big[:0], r.buf[r.r:r.w]...)
	r.r, r.w = 0, 0
	if r.err != nil {
		return nil, unexpected(r.err)
	}
	for len(r.big) < n {
		step := min(n-len(r.big), 1<<20)
		r.big = slices.Grow(r.big, step)
		m, err := io.ReadFull(r.src, r.big[len(r.big):len(r.big)+step])
		r.big = r.big[:len(r.big)+m]
		if err != nil {
			r.err = err
			return nil, unexpected(err)
		}
	}
	return r.big[16:n], nil
}

// unexpected is io.ErrUnexpectedEOF for an end of file inside a record.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Frames is how many frames were read so far.
func (s *FileSource) Frames() uint64 { return s.frames }

// Close closes the underlying file, if the source opened it.
func (s *FileSource) Close() error {
	if s.closer == nil {
		return nil
	}
	return s.closer.Close()
}

// Pacer replays a capture at a multiple of its original speed: it sleeps
// before each frame until as much wall time has passed, scaled by speed, as
// capture time since the first frame.
type Pacer struct {
	speed     float64
	firstNS   int64
	startWall time.Time
	started   bool
}

// NewPacer returns a Pacer; speed 1 is real time, 2 twice as fast.
func NewPacer(speed float64) *Pacer { return &Pacer{speed: speed} }

// Wait blocks until the frame captured at tsNS is due, or ctx ends.
func (p *Pacer) Wait(ctx context.Context, tsNS int64) error {
	if p.speed <= 0 {
		return ctx.Err()
	}
	if !p.started {
		p.firstNS, p.startWall, p.started = tsNS, time.Now(), true
		return ctx.Err()
	}
	due := p.startWall.Add(time.Duration(float64(tsNS-p.firstNS) / p.speed))
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
