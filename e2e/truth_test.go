package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
)

// Ground truth for the real-link test, independent of owl's packet
// identity: tshark extracts header fields from tcpdump's captures at both
// observation points, and packets are matched by those fields.

// seen is one IPv4 packet in a capture, as tshark reports it.
type seen struct {
	key  string // addresses, IP id, IP length, protocol, ports, TCP seq/ack, UDP and TCP checksums
	flow capture.FlowKey
	tsNS int64
}

// tsharkPackets reads the IPv4 packets of a capture whose destination is dst.
func tsharkPackets(t *testing.T, pcap string, dst netip.Addr) []seen {
	t.Helper()
	t0 := time.Now()
	defer func() { t.Logf("tshark %s: %v", filepath.Base(pcap), time.Since(t0)) }()
	out, err := exec.Command("tshark", "-n", "-o", "tcp.desegment_tcp_streams:FALSE", "-o", "tcp.analyze_sequence_numbers:FALSE",
		"--disable-protocol", "http,dns,mdns", "-r", pcap, "-Y", "ip.dst == "+dst.String(), "-T", "fields", "-E", "separator=,", "-E", "occurrence=f",
		"-e", "frame.time_epoch", "-e", "ip.src", "-e", "ip.dst", "-e", "ip.id", "-e", "ip.len", "-e", "ip.proto",
		"-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "tcp.seq_raw", "-e", "tcp.ack_raw",
		"-e", "udp.srcport", "-e", "udp.dstport", "-e", "udp.checksum", "-e", "tcp.checksum").Output()
	if err != nil {
		t.Fatalf("tshark on %s: %v", pcap, err)
	}
	var pkts []seen
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		if len(f) != 14 {
			continue
		}
		ts, err := parseEpochNS(f[0])
		if err != nil {
			t.Fatalf("tshark time %q: %v", f[0], err)
		}
		// occurrence=f: an ICMP error's fields are its own outer header's
		// (and the quoted header's ports), so it is a packet like any other.
		src, err1 := netip.ParseAddr(f[1])
		d, err2 := netip.ParseAddr(f[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("tshark line %q: addresses %v, %v", sc.Text(), err1, err2)
		}
		if d != dst {
			// tshark's filter matches any ip.dst field: this is an ICMP
			// error quoting a packet to dst, going the other way. In
			// this direction's truth it was "lost" upstream and
			// "duplicated" downstream (CI failed on one).
			continue
		}
		proto, _ := strconv.Atoi(f[5])
		sp, dp := f[6], f[7]
		if proto == 17 {
			sp, dp = f[10], f[11]
		}
		spn, _ := strconv.Atoi(sp)
		dpn, _ := strconv.Atoi(dp)
		pkts = append(pkts, seen{
			key:  strings.Join([]string{f[1], f[2], f[3], f[4], f[5], sp, dp, f[8], f[9], f[12], f[13]}, "|"),
			flow: capture.FlowKey{Src: src, Dst: d, SrcPort: uint16(spn), DstPort: uint16(dpn), Proto: uint8(proto)},
			tsNS: ts,
		})
	}
	icmp, back, same := 0, 0, 0
	keys := make(map[string]bool, len(pkts))
	for i, p := range pkts {
		if p.flow.Proto == 1 {
			icmp++
		}
		if i > 0 && p.tsNS < pkts[i-1].tsNS {
			back++
		}
		if keys[p.key] {
			same++
		}
		keys[p.key] = true
	}
	if back > 0 || same > 0 {
		t.Logf("%s: %d packets to %v stamped before the one written ahead of them, %d with the header of an earlier one", filepath.Base(pcap), back, dst, same)
	}
	if icmp > 0 {
		t.Logf("%s: %d ICMP packets to %v", filepath.Base(pcap), icmp, dst)
	}
	return pkts
}

// parseEpochNS reads tshark's "seconds.nanoseconds" exactly.
func parseEpochNS(s string) (int64, error) {
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return 0, err
	}
	frac = (frac + "000000000")[:9]
	f, err := strconv.ParseInt(frac, 10, 64)
	return n*1e9 + f, err
}

