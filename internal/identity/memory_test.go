//go:build !race

package identity

import (
	"runtime"
	"testing"
)

// TestMemoryPerPod measures what the index holds for 50,000 pods (the
// issue's size) and keeps it bounded: the heap grown by indexing them, per
// pod, with pods built and dropped one at a time as the reflector hands
// them over.
func TestMemoryPerPod(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 50,000 pods")
	}
	const n = 50000
	before := heap()
	ps := NewPods()
	for i := range n {
		ps.Add(syntheticPod(i))
	}
	after := heap()
	per := float64(after-before) / n
	t.Logf("%d pods in %d label sets: %.0f bytes per pod (heap %d → %d)", ps.Len(), ps.LabelSets(), per, before, after)
	if ps.Len() != n {
		t.Fatalf("indexed %d pods", ps.Len())
	}
	// The budget: well under a kilobyte a pod (a full Pod object is
	// several kilobytes).
	if per > 600 {
		t.Errorf("%.0f bytes per pod, budget 600", per)
	}
	runtime.KeepAlive(ps)
}

func heap() uint64 {
	var m runtime.MemStats
	for range 2 {
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
