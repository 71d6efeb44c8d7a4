package limit

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// State is a breaker's state. The set is closed: it is a metric label.
type State uint8

// Breaker states.
const (
	Closed   State = iota // requests pass; failures are counted
	Open                  // requests fail at once until the open period ends
	HalfOpen              // one trial request passes; its result decides
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	default:
		return "unknown(" + strconv.Itoa(int(s)) + ")"
	}
}

// Defaults for BreakerConfig fields left zero.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerOpen     = 30 * time.Second
	DefaultBreakerMaxOpen  = 5 * time.Minute
	DefaultMaxEntries      = 10000
)

// BreakerConfig configures per-destination circuit breakers.
type BreakerConfig struct {
	// Failures is the number of consecutive failures that opens a breaker.
	Failures int
	// OpenFor is how long a breaker stays open before a trial request;
	// each failed trial doubles it, up to MaxOpenFor.
	OpenFor, MaxOpenFor time.Duration
	// MaxEntries bounds the number of destinations tracked.
	MaxEntries int
}

// Breakers holds a circuit breaker per destination. Only destinations that
// failed lately have an entry. It is safe for concurrent use.
type Breakers struct {
	cfg BreakerConfig
	// Now returns the time; nil means time.Now.
	Now func() time.Time
	// OnChange, when set, is called on every state change (outside locks).
	OnChange func(key string, from, to State)

	m sync.Map // key → *breaker
	n atomic.Int64
}

type breaker struct {
	mu        sync.Mutex
	state     State
	fails     int
	openUntil time.Time
	openFor   time.Duration
	trial     bool // a half-open trial is in flight
	lastErr   string
	since     time.Time
}

// NewBreakers returns breakers with cfg's zero fields set to the defaults.
func NewBreakers(cfg BreakerConfig) *Breakers {
	if cfg.Failures <= 0 {
		cfg.Failures = DefaultBreakerFailures
	}
	if cfg.OpenFor <= 0 {
		cfg.OpenFor = DefaultBreakerOpen
	}
	if cfg.MaxOpenFor < cfg.OpenFor {
		cfg.MaxOpenFor = max(DefaultBreakerMaxOpen, cfg.OpenFor)
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	return &Breakers{cfg: cfg}
}

func (b *Breakers) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// OpenError is returned by Allow while a destination's breaker is open.
type OpenError struct {
	Key        string
	RetryIn    time.Duration
	Failures   int
	LastFailed string
}

func (e *OpenError) Error() string {
	s := fmt.Sprintf("circuit breaker for %s is open after %d consecutive failures; next try in %s",
		e.Key, e.Failures, e.RetryIn.Round(time.Millisecond))
	if e.LastFailed != "" {
		s += " (last: " + e.LastFailed + ")"
	}
	return s
}

// Allow reports whether a request to key may go ahead. A request that was
// allowed must be followed by exactly one Report for key. While the breaker
// is open Allow returns an *OpenError; when the open period has ended one
// trial request is allowed and the others still fail until it reports.
func (b *Breakers) Allow(key string) error {
	v, ok := b.m.Load(key)
	if !ok {
		return nil
	}
	br := v.(*breaker)
	now := b.now()
	br.mu.Lock()
	var change bool
	switch br.state {
	case Closed:
		br.mu.Unlock()
		return nil
	case Open:
		if now.Before(br.openUntil) {
			err := &OpenError{Key: key, RetryIn: br.openUntil.Sub(now), Failures: br.fails, LastFailed: br.lastErr}
			br.mu.Unlock()
			return err
		}
		br.state, br.trial, br.since, change = HalfOpen, true, now, true
		br.mu.Unlock()
		if change && b.OnChange != nil {
			b.OnChange(key, Open, HalfOpen)
		}
		return nil
	default: // HalfOpen
		if br.trial {
			err := &OpenError{Key: key, RetryIn: 0, Failures: br.fails, LastFailed: br.lastErr}
			br.mu.Unlock()
			return err
		}
		br.trial = true
		br.mu.Unlock()
		return nil
	}
}

// Report records the outcome of a request that Allow let through. why
// describes a failure (for the status page); it must hold no secret.
func (b *Breakers) Report(key string, ok bool, why string) {
	v, found := b.m.Load(key)
	if ok && !found {
		return // the common case: a healthy destination with no entry
	}
	if !found {
		if b.n.Load() >= int64(b.cfg.MaxEntries) {
			b.prune()
			if b.n.Load() >= int64(b.cfg.MaxEntries) {
				return
			}
		}
		var loaded bool
		v, loaded = b.m.LoadOrStore(key, &breaker{since: b.now()})
		if !loaded {
			b.n.Add(1)
		}
	}
	br := v.(*breaker)
	now := b.now()
	br.mu.Lock()
	from := br.state
	if ok {
		br.state, br.fails, br.trial, br.openFor, br.lastErr = Closed, 0, false, 0, ""
		if from != Closed {
			br.since = now
		}
		br.mu.Unlock()
		if from != Closed && b.OnChange != nil {
			b.OnChange(key, from, Closed)
		}
		return
	}
	br.fails++
	br.lastErr = why
	switch {
	case from == HalfOpen:
		br.openFor = min(br.openFor*2, b.cfg.MaxOpenFor)
		br.state, br.trial, br.openUntil, br.since = Open, false, now.Add(br.openFor), now
	case from == Closed && br.fails >= b.cfg.Failures:
		br.openFor = b.cfg.OpenFor
		br.state, br.openUntil, br.since = Open, now.Add(br.openFor), now
	}
	to := br.state
	br.mu.Unlock()
	if to != from && b.OnChange != nil {
		b.OnChange(key, from, to)
	}
}

// prune drops closed breakers without failures... and, failing that, the
// closed ones with failures: an open breaker is never forgotten for room.
func (b *Breakers) prune() {
	b.m.Range(func(k, v any) bool {
		br := v.(*breaker)
		br.mu.Lock()
		drop := br.state == Closed
		br.mu.Unlock()
		if drop {
			b.m.Delete(k)
			b.n.Add(-1)
		}
		return true
	})
}

// BreakerStatus is one tracked destination.
type BreakerStatus struct {
	Key       string
	State     State
	Failures  int // consecutive
	RetryIn   time.Duration
	LastError string
	Since     time.Time
}

// Status returns the destinations whose breaker is not closed, or that have
// failures, and the number of breakers in each state.
func (b *Breakers) Status() (list []BreakerStatus, counts [3]int) {
	now := b.now()
	b.m.Range(func(k, v any) bool {
		br := v.(*breaker)
		br.mu.Lock()
		st := BreakerStatus{Key: k.(string), State: br.state, Failures: br.fails, LastError: br.lastErr, Since: br.since}
		if br.state == Open && now.Before(br.openUntil) {
			st.RetryIn = br.openUntil.Sub(now)
		}
		br.mu.Unlock()
		counts[st.State]++
		if st.State != Closed || st.Failures > 0 {
			list = append(list, st)
		}
		return true
	})
	return list, counts
}

// Cancel ends a request that Allow let through without a verdict on the
// destination (it failed for another reason): a half-open breaker lets the
// next request be the trial.
func (b *Breakers) Cancel(key string) {
	v, ok := b.m.Load(key)
	if !ok {
		return
	}
	br := v.(*breaker)
	br.mu.Lock()
	if br.state == HalfOpen {
		br.trial = false
	}
	br.mu.Unlock()
}

// Config returns the breakers' settings.
func (b *Breakers) Config() BreakerConfig { return b.cfg }
