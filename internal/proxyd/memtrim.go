package proxyd

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Memory trimming: a burst of connections (a deploy, a retry storm) leaves
// the heap with free pages the runtime returns to the OS only slowly. A
// sidecar runs in every pod, so egret gives them back promptly, in two
// cases:
//   - more than trimFree bytes of heap are free and not yet released
//     (checked every trimEvery);
//   - the number of goroutines fell by trimGoroutines or more since its
//     peak (checked every trimQuick): a burst of tunnels went idle and
//     parked (internal/relay), and the stacks of their goroutines sit in
//     the runtime's stack pools until a collection, so they do not show
//     as free heap yet;
//   - a burst ended: trimBurst bytes or more were allocated since the last
//     trim, and less than trimQuiet in the last trimQuick. Without this, the
//     garbage of the burst's set-ups (up to the GC's heap goal, twice the
//     live heap) stays resident until the runtime's two-minute forced
//     collection: with 5,000 tunnels opened and left idle, about 8 MiB.
//     Under steady load the process is never quiet, so this never fires.
//
// Checking is a cheap runtime/metrics read; trimming is a forced
// collection, so the quick check only fires on a real fall.
const (
	trimEvery      = time.Second
	trimQuick      = 100 * time.Millisecond
	trimFree       = 8 << 20
	trimGoroutines = 1024
	trimBurst      = 8 << 20
	trimQuiet      = 64 << 10
)

func trimMemory(ctx context.Context) {
	sample := []metrics.Sample{
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/gc/heap/allocs:bytes"},
	}
	tick := time.NewTicker(trimQuick)
	defer tick.Stop()
	var tr trimmer
	tr.lastFull = time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			metrics.Read(sample)
			if tr.due(now, uint64Of(sample[0]), uint64Of(sample[1]), uint64Of(sample[2])) {
				debug.FreeOSMemory()
				metrics.Read(sample[1:])
				tr.trimmed(uint64Of(sample[1]), uint64Of(sample[2]))
			}
		}
	}
}

// trimmer decides when to trim from the runtime's figures, read every
// trimQuick.
type trimmer struct {
	peak         uint64 // goroutines, highest since the last trim
	allocsAtTrim uint64 // bytes allocated (cumulative) at the last trim
	allocsBefore uint64 // bytes allocated at the previous reading
	lastFull     time.Time
}

// due takes one reading (free heap bytes, goroutines, cumulative bytes
// allocated) and reports whether to trim now.
func (tr *trimmer) due(now time.Time, free, goroutines, allocs uint64) bool {
	tr.peak = max(tr.peak, goroutines)
	quiet := allocs-tr.allocsBefore < trimQuiet
	tr.allocsBefore = allocs
	if tr.peak-goroutines >= trimGoroutines || allocs-tr.allocsAtTrim >= trimBurst && quiet {
		return true
	}
	if now.Sub(tr.lastFull) >= trimEvery {
		tr.lastFull = now
		return free > trimFree
	}
	return false
}

// trimmed records a trim, with the figures read right after it.
func (tr *trimmer) trimmed(goroutines, allocs uint64) {
	tr.peak = goroutines
	tr.allocsAtTrim, tr.allocsBefore = allocs, allocs
}

// uint64Of is s's value, or 0 when the runtime does not have the metric.
func uint64Of(s metrics.Sample) uint64 {
	if s.Value.Kind() == metrics.KindUint64 {
		return s.Value.Uint64()
	}
	return 0
}
