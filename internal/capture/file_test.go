package capture

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// wireFrame is a frame and its length on the wire.
type wireFrame struct {
	Frame
	WireLen int
}

// pcapgoFrames reads a capture with pcapgo alone: its frames, and the
// error it stopped on (nil at the end of the file).
func pcapgoFrames(t *testing.T, b []byte) ([]wireFrame, error) {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out []wireFrame
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, wireFrame{Frame{Data: data, TimeNS: ci.Timestamp.UnixNano()}, ci.Length})
	}
}

// sourceFrames reads a capture with a FileSource: its frames (data
// copied) and the error it stopped on (nil at the end of the file).
func sourceFrames(t *testing.T, b []byte) ([]wireFrame, error) {
	t.Helper()
	s, err := NewFileSource("test", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out []wireFrame
	for {
		f, err := s.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		f.Data = bytes.Clone(f.Data)
		out = append(out, wireFrame{f, s.WireLen()})
	}
}

// bigEndianPCAP rewrites a little-endian pcap file in big-endian order.
func bigEndianPCAP(b []byte) []byte {
	out := bytes.Clone(b)
	swap32 := func(i int) { binary.BigEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(b[i:])) }
	swap16 := func(i int) { binary.BigEndian.PutUint16(out[i:], binary.LittleEndian.Uint16(b[i:])) }
	swap32(0)
	swap16(4)
	swap16(6)
	for _, i := range []int{8, 12, 16, 20} {
		swap32(i)
	}
	for i := 24; i+16 <= len(b); {
		n := int(binary.LittleEndian.Uint32(b[i+8:]))
		for _, j := range []int{0, 4, 8, 12} {
			swap32(i + j)
		}
		i += 16 + n
	}
	return out
}

// TestFileSourceAgrees reads captures through FileSource's own reading of
// pcap records and through pcapgo's, and wants the same frames and, for
// a damaged file, the same stop: micro- and nanosecond timestamps, both
// byte orders, gzip, a frame longer than the read buffer, and files cut
// inside a record's header and inside its frame.
func TestFileSourceAgrees(t *testing.T) {
	trace, err := os.ReadFile("../../testdata/trace.pcap")
	if err != nil {
		t.Fatal(err)
	}
	var nanos, long bytes.Buffer
	w := pcapgo.NewWriterNanos(&nanos)
	if err := w.WriteFileHeader(262144, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	lw := pcapgo.NewWriterNanos(&long)
	if err := lw.WriteFileHeader(1<<20, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	frames, err := pcapgoFrames(t, trace)
	if err != nil || len(frames) < 100 {
		t.Fatalf("trace: %d frames, %v", len(frames), err)
	}
	for i, f := range frames[:100] {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, f.TimeNS+int64(i)), CaptureLength: len(f.Data), Length: f.WireLen}
		if err := w.WritePacket(ci, f.Data); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 { // every tenth frame longer than the buffer
			data := bytes.Repeat(f.Data, recordBuffer/len(f.Data)+1)
			lci := gopacket.CaptureInfo{Timestamp: ci.Timestamp, CaptureLength: len(data), Length: len(data)}
			if err := lw.WritePacket(lci, data); err != nil {
				t.Fatal(err)
			}
		}
		if err := lw.WritePacket(ci, f.Data); err != nil {
			t.Fatal(err)
		}
	}
	cut := 24 // where the fourth record's header starts
	for _, f := range frames[:3] {
		cut += 16 + len(f.Data)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(trace)
	zw.Close()
	cases := map[string][]byte{
		"microseconds":               trace,
		"big endian":                 bigEndianPCAP(trace),
		"nanoseconds":                nanos.Bytes(),
		"nanoseconds, big endian":    bigEndianPCAP(nanos.Bytes()),
		"frames longer than buffer":  long.Bytes(),
		"cut in a record's header":   trace[:cut+10],
		"cut in a frame":             trace[:len(trace)-5],
		"cut in a frame, big endian": bigEndianPCAP(trace)[:len(trace)-5],
	}
	for name, b := range cases {
		want, wantErr := pcapgoFrames(t, b)
		got, err := sourceFrames(t, b)
		if len(got) != len(want) {
			t.Errorf("%s: %d frames, pcapgo reads %d", name, len(got), len(want))
			continue
		}
		for i := range want {
			if !bytes.Equal(got[i].Data, want[i].Data) || got[i].TimeNS != want[i].TimeNS || got[i].WireLen != want[i].WireLen {
				t.Errorf("%s: frame %d: %d bytes at %d (wire %d), pcapgo reads %d bytes at %d (wire %d)", name, i,
					len(got[i].Data), got[i].TimeNS, got[i].WireLen, len(want[i].Data), want[i].TimeNS, want[i].WireLen)
				break
			}
		}
		switch {
		case (err == nil) != (wantErr == nil):
			t.Errorf("%s: stopped on %v, pcapgo on %v", name, err, wantErr)
		case err != nil && (!errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "truncated after")):
			t.Errorf("%s: stopped on %v, want a truncated capture (pcapgo: %v)", name, err, wantErr)
		}
		t.Logf("%s: %d frames, stopped on %v", name, len(got), err)
	}
	gzFrames, err := sourceFrames(t, gz.Bytes())
	if err != nil || len(gzFrames) != len(frames) {
		t.Errorf("gzip: %d frames (%v), want %d", len(gzFrames), err, len(frames))
	}
}

