package limit

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Limit bounds the traffic to one destination host.
type Limit struct {
	// Rate is new requests and tunnels per second; zero means no rate limit.
	Rate float64
	// Burst is how many may start at once above the rate; zero means
	// max(1, Rate).
	Burst int
	// MaxConcurrent bounds requests and tunnels in flight; zero means none.
	MaxConcurrent int
}

func (l Limit) none() bool { return l.Rate <= 0 && l.MaxConcurrent <= 0 }

// Rule applies a Limit to destinations by host name: exact Hosts, or
// Suffixes ("example.com" is itself and below, ".example.com" only below).
type Rule struct {
	Hosts    []string
	Suffixes []string
	Limit    Limit
}

func (r *Rule) matches(host string) bool {
	for _, h := range r.Hosts {
		if h == host {
			return true
		}
	}
	for _, s := range r.Suffixes {
		if strings.HasPrefix(s, ".") {
			if strings.HasSuffix(host, s) {
				return true
			}
		} else if host == s || strings.HasSuffix(host, "."+s) {
			return true
		}
	}
	return false
}

// Kind names the limit that refused a request. The set is closed: it is a
// metric label.
type Kind string

// Limit kinds.
const (
	KindRate              Kind = "destination_rate"
	KindDestConcurrency   Kind = "destination_concurrency"
	KindClientConcurrency Kind = "client_concurrency"
	KindClientConns       Kind = "client_connections"
	KindTunnels           Kind = "tunnels"
	KindBreaker           Kind = "breaker"
)

// Error is a refusal by a limit.
type Error struct {
	Kind    Kind
	Key     string // the destination host or client address
	Limit   string // the limit, for the message
	RetryIn time.Duration
}

func (e *Error) Error() string {
	switch e.Kind {
	case KindRate:
		return fmt.Sprintf("%s is limited to %s", e.Key, e.Limit)
	case KindDestConcurrency:
		return fmt.Sprintf("%s already has %s requests and tunnels in flight", e.Key, e.Limit)
	case KindClientConcurrency:
		return fmt.Sprintf("client %s already has %s requests and tunnels in flight", e.Key, e.Limit)
	case KindClientConns:
		return fmt.Sprintf("client %s already has %s connections open to this proxy", e.Key, e.Limit)
	case KindTunnels:
		return fmt.Sprintf("the proxy already relays %s tunnels", e.Limit)
	}
	return string(e.Kind) + " limit reached for " + e.Key
}

// Destinations enforces per-destination rate and concurrency limits. Each
// destination host has its own token bucket and counter. It is safe for
// concurrent use.
type Destinations struct {
	// Default applies to hosts no rule matches.
	Default Limit
	// Rules are tried in order; the first match wins.
	Rules []Rule
	// MaxEntries bounds the hosts tracked; zero means DefaultMaxEntries.
	MaxEntries int

	mu sync.Mutex
	m  map[string]*destEntry
}

type destEntry struct {
	lim      *rate.Limiter
	limit    Limit
	inflight atomic.Int64
}

// Enabled reports whether any limit is configured.
func (d *Destinations) Enabled() bool {
	if d == nil {
		return false
	}
	if !d.Default.none() {
		return true
	}
	for _, r := range d.Rules {
		if !r.Limit.none() {
			return true
		}
	}
	return false
}

func (d *Destinations) limitFor(host string) Limit {
	for i := range d.Rules {
		if d.Rules[i].matches(host) {
			return d.Rules[i].Limit
		}
	}
	return d.Default
}