// linkTruth is what the captures say of one path and epoch.
type linkTruth struct {
	sent, lost, crossed, extraIn, dups int
	n                                  int     // delivered (anywhere)
	sum, sq                            float64 // of their delays
	delays                             []int64 // their delays, ns
	flows                              map[capture.FlowKey]*flowAcc
	// odd lists, for the failure message, the first lost and
	// duplicated packets: their header key and where the copies of that
	// key were seen.
	odd []string
}

type flowAcc struct {
	n       int // delivered within the epoch
	sum, sq float64
	sentAll int
	// all and allSum are every delivered packet sent in the epoch and
	// their delays, those delivered in a later epoch included.
	all    int
	allSum float64
}

func (l *linkTruth) mean() float64 { return l.sum / float64(l.n) }

func (l *linkTruth) std() float64 {
	m := l.mean()
	return math.Sqrt(math.Max(l.sq/float64(l.n)-m*m, 0))
}

// truthHorizon is the longest delay the ground truth believes: a copy seen
// downstream later than this after its upstream twin is a different packet
// with the same header (a resent DNS query, a UDP datagram with IP ID 0).
const truthHorizon = time.Second

// truthStampSlack is how far a packet's downstream stamp may come before
// its upstream one and still be its copy: a capture stamps a frame when
// the kernel hands it over, which a loaded machine can delay by a
// millisecond or more (the captures hold frames stamped out of order),
// and a packet seen once upstream has no other packet its early copy
// could be.
const truthStampSlack = 20 * time.Millisecond

// matchTruth pairs each upstream packet, in time order, with the earliest
// unused downstream copy of the same header key seen at or after it and
// within truthHorizon (or, for the key's first upstream copy, its first
// downstream one stamped up to truthStampSlack before it in the same
// epoch: a negative delay, as owl measures it), and sums the truth per
// upstream epoch. Downstream copies left unpaired count as duplicates in
// their own epoch when the key was seen upstream.
//
// A capture file is not in time order when a probe runs several workers:
// each writes its frames as it takes them, and a flow moves to another
// worker when the kernel changes its hash (a TCP retransmission timeout
// does), so both sides are sorted by timestamp first; otherwise a later
// packet with the same header as an earlier one takes the earlier one's
// downstream copy, and the truth counts one loss and one duplicate.
func matchTruth(up, down []seen, grid epoch.Config) map[int64]*linkTruth {
	byTime := func(a, b seen) int { return cmp.Compare(a.tsNS, b.tsNS) }
	up = slices.Clone(up)
	slices.SortStableFunc(up, byTime)
	byKey := map[string][]int64{}
	for _, p := range down {
		byKey[p.key] = append(byKey[p.key], p.tsNS)
	}
	for _, v := range byKey {
		slices.Sort(v)
	}
	next := map[string]int{}      // first downstream copy not yet passed
	paired := map[string][]bool{} // which downstream copies are paired
	out := map[int64]*linkTruth{}
	get := func(e int64) *linkTruth {
		if out[e] == nil {
			out[e] = &linkTruth{flows: map[capture.FlowKey]*flowAcc{}}
		}
		return out[e]
	}
	upAt := map[string][]int64{} // each key's upstream stamps
	for _, p := range up {
		upAt[p.key] = append(upAt[p.key], p.tsNS)
	}
	for _, p := range up {
		e, _ := grid.Of(p.tsNS)
		lt := get(e)
		lt.sent++
		fa := lt.flows[p.flow]
		if fa == nil {
			fa = &flowAcc{}
			lt.flows[p.flow] = fa
		}
		fa.sentAll++
		ds := byKey[p.key]
		k := next[p.key]
		// The key's first packet may take a copy stamped just before it,
		// within its epoch (across the boundary owl cannot match such a
		// pair either, and counts a loss and an extra).
		early := k == 0 && len(ds) > 0 && upAt[p.key][0] == p.tsNS &&
			ds[0] < p.tsNS && p.tsNS-ds[0] <= int64(truthStampSlack) && sameEpoch(grid, ds[0], e)
		for !early && k < len(ds) && ds[k] < p.tsNS {
			k++ // seen before this packet left: another packet's copy
		}
		if k >= len(ds) || ds[k]-p.tsNS > int64(truthHorizon) {
			next[p.key] = k
			lt.lost++
			if len(lt.odd) < 6 {
				lt.odd = append(lt.odd, fmt.Sprintf("lost %s sent at %d; that header upstream %d times, downstream at %v", p.key, p.tsNS, len(upAt[p.key]), ds))
			}
			continue
		}
		next[p.key] = k + 1
		if paired[p.key] == nil {
			paired[p.key] = make([]bool, len(ds))
		}
		paired[p.key][k] = true
		dNS := ds[k] - p.tsNS
		fa.all++
		fa.allSum += float64(dNS)
		lt.n++
		lt.delays = append(lt.delays, dNS)
		lt.sum += float64(dNS)
		lt.sq += float64(dNS) * float64(dNS)
		de, _ := grid.Of(ds[k])
		if de != e {
			lt.crossed++
			get(de).extraIn++
		} else {
			fa.n++
			fa.sum += float64(dNS)
			fa.sq += float64(dNS) * float64(dNS)
		}
	}
	for key, ds := range byKey {
		if len(upAt[key]) == 0 {
			continue
		}
		for i, ts := range ds {
			if pk := paired[key]; pk == nil || !pk[i] {
				e, _ := grid.Of(ts)
				lt := get(e)
				lt.dups++
				if len(lt.odd) < 6 {
					lt.odd = append(lt.odd, fmt.Sprintf("duplicate %s seen at %d; that header upstream at %v, downstream at %v", key, ts, upAt[key], ds))
				}
			}
		}
	}
	return out
}