// TestFileSourceBadRecord checks the records pcapgo refuses: longer than
// the file's snap length allows, or captured longer than on the wire.
func TestFileSourceBadRecord(t *testing.T) {
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name           string
		capLen, length uint32
		want           string
	}{
		{"past the snap length", 300000, 300000, "exceeds snap length"},
		{"longer than on the wire", 100, 60, "exceeds original packet length"},
	} {
		rec := binary.LittleEndian.AppendUint32(nil, 1)
		rec = binary.LittleEndian.AppendUint32(rec, 0)
		rec = binary.LittleEndian.AppendUint32(rec, c.capLen)
		rec = binary.LittleEndian.AppendUint32(rec, c.length)
		b := append(append(bytes.Clone(buf.Bytes()), rec...), make([]byte, 100)...)
		_, err := sourceFrames(t, b)
		_, wantErr := pcapgoFrames(t, b)
		if err == nil || !strings.Contains(err.Error(), c.want) || wantErr == nil {
			t.Errorf("%s: %v (pcapgo: %v), want %q", c.name, err, wantErr, c.want)
		}
	}
}

// BenchmarkFileSource reads the bundled trace, held in memory, through a
// FileSource and through pcapgo's reader (its zero-copy read, and the
// timestamp made into nanoseconds as Next does).
func BenchmarkFileSource(b *testing.B) {
	trace, err := os.ReadFile("../../testdata/trace.pcap")
	if err != nil {
		b.Fatal(err)
	}
	frames := 0
	b.Run("source", func(b *testing.B) {
		for b.Loop() {
			s, err := NewFileSource("bench", bytes.NewReader(trace))
			if err != nil {
				b.Fatal(err)
			}
			frames = 0
			for {
				if _, err := s.Next(); err != nil {
					break
				}
				frames++
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*frames), "ns/frame")
	})
	b.Run("pcapgo", func(b *testing.B) {
		var ts int64
		for b.Loop() {
			r, err := pcapgo.NewReader(bytes.NewReader(trace))
			if err != nil {
				b.Fatal(err)
			}
			frames = 0
			for {
				_, ci, err := r.ZeroCopyReadPacketData()
				if err != nil {
					break
				}
				ts += ci.Timestamp.UnixNano()
				frames++
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*frames), "ns/frame")
	})
}

// TestFileSourceHostileLength: a header that allows 4 GiB records and a
// record that claims 3 GiB in a file of a few bytes is a truncated
// capture, read without taking memory for the length claimed.
func TestFileSourceHostileLength(t *testing.T) {
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(0xffffffff, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	rec := binary.LittleEndian.AppendUint32(nil, 1)
	rec = binary.LittleEndian.AppendUint32(rec, 0)
	rec = binary.LittleEndian.AppendUint32(rec, 3<<30)
	rec = binary.LittleEndian.AppendUint32(rec, 3<<30)
	b := append(append(buf.Bytes(), rec...), make([]byte, 1000)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := sourceFrames(t, b)
	runtime.ReadMemStats(&after)
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("stopped on %v, want a truncated capture", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("allocated %d MiB for a 3 GiB record in a 1 KB file", grew>>20)
	}
}
