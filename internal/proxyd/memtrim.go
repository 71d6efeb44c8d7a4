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
//     as free heap yet.
//
// Checking is a cheap runtime/metrics read; trimming is a forced
// collection, so the quick check only fires on a real fall.
const (
	trimEvery      = time.Second
	trimQuick      = 100 * time.Millisecond
	trimFree       = 8 << 20
	trimGoroutines = 1024
)

func trimMemory(ctx context.Context) {
	sample := []metrics.Sample{
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	tick := time.NewTicker(trimQuick)
	defer tick.Stop()
	var peak uint64
	lastFull := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			metrics.Read(sample)
			g := uint64Of(sample[1])
			peak = max(peak, g)
			trim := peak-g >= trimGoroutines
			if !trim && now.Sub(lastFull) >= trimEvery {
				lastFull = now
				trim = uint64Of(sample[0]) > trimFree
			}
			if trim {
				debug.FreeOSMemory()
				peak = g
			}
		}
	}
}

// uint64Of is s's value, or 0 when the runtime does not have the metric.
func uint64Of(s metrics.Sample) uint64 {
	if s.Value.Kind() == metrics.KindUint64 {
		return s.Value.Uint64()
	}
	return 0
}
