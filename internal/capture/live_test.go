package capture

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// needRoot skips a test that needs root and the named tools.
func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("live capture test")
	}
	if os.Geteuid() != 0 {
		t.Skip("live capture needs root")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// vethPair makes a veth pair in the root namespace, both ends up, with
// offloads off so that frames stay as sent.
func vethPair(t *testing.T, a, b string) {
	t.Helper()
	exec.Command("ip", "link", "del", a).Run()
	run(t, "ip", "link", "add", a, "type", "veth", "peer", "name", b)
	t.Cleanup(func() { exec.Command("ip", "link", "del", a).Run() })
	for _, dev := range []string{a, b} {
		run(t, "ip", "link", "set", dev, "up")
		exec.Command("ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off").Run()
		// No IPv6 of our own: the kernel would send router solicitations.
		os.WriteFile("/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6", []byte("1"), 0o644)
	}
}

// capture reads from the sockets of a live capture until quiet for idle,
// returning how often each packet ID was seen.
func captureIDs(t *testing.T, cfg LiveConfig, started chan<- struct{}, idle time.Duration) (map[uint64]int, uint64) {
	t.Helper()
	var srcs []*LiveSource
	for w := 0; w < cfg.Workers; w++ {
		s, err := OpenLive(cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		srcs = append(srcs, s)
	}
	close(started)
	var mu sync.Mutex
	ids := map[uint64]int{}
	var wg sync.WaitGroup
	for _, s := range srcs {
		wg.Go(func() {
			d, _ := NewDecoder(s.LinkType(), DefaultIdentityConfig())
			last := time.Now()
			for time.Since(last) < idle {
				f, err := s.Next()
				if errors.Is(err, ErrTimeout) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				last = time.Now()
				var p Packet
				if d.Decode(f.Data, f.TimeNS, &p) == nil {
					mu.Lock()
					ids[p.ID]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	var drops uint64
	for _, s := range srcs {
		_, d, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		drops += d
	}
	return ids, drops
}

// pcapIDs decodes a capture file into packet ID counts.
func pcapIDs(t *testing.T, path string) (map[uint64]int, int) {
	t.Helper()
	src, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	d, _ := NewDecoder(src.LinkType(), DefaultIdentityConfig())
	ids := map[uint64]int{}
	frames := 0
	for {
		f, err := src.Next()
		if err == io.EOF {
			return ids, frames
		}
		if err != nil {
			t.Fatal(err)
		}
		frames++
		var p Packet
		if d.Decode(f.Data, f.TimeNS, &p) == nil {
			ids[p.ID]++
		}
	}
}

// TestLiveCaptureMatchesTcpdump replays the bundled trace over a veth pair
// with tcpreplay and captures it at the other end with owl's afpacket
// source (1 and 2 fanout workers) and with tcpdump at once: the decoded
// packet identities must be the same, and tshark must count as many frames
// in tcpdump's file as the probe saw.
func TestLiveCaptureMatchesTcpdump(t *testing.T) {
	needRoot(t, "ip", "tcpreplay", "tcpdump", "tshark")
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			a, b := fmt.Sprintf("owlcap%da", workers), fmt.Sprintf("owlcap%db", workers)
			vethPair(t, a, b)
			dir := t.TempDir()
			dump := filepath.Join(dir, "tcpdump.pcap")
			td := exec.Command("tcpdump", "-i", b, "-s", "0", "-U", "-w", dump, "--time-stamp-precision=nano", "-q")
			stderr, _ := td.StderrPipe()
			if err := td.Start(); err != nil {
				t.Fatal(err)
			}
			// Wait for tcpdump to listen.
			sc := bufio.NewScanner(stderr)
			for sc.Scan() && !strings.Contains(sc.Text(), "listening") {
			}
			go io.Copy(io.Discard, stderr)

			cfg := DefaultLiveConfig()
			cfg.Interface, cfg.Workers = b, workers
			started := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				<-started
				run(t, "tcpreplay", "-q", "-i", a, "--pps", "20000", "../../testdata/trace.pcap")
			}()
			ids, drops := captureIDs(t, cfg, started, 2*time.Second)
			<-done
			time.Sleep(200 * time.Millisecond)
			td.Process.Signal(os.Interrupt)
			td.Wait()

			want, frames := pcapIDs(t, dump)
			out, err := exec.Command("tshark", "-r", dump, "-T", "fields", "-e", "frame.number").Output()
			if err != nil {
				t.Fatal(err)
			}
			tsharkFrames := len(strings.Fields(string(out)))
			n := 0
			for _, c := range ids {
				n += c
			}
			t.Logf("owl saw %d IP packets (%d ring drops); tcpdump %d frames (tshark counts %d), %d IP packets",
				n, drops, frames, tsharkFrames, sumCounts(want))
			if tsharkFrames != frames {
				t.Errorf("tshark counts %d frames, owl's reader %d", tsharkFrames, frames)
			}
			if drops != 0 {
				t.Errorf("%d ring drops at 20,000 packets/s", drops)
			}
			if !maps.Equal(ids, want) {
				missing, extra := 0, 0
				for id, c := range want {
					if ids[id] < c {
						missing += c - ids[id]
					}
				}
				for id, c := range ids {
					if want[id] < c {
						extra += c - want[id]
					}
				}
				t.Errorf("packet identities differ: %d missing from owl's capture, %d extra", missing, extra)
			}
			if n < 25000 {
				t.Errorf("only %d packets captured", n)
			}
		})
	}
}

func sumCounts(m map[uint64]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

func TestParseBPF(t *testing.T) {
	prog, err := ParseBPF("4\n40 0 0 12\n21 0 1 2048\n6 0 0 262144\n6 0 0 0\n")
	if err != nil || len(prog) != 4 || prog[1].K != 2048 || prog[1].Jf != 1 {
		t.Fatalf("%v %v", prog, err)
	}
	if prog, err := ParseBPF("2,6 0 0 1,6 0 0 0"); err != nil || len(prog) != 2 {
		t.Fatalf("comma form: %v %v", prog, err)
	}
	for _, bad := range []string{"x", "3,6 0 0 1", "1,6 0 0", "1,6 0 0 99999999999"} {
		if _, err := ParseBPF(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestLiveConfigYAML: a live source in YAML takes the defaults for the
// keys it leaves out and refuses unknown keys; a block timeout out of
// range does not validate.
func TestLiveConfigYAML(t *testing.T) {
	var c LiveConfig
	if err := yaml.Unmarshal([]byte("interface: eth1\nworkers: 2\npromiscuous: false\n"), &c); err != nil {
		t.Fatal(err)
	}
	want := DefaultLiveConfig()
	want.Interface, want.Workers, want.Promiscuous = "eth1", 2, false
	if c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults with an interface do not validate: %v", err)
	}
	if err := yaml.Unmarshal([]byte("interface: eth1\nworkerz: 2\n"), &c); err == nil || !strings.Contains(err.Error(), "workerz") {
		t.Errorf("unknown key: %v", err)
	}
	for _, d := range []time.Duration{0, 2 * time.Second} {
		c := want
		c.BlockTimeout = d
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "block_timeout") {
			t.Errorf("block timeout %v: %v", d, err)
		}
	}
}

// TestLiveKernelVXLAN sends traffic through a kernel VXLAN device and
// captures the encapsulated frames on the underlay with owl: their inner
// packets' identities must equal those tcpdump sees on the VXLAN device
// itself, for the standard port and for Linux's old default 8472.
func TestLiveKernelVXLAN(t *testing.T) {
	needRoot(t, "ip", "tcpdump", "bash")
	for _, port := range []int{4789, 8472} {
		t.Run(fmt.Sprintf("port=%d", port), func(t *testing.T) {
			ns := fmt.Sprintf("owlvx%d", port)
			a, b := fmt.Sprintf("owlvx%da", port), fmt.Sprintf("owlvx%db", port)
			exec.Command("ip", "netns", "del", ns).Run()
			run(t, "ip", "netns", "add", ns)
			t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
			vethPair(t, a, b)
			run(t, "ip", "link", "set", a, "netns", ns)
			in := func(args ...string) { run(t, "ip", append([]string{"netns", "exec", ns}, args...)...) }
			in("ip", "addr", "add", "10.200.0.1/24", "dev", a)
			in("ip", "link", "set", a, "up")
			in("ip", "link", "set", "lo", "up")
			run(t, "ip", "addr", "add", "10.200.0.2/24", "dev", b)
			in("ip", "link", "add", "vx0", "type", "vxlan", "id", "42", "remote", "10.200.0.2", "dstport", strconv.Itoa(port), "dev", a)
			in("ip", "addr", "add", "192.168.200.1/24", "dev", "vx0")
			in("ip", "link", "set", "vx0", "up")
			in("ip", "neigh", "add", "192.168.200.2", "lladdr", "02:00:00:00:00:99", "dev", "vx0")

			dir := t.TempDir()
			dump := filepath.Join(dir, "inner.pcap")
			td := exec.Command("ip", "netns", "exec", ns, "tcpdump", "-i", "vx0", "-s", "0", "-U", "-w", dump, "-q", "udp")
			stderr, _ := td.StderrPipe()
			if err := td.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stderr)
			for sc.Scan() && !strings.Contains(sc.Text(), "listening") {
			}
			go io.Copy(io.Discard, stderr)

			cfg := DefaultLiveConfig()
			cfg.Interface = b
			started := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				<-started
				// UDP datagrams made by the kernel's own stack (bash's /dev/udp).
				exec.Command("ip", "netns", "exec", ns, "bash", "-c",
					"for i in $(seq 300); do echo datagram-$i > /dev/udp/192.168.200.2/9999; done").Run()
			}()
			var ids map[uint64]int
			{
				srcs, err := OpenLive(cfg, 0)
				if err != nil {
					t.Fatal(err)
				}
				idc := DefaultIdentityConfig()
				if port != 4789 {
					idc.VXLANPort = uint16(port)
				}
				d, _ := NewDecoder(srcs.LinkType(), idc)
				close(started)
				ids = map[uint64]int{}
				last := time.Now()
				for time.Since(last) < 2*time.Second {
					f, err := srcs.Next()
					if errors.Is(err, ErrTimeout) {
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					last = time.Now()
					var p Packet
					if d.Decode(f.Data, f.TimeNS, &p) == nil && p.Flow.Proto == 17 && p.Flow.DstPort == 9999 {
						ids[p.ID]++
					}
				}
				srcs.Close()
			}
			<-done
			td.Process.Signal(os.Interrupt)
			td.Wait()
			want, _ := pcapIDs(t, dump)
			t.Logf("inner UDP packets: owl on the underlay %d, tcpdump on the VXLAN device %d", sumCounts(ids), sumCounts(want))
			if sumCounts(want) < 250 || !maps.Equal(ids, want) {
				t.Errorf("identities of VXLAN-encapsulated packets differ from the inner ones (%d vs %d packets)", sumCounts(ids), sumCounts(want))
			}
		})
	}
}
