package proxy

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Memory trimming: a burst of connections (a deploy, a retry storm) leaves
// the heap with free pages the runtime returns to the OS only slowly. A
// sidecar runs in every pod, so egret gives them back promptly: when more
// than trimFree bytes of heap are free and not yet released, it asks the
// runtime to return them. Checking is a cheap runtime/metrics read.
const (
	trimEvery = time.Second
	trimFree  = 8 << 20
)

func trimMemory(ctx context.Context) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	tick := time.NewTicker(trimEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 && sample[0].Value.Uint64() > trimFree {
				debug.FreeOSMemory()
			}
		}
	}
}
