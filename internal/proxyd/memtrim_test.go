package proxyd

import (
	"testing"
	"time"
)

// TestTrimmer walks the trim decision through the cases it exists for: a
// burst of set-ups that ends (trim once, not again while idle), steady load
// (never), goroutines falling from a peak, and free heap left unreleased.
func TestTrimmer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tick := func(i int) time.Time { return t0.Add(time.Duration(i) * trimQuick) }
	var tr trimmer
	tr.lastFull = t0
	allocs := uint64(0)
	// A burst: 20 readings allocating 1 MiB each, then quiet.
	for i := 1; i <= 20; i++ {
		allocs += 1 << 20
		if tr.due(tick(i), 0, 50, allocs) {
			t.Fatalf("reading %d: trimmed while the burst runs", i)
		}
		tr.lastFull = tick(i) // keep the free-heap check out of this walk
	}
	if !tr.due(tick(21), 0, 50, allocs) {
		t.Fatal("the burst ended (20 MiB allocated, none in the last reading) without a trim")
	}
	tr.trimmed(50, allocs)
	for i := 22; i < 40; i++ {
		allocs += 1 << 10
		if tr.due(tick(i), 0, 50, allocs) {
			t.Fatalf("reading %d: trimmed again while idle", i)
		}
		tr.lastFull = tick(i)
	}
	// Steady load: never quiet, never trimmed by the burst rule.
	for i := 40; i < 100; i++ {
		allocs += 1 << 20
		if tr.due(tick(i), 0, 50, allocs) {
			t.Fatalf("reading %d: trimmed under steady load", i)
		}
		tr.lastFull = tick(i)
	}
	// Goroutines fall from a peak.
	tr = trimmer{lastFull: t0}
	tr.due(tick(1), 0, 3000, 0)
	if !tr.due(tick(2), 0, 3000-trimGoroutines, 0) {
		t.Error("no trim after goroutines fell by trimGoroutines")
	}
	// Free heap, checked every trimEvery.
	tr = trimmer{lastFull: t0}
	if tr.due(tick(1), trimFree+1, 10, 0) {
		t.Error("free heap checked before trimEvery passed")
	}
	if !tr.due(t0.Add(trimEvery), trimFree+1, 10, 0) {
		t.Error("no trim with more than trimFree free heap")
	}
}
