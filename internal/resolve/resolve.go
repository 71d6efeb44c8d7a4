package resolve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Defaults for Config fields left zero.
const (
	DefaultTTL         = 30 * time.Second
	DefaultMinTTL      = time.Second
	DefaultMaxTTL      = 5 * time.Minute
	DefaultNegativeTTL = 5 * time.Second
	DefaultStaleTTL    = 5 * time.Minute
	DefaultTimeout     = 5 * time.Second
	DefaultMaxEntries  = 10000
)

// Config configures a Cache. The zero value uses the system resolver with
// the defaults above.
type Config struct {
	// Hosts are static answers consulted before any lookup (like /etc/hosts).
	// Keys are lower-case names without a trailing dot.
	Hosts map[string][]netip.Addr
	// Servers, when set, are the DNS servers ("ip:port") to ask instead of
	// the system's; they are tried in order.
	Servers []string
	// TTL is how long an answer without a TTL of its own is used (answers
	// of a LookupFunc or the system resolver); answers from DNS servers keep
	// their TTL, bounded by MinTTL and MaxTTL. NegativeTTL is the longest a
	// failure is remembered (a "no such host" answer for the zone's SOA
	// negative TTL, if shorter; other failures at most a second). StaleTTL is
	// how long past its TTL an answer may still be served when a refresh
	// fails; negative disables it.
	TTL, MinTTL, MaxTTL, NegativeTTL, StaleTTL time.Duration
	// ResolvConf is the resolv.conf(5) giving the servers (unless Servers is
	// set), search domains and ndots; "" means /etc/resolv.conf.
	ResolvConf string
	// SystemHosts is the hosts(5) file consulted after Hosts when names are
	// looked up through resolv.conf's servers; "" means /etc/hosts, "-" none.
	SystemHosts string
	// Timeout bounds one lookup.
	Timeout time.Duration
	// MaxEntries bounds the cache; when full, expired entries are dropped,
	// then the cache is cleared.
	MaxEntries int
}

// LookupFunc resolves host to addresses; (*net.Resolver).LookupNetIP fits.
type LookupFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// ttlLookup resolves host and says how long the answer (or failure) may be
// cached; 0 means "use the configured default".
type ttlLookup func(ctx context.Context, host string) ([]netip.Addr, time.Duration, error)

type entry struct {
	addrs   []netip.Addr
	err     error
	expires time.Time // answer or failure valid until
	stale   time.Time // answer usable on refresh failure until
}

// Cache is a caching resolver.
type Cache struct {
	cfg    Config
	lookup ttlLookup
	sys    map[string][]netip.Addr // the system hosts file, with the DNS client
	now    func() time.Time

	mu      sync.Mutex
	entries map[string]*entry
	group   singleflight.Group
}

