package capture

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gopacket/gopacket/afpacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"
)

// LiveConfig is a live capture on one interface with AF_PACKET TPACKET_V3.
type LiveConfig struct {
	// Interface to capture on (a mirror port, a NIC).
	Interface string `yaml:"interface"`
	// Workers is the number of sockets in a PACKET_FANOUT group (hash
	// mode: a flow stays on one socket); each has its own goroutine and
	// synopses, merged at epoch close.
	Workers int `yaml:"workers"`
	// FanoutGroup identifies the fanout group (0: from the process id).
	FanoutGroup uint16 `yaml:"fanout_group"`
	// BlockSize and NumBlocks size each socket's ring; FrameSize bounds
	// the bytes kept of a packet (the snap length).
	BlockSize int `yaml:"block_size"`
	NumBlocks int `yaml:"num_blocks"`
	FrameSize int `yaml:"frame_size"`
	// Promiscuous puts the interface in promiscuous mode (mirror ports).
	Promiscuous bool `yaml:"promiscuous"`
	// BPF is a classic BPF filter in `tcpdump -ddd` form ("4,40 0 0 12,…").
	BPF string `yaml:"bpf"`
	// IgnoreOutgoing leaves out packets the host itself sends on the
	// interface: on lo every packet shows up going out and coming in, and
	// would be counted twice. Turn it off to measure what a host sends.
	IgnoreOutgoing bool `yaml:"ignore_outgoing"`
	// HardwareTimestamps asks the NIC for receive timestamps
	// (SO_TIMESTAMPING raw hardware); without support, software
	// timestamps are used and the source says so.
	HardwareTimestamps bool `yaml:"hardware_timestamps"`
	// PollTimeout is how long a socket waits for a packet before the
	// worker advances time on the clock (closing idle epochs).
	PollTimeout time.Duration `yaml:"poll_timeout"`
	// BlockTimeout is how long the kernel fills a ring block before it
	// hands the block over with what it holds. Each block handed over
	// takes one of NumBlocks, so at low rates the ring holds NumBlocks
	// times this much time for a worker held up (64 × 50 ms: 3.2 s). A
	// packet may wait up to twice this long in the kernel, and an idle
	// worker's time lags the clock by as much.
	BlockTimeout time.Duration `yaml:"block_timeout"`
	// Dump writes every captured frame, with the timestamp the probe uses,
	// to this pcap file (for checking a probe against other tools: two
	// capture sockets on one interface may stamp a packet differently).
	Dump string `yaml:"dump"`
}

// DefaultLiveConfig returns one worker, 64 blocks of 1 MiB, 2 KiB frames,
// promiscuous, outgoing packets ignored, software timestamps.
func DefaultLiveConfig() LiveConfig {
	return LiveConfig{Workers: 1, BlockSize: 1 << 20, NumBlocks: 64, FrameSize: 2048, Promiscuous: true,
		IgnoreOutgoing: true, PollTimeout: 50 * time.Millisecond, BlockTimeout: 50 * time.Millisecond}
}

// UnmarshalYAML reads a live source over the defaults: the keys left out
// keep DefaultLiveConfig's values. An unknown key is an error, as
// elsewhere in a probe's configuration.
func (c *LiveConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		known := map[string]bool{}
		t := reflect.TypeFor[LiveConfig]()
		for i := range t.NumField() {
			known[t.Field(i).Tag.Get("yaml")] = true
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; !known[k.Value] {
				return fmt.Errorf("line %d: live capture has no key %q", k.Line, k.Value)
			}
		}
	}
	type plain LiveConfig // without this method
	p := plain(DefaultLiveConfig())
	if err := n.Decode(&p); err != nil {
		return err
	}
	*c = LiveConfig(p)
	return nil
}

