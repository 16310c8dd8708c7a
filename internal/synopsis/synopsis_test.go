package synopsis

import "testing"

// TestResize: storage that holds n and is at most half as large again is
// reused; storage too small or too large is replaced by storage of n.
func TestResize(t *testing.T) {
	for _, tc := range []struct {
		cap, n int
		reused bool
	}{{10, 10, true}, {15, 10, true}, {16, 10, false}, {9, 10, false}, {4, 0, false}, {1000, 100, false}} {
		s := make([]int, 0, tc.cap)
		got := Resize(s, tc.n)
		reused := cap(got) > 0 && &s[:1][0] == &got[:1][0]
		if len(got) != tc.n || reused != tc.reused || !reused && cap(got) != tc.n {
			t.Errorf("cap %d to %d: length %d, cap %d, reused %t; want reused %t", tc.cap, tc.n, len(got), cap(got), reused, tc.reused)
		}
	}
}