// Acquire admits one request or tunnel to host, or returns an *Error. The
// returned release must be called once when it ends (it may be nil when
// nothing was counted).
func (d *Destinations) Acquire(host string) (release func(), err error) {
	d.mu.Lock()
	e := d.m[host]
	if e == nil {
		l := d.limitFor(host)
		if l.none() {
			d.mu.Unlock()
			return nil, nil
		}
		if d.m == nil {
			d.m = map[string]*destEntry{}
		}
		if len(d.m) >= d.maxEntries() {
			d.pruneLocked()
		}
		e = &destEntry{limit: l}
		if l.Rate > 0 {
			burst := l.Burst
			if burst <= 0 {
				burst = max(1, int(l.Rate))
			}
			e.lim = rate.NewLimiter(rate.Limit(l.Rate), burst)
		}
		d.m[host] = e
	}
	d.mu.Unlock()
	if e.lim != nil && !e.lim.Allow() {
		return nil, &Error{Kind: KindRate, Key: host, Limit: fmt.Sprintf("%g/s (burst %d)", e.limit.Rate, e.lim.Burst())}
	}
	if mc := e.limit.MaxConcurrent; mc > 0 {
		if e.inflight.Add(1) > int64(mc) {
			e.inflight.Add(-1)
			return nil, &Error{Kind: KindDestConcurrency, Key: host, Limit: fmt.Sprint(mc)}
		}
		var once atomic.Bool
		return func() {
			if once.CompareAndSwap(false, true) {
				e.inflight.Add(-1)
			}
		}, nil
	}
	return nil, nil
}

func (d *Destinations) maxEntries() int {
	if d.MaxEntries > 0 {
		return d.MaxEntries
	}
	return DefaultMaxEntries
}

// pruneLocked drops hosts with nothing in flight and a full bucket; if that
// is not enough, every host with nothing in flight.
func (d *Destinations) pruneLocked() {
	for pass := 0; pass < 2 && len(d.m) >= d.maxEntries(); pass++ {
		for k, e := range d.m {
			if e.inflight.Load() != 0 {
				continue
			}
			if pass == 0 && e.lim != nil && e.lim.Tokens() < float64(e.lim.Burst()) {
				continue
			}
			delete(d.m, k)
		}
	}
}

// Clients enforces a per-client limit (by client IP): of requests and
// tunnels in flight, or of connections open. It is safe for concurrent use.
type Clients struct {
	// MaxConcurrent bounds what one client holds at once.
	MaxConcurrent int
	// Kind names what is counted in refusals; zero means
	// KindClientConcurrency.
	Kind Kind

	mu sync.Mutex
	m  map[string]int
}

// Acquire admits one request or tunnel from client, or returns an *Error.
func (c *Clients) Acquire(client string) (release func(), err error) {
	if c == nil || c.MaxConcurrent <= 0 {
		return nil, nil
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	if c.m[client] >= c.MaxConcurrent {
		c.mu.Unlock()
		kind := c.Kind
		if kind == "" {
			kind = KindClientConcurrency
		}
		return nil, &Error{Kind: kind, Key: client, Limit: fmt.Sprint(c.MaxConcurrent)}
	}
	c.m[client]++
	c.mu.Unlock()
	var once atomic.Bool
	return func() {
		if !once.CompareAndSwap(false, true) {
			return
		}
		c.mu.Lock()
		if c.m[client] <= 1 {
			delete(c.m, client)
		} else {
			c.m[client]--
		}
		c.mu.Unlock()
	}, nil
}

// InFlight returns the client's count.
func (c *Clients) InFlight(client string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[client]
}

// Counter bounds a global count (open tunnels).
type Counter struct {
	Max int64
	n   atomic.Int64
}

// Acquire takes one slot or returns an *Error.
func (c *Counter) Acquire() (release func(), err error) {
	if c == nil || c.Max <= 0 {
		return nil, nil
	}
	if c.n.Add(1) > c.Max {
		c.n.Add(-1)
		return nil, &Error{Kind: KindTunnels, Key: "proxy", Limit: fmt.Sprint(c.Max)}
	}
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			c.n.Add(-1)
		}
	}, nil
}

// Load returns the count in use.
func (c *Counter) Load() int64 { return c.n.Load() }