// Validate reports a setting out of range.
func (c LiveConfig) Validate() error {
	if c.Interface == "" {
		return errors.New("live capture needs an interface")
	}
	if c.Workers < 1 || c.Workers > 64 {
		return fmt.Errorf("live capture workers %d out of range [1, 64]", c.Workers)
	}
	page := os.Getpagesize()
	if c.BlockSize < page || c.BlockSize%page != 0 || c.NumBlocks < 1 || c.FrameSize < 128 || c.FrameSize > c.BlockSize || c.BlockSize%c.FrameSize != 0 {
		return fmt.Errorf("live capture ring: block_size %d must be a multiple of the page size (%d) and of frame_size %d (≥ 128), num_blocks ≥ 1",
			c.BlockSize, page, c.FrameSize)
	}
	if c.PollTimeout < time.Millisecond {
		return errors.New("live capture poll_timeout must be at least 1ms")
	}
	if c.BlockTimeout < time.Millisecond || c.BlockTimeout > time.Second {
		return fmt.Errorf("live capture block_timeout %v out of range [1ms, 1s]", c.BlockTimeout)
	}
	if _, err := ParseBPF(c.BPF); err != nil {
		return err
	}
	return nil
}

// ParseBPF reads a classic BPF program in `tcpdump -ddd` form: the
// instruction count, then one "code jt jf k" per instruction, separated by
// commas or newlines. An empty string is no filter.
func ParseBPF(s string) ([]bpf.RawInstruction, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' })
	n, err := strconv.Atoi(strings.TrimSpace(fields[0]))
	if err != nil || n != len(fields)-1 || n < 1 || n > 4096 {
		return nil, fmt.Errorf("bpf: want `tcpdump -ddd` output (count, then that many \"code jt jf k\" lines), got %d fields after %q", len(fields)-1, fields[0])
	}
	out := make([]bpf.RawInstruction, n)
	for i, f := range fields[1:] {
		var code, jt, jf, k uint64
		parts := strings.Fields(f)
		if len(parts) != 4 {
			return nil, fmt.Errorf("bpf instruction %d %q: want 4 numbers", i, f)
		}
		var errs [4]error
		code, errs[0] = strconv.ParseUint(parts[0], 10, 16)
		jt, errs[1] = strconv.ParseUint(parts[1], 10, 8)
		jf, errs[2] = strconv.ParseUint(parts[2], 10, 8)
		k, errs[3] = strconv.ParseUint(parts[3], 10, 32)
		if err := errors.Join(errs[:]...); err != nil {
			return nil, fmt.Errorf("bpf instruction %d %q: %w", i, f, err)
		}
		out[i] = bpf.RawInstruction{Op: uint16(code), Jt: uint8(jt), Jf: uint8(jf), K: uint32(k)}
	}
	return out, nil
}

// LiveSource reads frames from one socket of a live capture. Not safe for
// concurrent use; open one per worker.
type LiveSource struct {
	tp       *afpacket.TPacket
	cfg      LiveConfig
	tsSource string
	wireLen  int // of the frame Next returned last
}

// ErrTimeout is returned by Next when no packet came within the poll timeout.
var ErrTimeout = afpacket.ErrTimeout

// OpenLive opens worker w's socket of a live capture.
func OpenLive(cfg LiveConfig, w int) (*LiveSource, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tp, err := afpacket.NewTPacket(
		afpacket.OptInterface(cfg.Interface),
		afpacket.OptFrameSize(cfg.FrameSize),
		afpacket.OptBlockSize(cfg.BlockSize),
		afpacket.OptNumBlocks(cfg.NumBlocks),
		afpacket.OptPollTimeout(cfg.PollTimeout),
		afpacket.OptBlockTimeout(cfg.BlockTimeout),
		afpacket.TPacketVersion3,
	)
	if err != nil {
		return nil, fmt.Errorf("opening AF_PACKET socket on %s: %w", cfg.Interface, err)
	}
	s := &LiveSource{tp: tp, cfg: cfg, tsSource: "software"}
	fail := func(what string, err error) (*LiveSource, error) {
		tp.Close()
		return nil, fmt.Errorf("%s on %s: %w", what, cfg.Interface, err)
	}
	if cfg.Promiscuous {
		if err := tp.SetPromiscuous(true); err != nil {
			return fail("promiscuous mode", err)
		}
	}
	if prog, _ := ParseBPF(cfg.BPF); prog != nil {
		if err := tp.SetBPF(prog); err != nil {
			return fail("BPF filter", err)
		}
	}
	fd, fdErr := socketFD(tp)
	if fdErr == nil {
		// Ask the kernel to timestamp every packet once, as it enters the
		// stack or leaves for the driver. Without this, each capture
		// socket stamps a packet when the packet reaches it, and two
		// sockets on one interface (a probe and tcpdump, two fanout
		// groups) disagree by hundreds of nanoseconds.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
			return fail("SO_TIMESTAMPNS", err)
		}
	}
	if cfg.IgnoreOutgoing {
		if fdErr != nil {
			return fail("ignoring outgoing packets", fdErr)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
			return fail("ignoring outgoing packets (PACKET_IGNORE_OUTGOING, Linux ≥ 4.20)", err)
		}
	}
	if cfg.HardwareTimestamps && fdErr == nil {
		s.tsSource = enableHardwareTimestamps(fd, cfg.Interface)
	}
	if cfg.Workers > 1 {
		group := cfg.FanoutGroup
		if group == 0 {
			group = uint16(os.Getpid())
		}
		if err := tp.SetFanout(afpacket.FanoutHashWithDefrag, group); err != nil {
			return fail("PACKET_FANOUT", err)
		}
	}
	if err := tp.InitSocketStats(); err != nil {
		return fail("socket statistics", err)
	}
	return s, nil
}

