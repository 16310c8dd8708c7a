package rap

import (
	"math"
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
		if j, ok := tab.find(e.Key); !ok || j != i {
			t.Fatal("index out of step with heap")
		}
		if l := 2*i + 1; l < len(tab.heap) && tab.heap[l].Count < e.Count {
			t.Fatal("heap order broken")
		}
	}
	if tab.Top(1)[0].Count < 8 {
		t.Error("heaviest flow lost")
	}
	checkIndex(t, tab)
}

// checkIndex fails unless the table's index holds exactly its tracked
// keys, each where its slot says, reachable from its home slot without
// an empty slot between.
func checkIndex[T any](t *testing.T, tab *Table[T]) {
	t.Helper()
	used := 0
	for s, h := range tab.index {
		if h == 0 {
			continue
		}
		used++
		if int(h) > len(tab.heap) || tab.slot[h-1] != int32(s) {
			t.Fatalf("index slot %d holds entry %d, whose slot is elsewhere", s, h-1)
		}
		for p := tab.heap[h-1].Key >> tab.shift; p != uint64(s); p = (p + 1) & tab.mask {
			if tab.index[p] == 0 {
				t.Fatalf("entry %d in slot %d is past an empty slot %d from its home", h-1, s, p)
			}
		}
	}
	if used != len(tab.heap) {
		t.Fatalf("%d index slots used for %d tracked keys", used, len(tab.heap))
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
		tracked := slices.ContainsFunc(tab.heap, func(e Entry[uint64]) bool { return e.Key == k })
		if _, ok := tab.find(k); ok != tracked {
			t.Fatalf("key %#x: found %t, tracked %t", k, ok, tracked)
		}
	}
	checkIndex(t, tab)
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

// TestIndexCollisions: keys crowded on a few home slots make long probe
// runs, and evictions from their middle; after every addition each
// tracked key is found where the heap has it, and no other.
func TestIndexCollisions(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	tab := New[uint64](16, 3)
	for i := range 20_000 {
		k := r.Uint64N(4)<<62 | r.Uint64N(1000) // four homes, a thousand keys
		if i%5 == 0 {
			tab.AddCount(k, &k, uint64(1+i%3))
		} else {
			tab.Add(k, &k)
		}
		checkIndex(t, tab)
		if j, ok := tab.find(k); ok && tab.heap[j].Key != k {
			t.Fatalf("key %#x found at %d, which holds %#x", k, j, tab.heap[j].Key)
		}
		for j, e := range tab.heap {
			if got, ok := tab.find(e.Key); !ok || got != j {
				t.Fatalf("after %d additions: tracked key %#x at %d found at %d (%t)", i, e.Key, j, got, ok)
			}
		}
	}
}

// TestAdmission holds the admission of an untracked flow to RAP's rule:
// into a full table whose smallest counter is c, with probability
// 1/(c+1).
func TestAdmission(t *testing.T) {
	const trials = 40_000
	for _, c := range []uint64{0, 1, 3, 9} {
		admitted := 0
		for i := range trials {
			tab := New[uint64](1, uint64(i))
			v := uint64(0)
			for range c + 1 { // the first Add takes the free counter at 1
				tab.Add(1, &v)
			}
			tab.Add(2, &v)
			if _, ok := tab.find(2); ok {
				admitted++
			}
		}
		want := 1 / float64(c+2)
		got := float64(admitted) / trials
		sd := math.Sqrt(want * (1 - want) / trials)
		t.Logf("smallest counter %d: admitted %.4f, want %.4f ± %.4f", c+1, got, want, sd)
		if math.Abs(got-want) > 4*sd {
			t.Errorf("smallest counter %d: admitted %.4f of new flows, want %.4f", c+1, got, want)
		}
	}
}