func (l *linkTruth) String() string {
	return fmt.Sprintf("sent %d lost %d crossed %d dups %d mean %.3f µs", l.sent, l.lost, l.crossed, l.dups, l.mean()/1e3)
}

// sameEpoch says whether a stamp (ns) falls in epoch e.
func sameEpoch(grid epoch.Config, tsNS, e int64) bool {
	de, _ := grid.Of(tsNS)
	return de == e
}

// TestMatchTruthEarlyStamp: a packet seen once upstream whose one
// downstream copy is stamped a little before it is delivered with a
// negative delay (as owl counts it), not lost with a duplicate; a copy
// stamped far before it, or before a key's second upstream packet, is
// still another packet's.
func TestMatchTruthEarlyStamp(t *testing.T) {
	grid := epoch.DefaultConfig()
	ms := int64(time.Millisecond)
	base := grid.StartNS(1_800_000_000)
	at := func(key string, off int64) seen { return seen{key: key, tsNS: base + off} }
	up := []seen{at("a", 100*ms), at("b", 100*ms), at("c", 10*ms), at("c", 200*ms), at("d", 1000*ms+ms/5)}
	down := []seen{at("a", 100*ms-ms/2), at("b", 50*ms), at("c", 15*ms), at("c", 190*ms), at("d", 1000*ms-ms/5)}
	truth := matchTruth(up, down, grid)
	lt, next := truth[1_800_000_000], truth[1_800_000_001]
	if lt == nil || next == nil {
		t.Fatal("no truth for the epochs")
	}
	// a: delivered at -0.5 ms; b: lost (its copy 50 ms early is a
	// duplicate); c: the first delivered at 5 ms, the second lost (the
	// copy before it is the first's or a duplicate); d, sent in the next
	// epoch and seen just before it began: lost there, a duplicate here.
	if lt.sent != 4 || lt.n != 2 || lt.lost != 2 || lt.dups != 3 || next.sent != 1 || next.lost != 1 {
		t.Fatalf("sent %d, delivered %d, lost %d, duplicates %d, and %d sent and %d lost in the next epoch; want 4, 2, 2, 3, 1 and 1 (%v)",
			lt.sent, lt.n, lt.lost, lt.dups, next.sent, next.lost, lt.odd)
	}
	if want := float64(-ms/2+5*ms) / 2; lt.mean() != want {
		t.Errorf("mean delay %.0f ns, want %.0f", lt.mean(), want)
	}
}
