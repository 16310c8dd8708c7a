package store

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// BenchmarkApply stores path-epochs the way a collector under load does:
// writers for 200 paths, the paths of each epoch in an order of their
// own, each Write a result, its per-flow results
// and its sketch pair, and its boundary record, in shared transactions.
// The sizes are owl-load's at 5,000 packets per path-epoch with the
// packet sample (20 top flows, a 4.2 KB sketch pair, a 7.8 KB boundary
// record).
func BenchmarkApply(b *testing.B) {
	for _, c := range []struct {
		flows int
		lds   bool
	}{{20, true}, {0, true}, {20, false}, {0, false}} {
		b.Run(fmt.Sprintf("flows=%d/lds=%v", c.flows, c.lds), func(b *testing.B) { benchApply(b, c.flows, c.lds) })
	}
}

func benchApply(b *testing.B, flows int, withLDS bool) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const paths = 200
	rng := rand.New(rand.NewPCG(1, 2))
	pair := make([]byte, 7800)
	for i := range pair {
		pair[i] = byte(rng.Uint32())
	}
	var next atomic.Int64
	b.SetParallelism(paths / 2)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, w0 := cpuTime(), written()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			// Each round of epochs takes the paths in another order, as
			// a collector finishes them: a commit's writes are of paths
			// far apart (the multipliers are prime to 200).
			round := n / paths
			mult := []int64{1, 3, 7, 9, 11, 13, 17, 19, 21, 23, 27, 29, 31, 33, 37, 39}[round%16]
			path, epoch := fmt.Sprintf("load-%d", (n%paths*mult+round)%paths), 1_800_000_000+round
			w := Write{
				Results: []*owlv1.PathStats{{Path: path, Epoch: epoch, Estimator: "rda", MeanNs: 1e5, StddevNs: 1e4}},
				Done:    []EpochRef{{Path: path, Epoch: epoch}},
				// A boundary record, the one of 16 epochs before dropped.
				Boundaries:     []Boundary{{EpochRef: EpochRef{Path: path, Epoch: epoch}, Data: pair}},
				DropBoundaries: []EpochRef{{Path: path, Epoch: epoch - 16}},
			}
			if withLDS {
				w.LDS = []LDSPair{{EpochRef: EpochRef{Path: path, Epoch: epoch}, Pair: pair[:4200]}}
			}
			for f := range flows {
				w.Flows = append(w.Flows, FlowResult{Hash: uint64(f) * 0x9e3779b97f4a7c15, Stats: &owlv1.FlowStats{
					Path: path, Epoch: epoch, Packets: float64(250 - 10*f), MeanNs: 1e5, Estimator: "lds", Top: true,
					Flow:      &owlv1.FlowKey{Src: fmt.Sprintf("10.0.0.%d", f), Dst: "10.0.1.1", SrcPort: uint32(40000 + f), DstPort: 443, Protocol: 6},
					Quantiles: []*owlv1.DelayQuantile{{Q: 0.5, ValueNs: 1e5}, {Q: 0.99, ValueNs: 2e5}},
				}})
			}
			if err := s.Apply(w); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(written()-w0)/float64(b.N), "written-B/op")
}

// cpuTime is the process's user and system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// written is the bytes the process has written (/proc/self/io, wchar).
func written() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	var n int64
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			n, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return n
}

// BenchmarkDigests reads the block digests of a path with a day of 1 s
// epochs stored: from the index, and from every result as catch-up did
// before the index (EpochDigests over the whole history decodes each).
func BenchmarkDigests(b *testing.B) {
	s, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const day = 86_400
	for start := int64(0); start < day; start += 4096 {
		var rs []*owlv1.PathStats
		for e := start; e < min(start+4096, day); e++ {
			rs = append(rs, &owlv1.PathStats{Path: "p", Epoch: e, Estimator: "rda", MeanNs: 1e5, StddevNs: 1e4, Samples: 4950, Lost: 50})
		}
		if err := s.Apply(Write{Results: rs}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			if d, err := s.Digests("p"); err != nil || len(d) != day/DigestBlock+1 {
				b.Fatal(len(d), err)
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if d, err := s.EpochDigests("p", math.MinInt64); err != nil || len(d) != day {
				b.Fatal(len(d), err)
			}
		}
	})
}
