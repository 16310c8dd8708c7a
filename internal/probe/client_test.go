package probe

import (
	"testing"
	"time"
)

// TestReconnectWait: the wait between sessions is jittered around the
// back-off, never past reconnect_max (jitter included), doubles after
// short sessions and starts again from minBackoff after one that was up
// longer than backoffResetAfter.
func TestReconnectWait(t *testing.T) {
	const maxWait = 2 * time.Second
	ms := time.Millisecond
	for _, tc := range []struct {
		backoff time.Duration
		rnd     float64
		want    time.Duration
	}{
		{400 * ms, 0, 300 * ms},
		{400 * ms, 0.5, 400 * ms},
		{400 * ms, 0.999, 499800 * time.Microsecond},
		{1800 * ms, 0.5, 1800 * ms},
		{1800 * ms, 0.999, maxWait}, // 2.2475 s before the cap
		{maxWait, 0.999, maxWait},   // 2.4975 s before the cap
	} {
		if got := nextWait(tc.backoff, maxWait, tc.rnd); got != tc.want {
			t.Errorf("nextWait(%v, %v, %v) = %v, want %v", tc.backoff, maxWait, tc.rnd, got, tc.want)
		}
	}

	// Short sessions: the back-off doubles up to the cap, each wait
	// within ±25% of it and never past the cap.
	b := reconnectBackoff{max: maxWait}
	backoff := minBackoff
	for i := range 8 {
		for _, rnd := range []float64{0, 0.999} {
			bb := b
			w := bb.next(time.Second, rnd)
			lo, hi := time.Duration(float64(backoff)*0.75), min(time.Duration(float64(backoff)*1.25), maxWait)
			if w < lo || w > hi {
				t.Errorf("attempt %d, rnd %v: wait %v outside [%v, %v]", i, rnd, w, lo, hi)
			}
		}
		b.next(time.Second, 0.5)
		backoff = min(2*backoff, maxWait)
	}
	if b.cur != maxWait {
		t.Fatalf("back-off after 8 short sessions: %v, want %v", b.cur, maxWait)
	}
	// A session that was up: the back-off starts again.
	if w := b.next(backoffResetAfter+time.Second, 0.5); w != minBackoff {
		t.Errorf("wait after a long session: %v, want %v", w, minBackoff)
	}
	if w := b.next(time.Second, 0.5); w != 2*minBackoff {
		t.Errorf("wait after a long session then a short one: %v, want %v", w, 2*minBackoff)
	}

	// Spread: waits of one back-off take many values, not one.
	seen := map[time.Duration]bool{}
	for i := range 100 {
		seen[nextWait(time.Second, maxWait, float64(i)/100)] = true
	}
	if len(seen) < 90 {
		t.Errorf("%d distinct waits over 100 draws: not jittered", len(seen))
	}
}
