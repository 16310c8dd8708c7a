package main

import "testing"

// TestMinProcs: one P is raised to two; more, or any the environment
// sets, are kept.
func TestMinProcs(t *testing.T) {
	for _, c := range []struct {
		env         string
		procs, want int
	}{{"", 1, 2}, {"", 2, 2}, {"", 8, 8}, {"1", 1, 1}, {"4", 4, 4}} {
		if got := minProcs(c.env, c.procs); got != c.want {
			t.Errorf("minProcs(%q, %d) = %d, want %d", c.env, c.procs, got, c.want)
		}
	}
}
