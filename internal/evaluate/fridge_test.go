package evaluate

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// fridgeTestConfig is the dissertation's setup at T = 10 and 100 ms, two
// seeds: about 5 s.
func fridgeTestConfig() FridgeConfig {
	c := DefaultFridgeConfig()
	c.MaxDelays = []time.Duration{10 * time.Millisecond, 100 * time.Millisecond}
	c.Seeds = 2
	return c
}

// fridgeBars are the largest p95 and p99 errors (octaves) a fridge method
// may show, by memory in entries. Measured: at most 0.19 at 2^8, 0.11 at
// 2^10, 0.06 at 2^12.
var fridgeBars = map[int]float64{1 << 8: 0.6, 1 << 10: 0.35, 1 << 12: 0.15}

// fridgeBarViolations lists where the single fridge or the pooled Set
// misses its bar, or is not at most a quarter of the simple array's error
// at the smaller memory sizes.
func fridgeBarViolations(rows []FridgeRow) []string {
	simple := make(map[string]FridgeRow)
	key := func(r FridgeRow) string { return fmt.Sprintf("T %v, %d entries", r.MaxDelay, r.Entries) }
	for _, r := range rows {
		if r.Method == MethodSimple {
			simple[key(r)] = r
		}
	}
	var out []string
	for _, r := range rows {
		if r.Method != MethodFridge && r.Method != MethodSetPooled {
			continue
		}
		s := simple[key(r)]
		worst := math.Max(r.P95, r.P99)
		if bar := fridgeBars[r.Entries]; !(worst <= bar) {
			out = append(out, fmt.Sprintf("%s, %s: p95 %.3f, p99 %.3f above the bar %.2f", key(r), r.Method, r.P95, r.P99, bar))
		}
		if r.Entries < 1<<12 && !(r.P95 <= s.P95/4 && r.P99 <= s.P99/4) {
			out = append(out, fmt.Sprintf("%s, %s: p95 %.3f, p99 %.3f not a quarter of the simple array's %.3f, %.3f",
				key(r), r.Method, r.P95, r.P99, s.P95, s.P99))
		}
	}
	return out
}

// TestFridgeLessBiasedThanSimple holds the fridge and the pooled Set to
// percentile errors a fraction of the simple array's at 2^8 and 2^10
// entries and small at 2^12, on the dissertation's synthetic traces; and
// checks that the same bars catch fridges whose corrections are forced
// to 1.
func TestFridgeLessBiasedThanSimple(t *testing.T) {
	c := fridgeTestConfig()
	rows, err := RunFridge(c)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteFridgeTable(&b, c, rows); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	for _, v := range fridgeBarViolations(rows) {
		t.Error(v)
	}

	c.NoCorrection = true
	c.MaxDelays = c.MaxDelays[1:]
	rows, err = RunFridge(c)
	if err != nil {
		t.Fatal(err)
	}
	v := fridgeBarViolations(rows)
	t.Logf("without corrections, %d violations:\n%s", len(v), strings.Join(v, "\n"))
	if len(v) == 0 {
		t.Error("the bars do not notice fridges without their corrections")
	}
}

func TestFridgeConfigValidate(t *testing.T) {
	if _, err := RunFridge(FridgeConfig{}); err == nil {
		t.Error("RunFridge of a zero config did not fail")
	}
	for _, tc := range []struct {
		name string
		edit func(*FridgeConfig)
		want string
	}{
		{"default", func(*FridgeConfig) {}, ""},
		{"rate", func(c *FridgeConfig) { c.RatePerSec = 0 }, "rate 0"},
		{"seeds", func(c *FridgeConfig) { c.Seeds = 0 }, "× 0 seeds"},
		{"answered", func(c *FridgeConfig) { c.Answered = 2 }, "answered share 2"},
		{"delays", func(c *FridgeConfig) { c.MaxDelays = []time.Duration{time.Nanosecond} }, "maximum delay 1ns"},
		{"lifetime", func(c *FridgeConfig) { c.FridgeLifetime = 0 }, "fridge lifetime 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultFridgeConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}
