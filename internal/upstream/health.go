package upstream

import (
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for Backoff fields left zero.
const (
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = 2 * time.Minute
)

// Backoff is how long a failed member stays down: Initial after the first
// consecutive failure, doubling with each further one, at most Max.
type Backoff struct {
	Initial, Max time.Duration
}

func (b Backoff) after(fails int32) time.Duration {
	ini, max := b.Initial, b.Max
	if ini <= 0 {
		ini = DefaultBackoffInitial
	}
	if max <= 0 {
		max = DefaultBackoffMax
	}
	if max < ini {
		max = ini
	}
	d := ini
	for i := int32(1); i < fails && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// Health keeps the health of members apart from the members themselves,
// by pool and member name: the pools built from a reloaded configuration,
// and a member list that changes, find the health of every member they
// keep (as Caddy keeps a Host apart from its Upstream). The zero value is
// ready; it is safe for concurrent use.
type Health struct {
	mu sync.Mutex
	m  map[healthKey]*health
}

type healthKey struct{ pool, member string }

// entry returns the health of member of pool, made on first use.
func (t *Health) entry(pool, member string) *health {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[healthKey]*health{}
	}
	k := healthKey{pool, member}
	h := t.m[k]
	if h == nil {
		h = &health{}
		t.m[k] = h
	}
	return h
}

// Retain forgets the health of members no pool in keep uses any more.
func (t *Health) Retain(keep []*Pool) {
	used := map[healthKey]bool{}
	for _, p := range keep {
		for _, m := range p.Current() {
			used[healthKey{p.Name, m.Name}] = true
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.m {
		if !used[k] {
			delete(t.m, k)
		}
	}
}

// health is a member's passive and probed state.
type health struct {
	downUntil atomic.Int64 // unix nanoseconds; the member is down before it
	fails     atomic.Int32 // consecutive failures

	mu         sync.Mutex
	lastErr    string    // why it went down, for the status page
	lastChange time.Time // when it last went down or up
	probedAt   time.Time
	probeOK    bool
}

// Healthy reports whether the member may be used at now: it is not in a
// back-off (it may still have failed last; see State).
func (m *Member) Healthy(now time.Time) bool { return now.UnixNano() >= m.h.downUntil.Load() }

// MarkDown records a failure caused by the member: it is left out of pools
// for a back-off that grows with each consecutive failure. It returns the
// back-off.
func (m *Member) MarkDown(now time.Time, b Backoff, why string) time.Duration {
	n := m.h.fails.Add(1)
	d := b.after(n)
	m.h.downUntil.Store(now.Add(d).UnixNano())
	m.h.mu.Lock()
	m.h.lastErr, m.h.lastChange = why, now
	m.h.mu.Unlock()
	return d
}

// MarkUp records a success: the member is healthy and its back-off resets.
// It reports whether the member was failing before. It costs one atomic
// load when the member was already healthy.
func (m *Member) MarkUp(now time.Time) bool {
	if m.h.fails.Load() == 0 && m.h.downUntil.Load() == 0 {
		return false
	}
	m.h.fails.Store(0)
	m.h.downUntil.Store(0)
	m.h.mu.Lock()
	m.h.lastChange = now
	m.h.mu.Unlock()
	return true
}

// MemberState is a snapshot of a member for status pages and metrics.
type MemberState struct {
	Name   string
	Backup bool
	Weight int
	// Healthy is set when the member's last attempt succeeded (or it has
	// not failed yet). A member that is not healthy is Down while its
	// back-off runs, and is tried again (Retrying) after it.
	Healthy   bool
	Down      bool
	Fails     int           // consecutive failures
	DownFor   time.Duration // remaining back-off when down
	LastError string        // why it last went down ("" if never)
	Since     time.Time     // last change of health
	Active    int64         // connections and requests in flight
	ProbedAt  time.Time     // last probe (zero when none)
	ProbeOK   bool
	Rotating  bool // a new credential is waiting for its first success
}

// State returns a snapshot of m's health.
func (m *Member) State(now time.Time) MemberState {
	st := MemberState{Name: m.Name, Backup: m.Backup, Weight: m.Weight, Down: !m.Healthy(now),
		Fails: int(m.h.fails.Load()), Active: m.active.Load()}
	st.Healthy = !st.Down && st.Fails == 0
	if st.Down {
		st.DownFor = time.Duration(m.h.downUntil.Load() - now.UnixNano())
	}
	m.h.mu.Lock()
	st.LastError, st.Since, st.ProbedAt, st.ProbeOK = m.h.lastErr, m.h.lastChange, m.h.probedAt, m.h.probeOK
	m.h.mu.Unlock()
	if m.auth != nil {
		st.Rotating = m.auth.Rotating()
	}
	return st
}