// New returns a Cache. lookup may be nil: then names are asked of the DNS
// servers (cfg.Servers, or those of resolv.conf) directly, so answers keep
// their TTLs, after the system hosts file; without a usable resolv.conf the
// system resolver is used with the fixed TTL.
func New(cfg Config, lookup LookupFunc) *Cache {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.MinTTL <= 0 {
		cfg.MinTTL = DefaultMinTTL
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.MaxTTL < cfg.MinTTL {
		cfg.MaxTTL = cfg.MinTTL
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = DefaultNegativeTTL
	}
	if cfg.StaleTTL < 0 {
		cfg.StaleTTL = 0
	} else if cfg.StaleTTL == 0 {
		cfg.StaleTTL = DefaultStaleTTL
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	c := &Cache{cfg: cfg, now: time.Now, entries: map[string]*entry{}}
	if lookup != nil {
		c.lookup = fixedTTL(lookup)
		return c
	}
	conf := cfg.ResolvConf
	if conf == "" {
		conf = "/etc/resolv.conf"
	}
	dc := systemClient(conf)
	if len(cfg.Servers) > 0 {
		if dc == nil {
			dc = resolvConf("")
		}
		dc.servers = cfg.Servers
	}
	if dc != nil {
		dc.timeout = min(dc.timeout, cfg.Timeout)
		c.lookup = dc.lookup
		if hf := cfg.SystemHosts; hf != "-" {
			if hf == "" {
				hf = "/etc/hosts"
			}
			if b, err := os.ReadFile(hf); err == nil {
				c.sys, _ = ParseHosts(string(b))
			}
		}
		return c
	}
	c.lookup = fixedTTL((&net.Resolver{}).LookupNetIP)
	return c
}

func fixedTTL(f LookupFunc) ttlLookup {
	return func(ctx context.Context, host string) ([]netip.Addr, time.Duration, error) {
		a, err := f(ctx, "ip", host)
		return a, 0, err
	}
}

// maybeAddr reports whether host may be an IP literal (an IPv6 one, or one
// that starts with a digit), so names skip netip.ParseAddr and the error it
// allocates.
func maybeAddr(host string) bool {
	return host != "" && (host[0] >= '0' && host[0] <= '9' || strings.IndexByte(host, ':') >= 0)
}

// LookupNetIP returns the addresses of host, from the static hosts, the
// cache, or a lookup. IP literals are returned as they are.
func (c *Cache) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if maybeAddr(host) {
		if a, err := netip.ParseAddr(host); err == nil {
			return []netip.Addr{a}, nil
		}
	}
	if addrs, ok := c.cfg.Hosts[host]; ok {
		return filter(addrs, network, host)
	}
	if addrs, ok := c.sys[host]; ok {
		return filter(addrs, network, host)
	}
	now := c.now()
	c.mu.Lock()
	e := c.entries[host]
	c.mu.Unlock()
	if e != nil && now.Before(e.expires) {
		if e.err != nil {
			return nil, e.err
		}
		return filter(e.addrs, network, host)
	}
	v, err, _ := c.group.Do(host, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
		defer cancel()
		addrs, ttl, err := c.lookup(lctx, host)
		now := c.now()
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			// Serve the previous answer while it is within its stale window.
			if old := c.entries[host]; old != nil && old.err == nil && now.Before(old.stale) {
				return old.addrs, nil
			}
			neg := c.cfg.NegativeTTL
			var de *net.DNSError
			switch {
			case errors.As(err, &de) && de.IsNotFound:
				if ttl > 0 {
					neg = min(neg, ttl)
				}
			default:
				neg = min(neg, time.Second) // a server problem: ask again soon
			}
			c.store(host, &entry{err: err, expires: now.Add(neg)})
			return nil, err
		}
		for i := range addrs {
			addrs[i] = addrs[i].Unmap()
		}
		if ttl <= 0 {
			ttl = c.cfg.TTL
		}
		ttl = min(max(ttl, c.cfg.MinTTL), c.cfg.MaxTTL)
		c.store(host, &entry{addrs: addrs, expires: now.Add(ttl), stale: now.Add(ttl + c.cfg.StaleTTL)})
		return addrs, nil
	})
	if err != nil {
		return nil, err
	}
	return filter(v.([]netip.Addr), network, host)
}

// store must be called with c.mu held.
func (c *Cache) store(host string, e *entry) {
	if len(c.entries) >= c.cfg.MaxEntries {
		now := c.now()
		for k, old := range c.entries {
			if now.After(old.stale) && now.After(old.expires) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.cfg.MaxEntries {
			clear(c.entries)
		}
	}
	c.entries[host] = e
}

// Len returns the number of cached names.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

func filter(addrs []netip.Addr, network, host string) ([]netip.Addr, error) {
	var want func(netip.Addr) bool
	switch network {
	case "ip4":
		want = netip.Addr.Is4
	case "ip6":
		want = func(a netip.Addr) bool { return a.Is6() }
	default:
		if len(addrs) == 0 {
			return nil, notFound(host)
		}
		return addrs, nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if want(a) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, notFound(host)
	}
	return out, nil
}

func notFound(host string) error {
	return &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// ParseHosts reads hosts(5) text: "ADDRESS NAME [NAME...]" per line, '#'
// comments. Names are lower-cased.
func ParseHosts(text string) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	for n, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: want an address and at least one name", n+1)
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		for _, name := range f[1:] {
			name = strings.ToLower(strings.TrimSuffix(name, "."))
			out[name] = append(out[name], a.Unmap())
		}
	}
	return out, nil
}

// ErrNoAddress is returned by dialers when a name has no usable address.
var ErrNoAddress = errors.New("no address")
