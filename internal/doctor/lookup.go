package doctor

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"egret.io/egret/internal/resolve"
)

// lookupResult is how a name resolved, the way an application in the pod
// would resolve it (search list applied).
type lookupResult struct {
	addrs []netip.Addr
	name  string   // the absolute name that answered ("x.ns.svc.cluster.local.")
	tried []string // the absolute names asked, in order
	err   error    // nil on success; classified by failureOf
}

// fqdn is the answering name without its trailing dot.
func (r lookupResult) fqdn() string { return strings.TrimSuffix(r.name, ".") }

// lookups resolves each name once per run so every check sees the same
// answer.
type lookups struct {
	s  *state
	mu sync.Mutex
	m  map[string]*lookupEntry
}

type lookupEntry struct {
	once     sync.Once
	res      lookupResult
	finished atomic.Bool // res is set
}

func newLookups(s *state) *lookups { return &lookups{s: s, m: map[string]*lookupEntry{}} }

// lookup resolves host (a name or an IP literal). The first caller's
// context bounds the lookup; later callers wait for its answer.
func (l *lookups) lookup(ctx context.Context, host string) lookupResult {
	host = strings.ToLower(strings.Trim(host, "[]"))
	if a, err := netip.ParseAddr(host); err == nil {
		return lookupResult{addrs: []netip.Addr{a.Unmap()}, name: a.Unmap().String()}
	}
	l.mu.Lock()
	e, ok := l.m[host]
	if !ok {
		e = &lookupEntry{}
		l.m[host] = e
	}
	l.mu.Unlock()
	e.once.Do(func() {
		e.res = l.resolve(ctx, host)
		e.finished.Store(true)
	})
	return e.res
}

// resolve tries the search-list candidates like the C library does: the
// first answer wins; "no such name" moves on to the next candidate; any
// other error is remembered and, when nothing answers, reported instead of
// "no such name" (it says more: the DNS server is unreachable or failing).
func (l *lookups) resolve(ctx context.Context, host string) lookupResult {
	var res lookupResult
	var hard error
	for _, cand := range l.s.rc.Names(host) {
		res.tried = append(res.tried, cand)
		lctx, cancel := context.WithTimeout(ctx, l.s.opTimeout())
		addrs, err := l.s.d.Resolver.LookupNetIP(lctx, "ip", cand)
		cancel()
		if err == nil && len(addrs) > 0 {
			for i, a := range addrs {
				addrs[i] = a.Unmap()
			}
			res.addrs, res.name = sortAddrs(addrs), cand
			return res
		}
		if err == nil {
			err = &net.DNSError{Err: "no addresses", Name: cand, IsNotFound: true}
		}
		var de *net.DNSError
		if !(errors.As(err, &de) && de.IsNotFound) && hard == nil {
			hard = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if hard != nil {
		res.err = hard
	} else {
		res.err = &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return res
}

// sortAddrs puts IPv4 first (what most clients dial first in a pod) and
// keeps the resolver's order otherwise.
func sortAddrs(as []netip.Addr) []netip.Addr {
	out := slices.Clone(as)
	resolve.SortV4First(out)
	return out
}

// addrList prints addresses "a, b".
func addrList(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
