package synopsis

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestExpGolomb writes values of every length under every order and reads
// them back, and checks ExpGolombBits against what the code took.
func TestExpGolomb(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type coded struct {
		v uint64
		k int
	}
	var vals []coded
	for k := range 64 {
		for _, v := range []uint64{0, 1, 2, 1<<k - 1, 1 << k, 1<<k + 1, math.MaxUint64, math.MaxUint64 - 1, math.MaxUint64 >> 1} {
			vals = append(vals, coded{v, k})
		}
		for L := range 65 {
			v := rng.Uint64() >> (64 - L) // L bits at most
			if L == 0 {
				v = 0
			}
			vals = append(vals, coded{v, k})
		}
	}
	var w BitWriter
	for _, c := range vals {
		before := 8*len(w.B) + w.nacc
		w.ExpGolomb(c.v, c.k)
		took := 8*len(w.B) + w.nacc - before
		if L := bits.Len64(c.v); L != 64 || c.k > 0 { // the estimate is off by at most 2 bits
			if est := ExpGolombBits(L, c.k); took < est || took > est+2 {
				t.Fatalf("ExpGolomb(%d, %d) took %d bits, ExpGolombBits says %d", c.v, c.k, took, est)
			}
		}
	}
	r := BitReader{B: w.Done()}
	for i, c := range vals {
		v, ok := r.ExpGolomb(c.k)
		if !ok || v != c.v {
			t.Fatalf("value %d: read %d, %v; wrote %d at order %d", i, v, ok, c.v, c.k)
		}
	}
	if !r.Done() {
		t.Fatal("bits left after the last value")
	}
}

// TestExpGolombRejects reads codes that do not fit 64 bits and truncated
// ones.
func TestExpGolombRejects(t *testing.T) {
	var w BitWriter
	w.Bits(math.MaxUint64, 64) // 64 ones: q+1 ≥ 2^64 at order 1 cannot fit
	w.Bits(0, 8)
	r := BitReader{B: w.Done()}
	if v, ok := r.ExpGolomb(1); ok {
		t.Fatalf("read %d from 64 ones at order 1", v)
	}
	w = BitWriter{}
	w.ExpGolomb(1<<40, 3)
	b := w.Done()
	r = BitReader{B: b[:len(b)-2]}
	if v, ok := r.ExpGolomb(3); ok {
		t.Fatalf("read %d from a truncated code", v)
	}
}

// TestBestExpGolomb picks the order near the values' length.
func TestBestExpGolomb(t *testing.T) {
	var h [65]int
	h[20] = 1000
	if k := BestExpGolomb(&h); k < 18 || k > 20 {
		t.Fatalf("values of 20 bits: order %d", k)
	}
	h = [65]int{}
	h[0] = 1000
	h[30] = 1
	if k := BestExpGolomb(&h); k != 0 {
		t.Fatalf("mostly zeros: order %d", k)
	}
}

// TestRiceIn reads Rice codes of every order from one Peek where they fit
// and checks them against BitReader.Rice, which reads them bit by bit.
func TestRiceIn(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	type coded struct {
		v uint64
		k int
	}
	var vals []coded
	for k := range 40 {
		for range 50 {
			vals = append(vals, coded{rng.Uint64N(1<<k*uint64(1+rng.IntN(60))) + uint64(rng.IntN(2)), k})
		}
	}
	var w BitWriter
	for _, c := range vals {
		w.Rice(c.v, c.k)
	}
	b := w.Done()
	slow, fast := BitReader{B: b}, BitReader{B: append(b, make([]byte, 8)...)} // room to Peek the last codes
	fits := 0
	for i, c := range vals {
		v, ok := slow.Rice(c.k, math.MaxUint64)
		if !ok || v != c.v {
			t.Fatalf("value %d: Rice read %d, %v; wrote %d at order %d", i, v, ok, c.v, c.k)
		}
		p, _ := fast.Peek()
		got, n, ok := RiceIn(p, c.k)
		if want := int(c.v>>c.k) + 1 + c.k; !ok {
			if want <= 57 {
				t.Fatalf("value %d (%d at order %d, %d bits): RiceIn says it does not fit", i, c.v, c.k, want)
			}
			fast.pos = slow.pos
			continue
		} else if got != c.v || n != want {
			t.Fatalf("value %d: RiceIn read %d in %d bits; wrote %d at order %d in %d", i, got, n, c.v, c.k, want)
		}
		fits++
		fast.Advance(n)
	}
	if fits < len(vals)/2 {
		t.Fatalf("only %d of %d codes read from one Peek", fits, len(vals))
	}
}
