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
// call to Next.
type Frame struct {
	Data []byte
	// TimeNS is the capture timestamp, nanoseconds since the Unix epoch.
	TimeNS int64
	// WireLen is the frame's length on the wire (Data may be shorter).
	WireLen int
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
	recs   *pcapRecords
	closer io.Closer
	frames uint64
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
		f, err := s.recs.next()
		if err != nil {
			return Frame{}, s.readError(err)
		}
		s.frames++
		return f, nil
	}
	data, ci, err := s.r.ZeroCopyReadPacketData()
	if err != nil {
		return Frame{}, s.readError(err)
	}
	s.frames++
	return Frame{Data: data, TimeNS: ci.Timestamp.UnixNano(), WireLen: ci.Length}, nil
}

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

// pcapRecords reads the records of a pcap file in place, in its reader's
// buffer: pcapgo's reader copies each header and frame out of it through
// io.ReadFull and makes a time.Time of each timestamp: 45 against 31 ns a
// frame of the bundled trace (BenchmarkFileSource).
type pcapRecords struct {
	br       *bufio.Reader
	bigEnd   bool
	nsFactor int64 // 1000 for microsecond timestamps
	maxLen   int   // the longest record taken, as pcapgo's
	big      []byte
}

func newPCAPRecords(br *bufio.Reader, bigEnd bool, pr *pcapgo.Reader) *pcapRecords {
	r := &pcapRecords{br: br, bigEnd: bigEnd, nsFactor: 1, maxLen: max(int(pr.Snaplen()), 262144)}
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

// next reads the next record: io.EOF at the end of the file,
// io.ErrUnexpectedEOF inside a record.
func (r *pcapRecords) next() (Frame, error) {
	h, err := r.br.Peek(16)
	if err != nil {
		if len(h) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	sec, frac, capLen, wireLen := r.u32(h[0:4]), r.u32(h[4:8]), r.u32(h[8:12]), r.u32(h[12:16])
	if capLen > int64(r.maxLen) {
		return Frame{}, fmt.Errorf("capture length exceeds snap length: %d > %d", capLen, r.maxLen)
	}
	if capLen > wireLen {
		return Frame{}, fmt.Errorf("capture length exceeds original packet length: %d > %d", capLen, wireLen)
	}
	f := Frame{TimeNS: sec*1e9 + frac*r.nsFactor, WireLen: int(wireLen)}
	n := 16 + int(capLen)
	if n > r.br.Size() { // longer than the buffer: read out of it
		// A MiB at a time, so that a length the file does not hold
		// (up to the 4 GiB a hostile header allows) takes no more
		// memory than the file has.
		r.big = r.big[:0]
		for len(r.big) < n {
			step := min(n-len(r.big), 1<<20)
			r.big = slices.Grow(r.big, step)
			m, err := io.ReadFull(r.br, r.big[len(r.big):len(r.big)+step])
			r.big = r.big[:len(r.big)+m]
			if err != nil {
				return Frame{}, unexpected(err)
			}
		}
		f.Data = r.big[16:]
		return f, nil
	}
	rec, err := r.br.Peek(n)
	if err != nil {
		return Frame{}, unexpected(err)
	}
	f.Data = rec[16:]
	_, err = r.br.Discard(n)
	return f, err
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
