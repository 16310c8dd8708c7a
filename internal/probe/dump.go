package probe

import (
	"bufio"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// dumper writes captured frames to a pcap file, shared by the workers.
type dumper struct {
	mu sync.Mutex
	f  *os.File
	bw *bufio.Writer
	w  *pcapgo.Writer
}

func newDumper(path string, snap int) (*dumper, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("capture dump: %w", err)
	}
	d := &dumper{f: f, bw: bufio.NewWriterSize(f, 1<<20)}
	d.w = pcapgo.NewWriterNanos(d.bw)
	if err := d.w.WriteFileHeader(uint32(snap), layers.LinkTypeEthernet); err != nil {
		f.Close()
		return nil, fmt.Errorf("capture dump: %w", err)
	}
	return d, nil
}

func (d *dumper) write(data []byte, tsNS int64, wireLen int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(0, tsNS), CaptureLength: len(data), Length: max(wireLen, len(data))}, data)
}

func (d *dumper) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.bw.Flush(); err != nil {
		d.f.Close()
		return err
	}
	return d.f.Close()
}
