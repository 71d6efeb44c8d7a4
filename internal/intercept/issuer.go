package intercept

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// Defaults of Issuer's zero fields.
const (
	// DefaultLeafLifetime is how long a leaf is valid. A leaf is replaced
	// once two thirds of it have passed, so a client never meets one that
	// is about to expire.
	DefaultLeafLifetime = 24 * time.Hour
	// DefaultCacheSize is how many leaves the cache keeps, least recently
	// used first out: a few MiB at most.
	DefaultCacheSize = 4096
	// leafBackdate covers clocks of clients that run a little behind.
	leafBackdate = 5 * time.Minute
)

// Issuer issues the leaf certificates egret presents to clients whose TLS
// it terminates: ECDSA P-256 keys, short-lived, one name each, signed by the
// current Authority. A leaf is cached by name until it is due for renewal or
// the Authority changes, so a repeat name costs no key generation and no
// signature; concurrent requests for one name share one signature. The cache
// is bounded. An Issuer is safe for concurrent use.
type Issuer struct {
	// Lifetime of a leaf; zero means DefaultLeafLifetime. A leaf never
	// outlives its CA.
	Lifetime time.Duration
	// CacheSize bounds the cache; zero means DefaultCacheSize.
	CacheSize int
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	auth   atomic.Pointer[generation]
	mu     sync.Mutex
	lru    list.List // of *leaf, most recently used first
	byName map[string]*list.Element
	group  singleflight.Group

	hits, signed atomic.Uint64
}

// generation numbers the Authorities an Issuer has had, so a leaf of an
// earlier one is never served from the cache.
type generation struct {
	a   *Authority
	gen uint64
}

type leaf struct {
	name  string
	cert  *tls.Certificate
	gen   uint64
	renew time.Time // after this, issue a new one
}

// SetAuthority makes a the CA new leaves are signed by. Cached leaves of the
// previous Authority are no longer served.
func (is *Issuer) SetAuthority(a *Authority) {
	for {
		old := is.auth.Load()
		next := &generation{a: a, gen: 1}
		if old != nil {
			next.gen = old.gen + 1
		}
		if is.auth.CompareAndSwap(old, next) {
			return
		}
	}
}

// Authority returns the current Authority, or nil.
func (is *Issuer) Authority() *Authority {
	if g := is.auth.Load(); g != nil {
		return g.a
	}
	return nil
}

// IssuerStats counts what the Issuer did.
type IssuerStats struct {
	// Hits are leaves served from the cache; Signed are leaves issued.
	Hits, Signed uint64
	// Cached is how many leaves the cache holds now.
	Cached int
}

// Stats returns the counts so far.
func (is *Issuer) Stats() IssuerStats {
	is.mu.Lock()
	n := is.lru.Len()
	is.mu.Unlock()
	return IssuerStats{Hits: is.hits.Load(), Signed: is.signed.Load(), Cached: n}
}

func (is *Issuer) now() time.Time {
	if is.Now != nil {
		return is.Now()
	}
	return time.Now()
}

