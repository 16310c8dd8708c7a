package rap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFindsTopFlows streams a skewed trace (Zipf flow sizes, packets in
// random order) through a table of 2·K counters and checks that at least
// 90% of the true top K flows are among its top K.
func TestFindsTopFlows(t *testing.T) {
	for _, k := range []int{10, 50, 100} {
		r := rand.New(rand.NewPCG(uint64(k), 7))
		z := rand.NewZipf(r, 1.2, 1, 100_000)
		var stream []uint64
		truth := map[uint64]int{}
		for i := 0; i < 500_000; i++ {
			f := z.Uint64()
			stream = append(stream, f)
			truth[f]++
		}
		tab := New[uint64](2*k, 1)
		for _, f := range stream {
			key := f*0x9e3779b97f4a7c15 + 1
			tab.Add(key, &f)
		}
		flows := make([]uint64, 0, len(truth))
		for f := range truth {
			flows = append(flows, f)
		}
		slices.SortFunc(flows, func(a, b uint64) int { return truth[b] - truth[a] })
		top := map[uint64]bool{}
		for _, e := range tab.Top(k) {
			top[e.Value] = true
		}
		found := 0
		for _, f := range flows[:k] {
			if top[f] {
				found++
			}
		}
		t.Logf("K=%d with %d counters: %d of the true top %d found", k, 2*k, found, k)
		if float64(found) < 0.9*float64(k) {
			t.Errorf("K=%d: found %d of the top %d", k, found, k)
		}
	}
}

func TestCountsAndHeap(t *testing.T) {
	tab := New[int](3, 1)
	for i, n := range []int{5, 3, 8} {
		for j := 0; j < n; j++ {
			v := i
			tab.Add(uint64(i+1), &v)
		}
	}
	top := tab.Top(3)
	if len(top) != 3 || top[0].Count != 8 || top[1].Count != 5 || top[2].Count != 3 || top[0].Value != 2 {
		t.Fatalf("top %+v", top)
	}
	// A new flow replaces the minimum only with probability 1/(min+1):
	// over many tries the table keeps its three counters consistent.
	for i := 0; i < 10_000; i++ {
		v := 100 + i
		tab.Add(uint64(100+i), &v)
	}
	if tab.Len() != 3 {
		t.Fatalf("len %d", tab.Len())
	}
	for i, e := range tab.heap {
		if tab.pos[e.Key] != i {
			t.Fatal("index out of step with heap")
		}
		if l := 2*i + 1; l < len(tab.heap) && tab.heap[l].Count < e.Count {
			t.Fatal("heap order broken")
		}
	}
	if tab.Top(1)[0].Count < 8 {
		t.Error("heaviest flow lost")
	}
	checkHeld(t, tab)
}

// checkHeld fails unless the table's filter counts exactly its tracked
// keys, slot by slot.
func checkHeld[T any](t *testing.T, tab *Table[T]) {
	t.Helper()
	want := make([]uint32, len(tab.held))
	for k := range tab.pos {
		want[k>>tab.shift]++
	}
	if !slices.Equal(want, tab.held) {
		t.Fatalf("filter out of step with the tracked keys")
	}
}

// TestFilterFollowsKeys: through admissions, evictions and merges of
// hashed keys, a key is found exactly when it is tracked.
func TestFilterFollowsKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	z := rand.NewZipf(r, 1.1, 1, 50_000)
	tab := New[uint64](40, 9)
	for i := range 200_000 {
		k := z.Uint64()*0x9e3779b97f4a7c15 + 1
		if i%7 == 0 {
			tab.AddCount(k, &k, uint64(1+i%5))
		} else {
			tab.Add(k, &k)
		}
		_, tracked := tab.pos[k]
		if _, ok := tab.find(k); ok != tracked {
			t.Fatalf("key %#x: found %t, tracked %t", k, ok, tracked)
		}
	}
	checkHeld(t, tab)
	for _, e := range tab.heap {
		if _, ok := tab.find(e.Key); !ok {
			t.Fatalf("tracked key %#x not found", e.Key)
		}
	}
}

// BenchmarkAdd: 200 counters over Zipf (s = 1.2) flow sizes, where most
// packets are of tracked flows, and over a million flows of equal size,
// where most are not.
func BenchmarkAdd(b *testing.B) {
	for _, dist := range []string{"zipf", "uniform"} {
		b.Run(dist, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			z := rand.NewZipf(r, 1.2, 1, 1_000_000)
			keys := make([]uint64, 1<<16)
			for i := range keys {
				k := z.Uint64()
				if dist == "uniform" {
					k = r.Uint64N(1_000_000)
				}
				keys[i] = k*0x9e3779b97f4a7c15 + 1
			}
			tab := New[uint64](200, 1)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				k := keys[i&(len(keys)-1)]
				tab.Add(k, &k)
			}
		})
	}
}