// socketFD returns the socket's file descriptor. gopacket keeps it in an
// unexported field and offers no accessor; the options owl needs
// (PACKET_IGNORE_OUTGOING, PACKET_TIMESTAMP) are set on it directly.
func socketFD(tp *afpacket.TPacket) (int, error) {
	f := reflect.ValueOf(tp).Elem().FieldByName("fd")
	if !f.IsValid() || f.Kind() != reflect.Int {
		return -1, errors.New("the AF_PACKET socket's descriptor is not reachable in this gopacket version")
	}
	return int(f.Int()), nil
}

// enableHardwareTimestamps turns on receive timestamps in the NIC and asks
// the ring for them; it returns the timestamp source in use.
func enableHardwareTimestamps(fd int, ifname string) string {
	info, err := unix.IoctlGetEthtoolTsInfo(fd, ifname)
	if err != nil || info.So_timestamping&unix.SOF_TIMESTAMPING_RAW_HARDWARE == 0 {
		return "software (the NIC offers no hardware receive timestamps)"
	}
	cfg := &unix.HwTstampConfig{Rx_filter: unix.HWTSTAMP_FILTER_ALL}
	if err := unix.IoctlSetHwTstamp(fd, ifname, cfg); err != nil {
		return "software (enabling hardware timestamps failed: " + err.Error() + ")"
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_TIMESTAMP, unix.SOF_TIMESTAMPING_RAW_HARDWARE); err != nil {
		return "software (PACKET_TIMESTAMP failed: " + err.Error() + ")"
	}
	return "hardware"
}

// LinkType is Ethernet: AF_PACKET raw sockets deliver whole frames.
func (s *LiveSource) LinkType() layers.LinkType { return layers.LinkTypeEthernet }

// TimestampSource says whether timestamps come from the NIC or the kernel.
func (s *LiveSource) TimestampSource() string { return s.tsSource }

// Next returns the next frame; its Data is valid until the next call. It
// returns ErrTimeout after PollTimeout without a packet.
func (s *LiveSource) Next() (Frame, error) {
	data, ci, err := s.tp.ZeroCopyReadPacketData()
	if err != nil {
		return Frame{}, err
	}
	s.wireLen = ci.Length
	return Frame{Data: data, TimeNS: ci.Timestamp.UnixNano()}, nil
}

// WireLen is the length on the wire of the frame Next returned last.
func (s *LiveSource) WireLen() int { return s.wireLen }

// Stats returns the packets the kernel offered the socket and those it
// dropped because the ring was full, since the socket opened.
func (s *LiveSource) Stats() (packets, drops uint64, err error) {
	_, v3, err := s.tp.SocketStats()
	if err != nil {
		return 0, 0, err
	}
	return uint64(v3.Packets()), uint64(v3.Drops()), nil
}

// Close closes the socket.
func (s *LiveSource) Close() { s.tp.Close() }