// Certificate returns a leaf for n, from the cache when a valid one is there.
func (is *Issuer) Certificate(n Name) (*tls.Certificate, error) {
	g := is.auth.Load()
	if g == nil {
		return nil, errNoAuthority
	}
	key := n.String()
	now := is.now()
	if c := is.cached(key, g.gen, now); c != nil {
		is.hits.Add(1)
		return c, nil
	}
	v, err, _ := is.group.Do(strconv.FormatUint(g.gen, 10)+" "+key, func() (any, error) {
		if c := is.cached(key, g.gen, now); c != nil {
			return c, nil
		}
		l, err := is.issue(g, n, now)
		if err != nil {
			return nil, err
		}
		is.signed.Add(1)
		is.store(l)
		return l.cert, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*tls.Certificate), nil
}

func (is *Issuer) cached(key string, gen uint64, now time.Time) *tls.Certificate {
	is.mu.Lock()
	defer is.mu.Unlock()
	e, ok := is.byName[key]
	if !ok {
		return nil
	}
	l := e.Value.(*leaf)
	if l.gen != gen || !now.Before(l.renew) {
		is.lru.Remove(e)
		delete(is.byName, key)
		return nil
	}
	is.lru.MoveToFront(e)
	return l.cert
}

func (is *Issuer) store(l *leaf) {
	size := is.CacheSize
	if size <= 0 {
		size = DefaultCacheSize
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.byName == nil {
		is.byName = map[string]*list.Element{}
	}
	if e, ok := is.byName[l.name]; ok {
		is.lru.Remove(e)
	}
	is.byName[l.name] = is.lru.PushFront(l)
	for is.lru.Len() > size {
		old := is.lru.Back()
		is.lru.Remove(old)
		delete(is.byName, old.Value.(*leaf).name)
	}
}

// issue signs a new leaf for n.
func (is *Issuer) issue(g *generation, n Name, now time.Time) (*leaf, error) {
	a := g.a
	if err := permitted(a.Cert, n); err != nil {
		return nil, err
	}
	life := is.Lifetime
	if life <= 0 {
		life = DefaultLeafLifetime
	}
	notBefore, notAfter := now.Add(-leafBackdate), now.Add(life)
	if notBefore.Before(a.Cert.NotBefore) {
		notBefore = a.Cert.NotBefore
	}
	if notAfter.After(a.Cert.NotAfter) {
		notAfter = a.Cert.NotAfter
	}
	if !now.Before(notAfter) {
		return nil, fmt.Errorf("the interception CA expired at %s", a.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: n.String()},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if n.IP.IsValid() {
		tmpl.IPAddresses = []net.IP{net.IP(n.IP.AsSlice())}
	} else {
		tmpl.DNSNames = []string{n.DNS}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, &key.PublicKey, a.Key)
	if err != nil {
		return nil, fmt.Errorf("sign a leaf for %s: %w", n, err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	chain := make([][]byte, 0, 1+len(a.Chain))
	chain = append(chain, der)
	chain = append(chain, a.Chain...)
	// Renew once two thirds of the leaf's own span have passed.
	renew := now.Add(notAfter.Sub(now) * 2 / 3)
	return &leaf{
		name:  n.String(),
		cert:  &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: parsed},
		gen:   g.gen,
		renew: renew,
	}, nil
}

// permitted refuses a name the CA's name constraints exclude: clients would
// refuse the leaf, with an error far less clear than this one.
func permitted(ca *x509.Certificate, n Name) error {
	if n.IP.IsValid() {
		ip := net.IP(n.IP.AsSlice())
		for _, r := range ca.ExcludedIPRanges {
			if r.Contains(ip) {
				return fmt.Errorf("the interception CA's name constraints exclude %s", n)
			}
		}
		if len(ca.PermittedIPRanges) == 0 {
			return nil
		}
		for _, r := range ca.PermittedIPRanges {
			if r.Contains(ip) {
				return nil
			}
		}
		return fmt.Errorf("the interception CA's name constraints do not permit %s", n)
	}
	for _, d := range ca.ExcludedDNSDomains {
		if domainMatch(n.DNS, d) {
			return fmt.Errorf("the interception CA's name constraints exclude %s", n)
		}
	}
	if len(ca.PermittedDNSDomains) == 0 {
		return nil
	}
	for _, d := range ca.PermittedDNSDomains {
		if domainMatch(n.DNS, d) {
			return nil
		}
	}
	return fmt.Errorf("the interception CA's name constraints do not permit %s (permitted: %s)", n, strings.Join(ca.PermittedDNSDomains, ", "))
}

// domainMatch is RFC 5280's dNSName constraint: "example.com" covers itself
// and its subdomains, ".example.com" its subdomains only.
func domainMatch(name, constraint string) bool {
	c := strings.ToLower(constraint)
	if strings.HasPrefix(c, ".") {
		return strings.HasSuffix(name, c)
	}
	return name == c || strings.HasSuffix(name, "."+c)
}
