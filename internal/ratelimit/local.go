package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"egret.io/egret/internal/limit"
)

// Limit kinds (limit.Error.Kind, a metric label).
const (
	KindRate        limit.Kind = "workload_rate"
	KindConcurrency limit.Kind = "workload_concurrency"
	KindService     limit.Kind = "ratelimit_service"
)

// Limit is a workload's limits.
type Limit struct {
	// Requests per Per; zero means no rate limit.
	Requests int
	Per      time.Duration // time.Second, time.Minute or time.Hour; zero means a second
	// MaxConcurrent bounds requests and tunnels in flight; zero means none.
	MaxConcurrent int
}

// None reports whether l limits nothing.
func (l Limit) None() bool { return l.Requests <= 0 && l.MaxConcurrent <= 0 }

func (l Limit) per() time.Duration {
	if l.Per <= 0 {
		return time.Second
	}
	return l.Per
}

// String is the rate as written in messages: "10/second".
func (l Limit) String() string {
	unit := "second"
	switch l.per() {
	case time.Minute:
		unit = "minute"
	case time.Hour:
		unit = "hour"
	}
	return strconv.Itoa(l.Requests) + "/" + unit
}

// DefaultMaxKeys bounds the workloads Local tracks.
const DefaultMaxKeys = 10000

// Local enforces limits in this process: a token bucket (Requests tokens,
// refilled over Per) and an in-flight counter per key. It is safe for
// concurrent use.
type Local struct {
	// MaxKeys bounds the keys tracked; zero means DefaultMaxKeys. Idle keys
	// (nothing in flight, a full bucket) are dropped first.
	MaxKeys int

	mu sync.Mutex
	m  map[string]*bucket
}

type bucket struct {
	lim   *rate.Limiter // nil: no rate limit
	limit Limit
	// inflight is kept across a change of the key's limits (releases of
	// slots taken before it still find it).
	inflight *atomic.Int64
}

// Acquire admits one request or tunnel of key under l, or returns a
// *limit.Error. release, when not nil, must be called once when it ends.
func (lo *Local) Acquire(_ context.Context, key string, l Limit) (release func(), err error) {
	if l.None() {
		return nil, nil
	}
	b := lo.bucket(key, l)
	if b.lim != nil && !b.lim.Allow() {
		return nil, &limit.Error{Kind: KindRate, Key: key, Limit: l.String()}
	}
	if l.MaxConcurrent > 0 {
		if b.inflight.Add(1) > int64(l.MaxConcurrent) {
			b.inflight.Add(-1)
			return nil, &limit.Error{Kind: KindConcurrency, Key: key, Limit: strconv.Itoa(l.MaxConcurrent) + " in flight"}
		}
		n := b.inflight
		var once atomic.Bool
		return func() {
			if once.CompareAndSwap(false, true) {
				n.Add(-1)
			}
		}, nil
	}
	return nil, nil
}

// InFlight returns key's requests and tunnels in flight.
func (lo *Local) InFlight(key string) int64 {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	if b := lo.m[key]; b != nil {
		return b.inflight.Load()
	}
	return 0
}

// Len returns the number of keys tracked.
func (lo *Local) Len() int {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	return len(lo.m)
}

func (lo *Local) bucket(key string, l Limit) *bucket {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	if lo.m == nil {
		lo.m = map[string]*bucket{}
	}
	b := lo.m[key]
	if b != nil && b.limit == l {
		return b
	}
	nb := &bucket{limit: l, inflight: new(atomic.Int64)}
	if l.Requests > 0 {
		nb.lim = rate.NewLimiter(rate.Limit(float64(l.Requests)/l.per().Seconds()), l.Requests)
	}
	if b != nil {
		nb.inflight = b.inflight // the policy changed its limits
	} else if max := lo.maxKeys(); len(lo.m) >= max {
		lo.pruneLocked(max)
	}
	lo.m[key] = nb
	return nb
}

func (lo *Local) maxKeys() int {
	if lo.MaxKeys > 0 {
		return lo.MaxKeys
	}
	return DefaultMaxKeys
}

// pruneLocked drops idle keys, then (still full) any keys without
// requests in flight.
func (lo *Local) pruneLocked(max int) {
	now := time.Now()
	for k, b := range lo.m {
		if b.inflight.Load() == 0 && (b.lim == nil || b.lim.TokensAt(now) >= float64(b.lim.Burst())) {
			delete(lo.m, k)
		}
	}
	for k, b := range lo.m {
		if len(lo.m) < max {
			return
		}
		if b.inflight.Load() == 0 {
			delete(lo.m, k)
		}
	}
}
