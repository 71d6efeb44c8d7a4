package upstream

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/proxyauth"
)

// MaxWeight bounds a member's weight.
const MaxWeight = 100

// Member is one upstream proxy. Its fixed fields are set before the member
// is shared; its health and connection count change at run time and are
// safe for concurrent use.
type Member struct {
	// URL is the proxy's address: scheme, host and port, never user info.
	URL *url.URL
	// Name is URL as a string, safe to log and to show to clients.
	Name string
	// Weight is the member's share of new connections relative to the other
	// members of its group (primaries or backups); at least 1.
	Weight int
	// Backup members are used only when no primary member is healthy.
	Backup bool
	// Auth is how egret authenticates to the member: Basic (the default,
	// a header on every request), NTLM or Negotiate, which authenticate a
	// connection (proxyauth.Scheme.PerConnection).
	Auth proxyauth.Scheme
	// SPN is the Kerberos service principal of a Negotiate member; ""
	// means HTTP/<the member's host> (ServicePrincipal).
	SPN string

	krbOnce sync.Once
	krb     *proxyauth.Kerberos // a Negotiate member's tickets

	auth    *credentials.Store // nil: no credentials
	ownAuth bool               // auth came from the URL's user info

	urls sync.Map // *credentials.Credential → *url.URL, for http.Transport

	h      *health      // shared with the pool's Health table once in a pool
	active atomic.Int64 // connections and requests in flight through the member
}

// Schemes a member may use.
const (
	SchemeHTTP   = "http"
	SchemeHTTPS  = "https"
	SchemeSOCKS5 = "socks5"
)

// MemberSpec is an upstream proxy as configured: a plain value, which
// NewMember turns into the live Member a pool uses. The configuration
// produces specs; the process builds members from them.
type MemberSpec struct {
	// URL is the proxy's address: scheme, host and port, never user info.
	URL *url.URL
	// Weight is at least 1; Backup members serve only when no primary can.
	Weight int
	Backup bool
	// User and Password are the member's own credentials (decoded), used
	// when OwnAuth is set; without them the pool's shared credentials
	// apply.
	User, Password string
	OwnAuth        bool
	// Auth is the scheme egret authenticates with (basic, ntlm,
	// negotiate); SPN a negotiate member's service principal ("":
	// HTTP/<host>).
	Auth proxyauth.Scheme
	SPN  string
}

// Name is the spec's URL as a string, safe to log and to show to clients.
func (s MemberSpec) Name() string { return s.URL.String() }

// NewMember makes the live member of s: its own fixed credentials (if
// any), a health of its own until a pool gives it its entry in the pool's
// Health table, no connections yet.
func NewMember(s MemberSpec) *Member {
	w := s.Weight
	if w < 1 {
		w = 1
	}
	u := *s.URL
	m := &Member{URL: &u, Name: u.String(), Weight: w, Backup: s.Backup, Auth: s.Auth, SPN: s.SPN, h: &health{}}
	if s.OwnAuth {
		m.auth, m.ownAuth = credentials.NewStore(credentials.New(s.User, s.Password)), true
	}
	return m
}

// ParseMemberURL reads an upstream proxy URL such as
// "http://user:p%40ss@proxy.corp:3128". A value without a scheme is taken as
// http://. The port defaults to 80 (http), 443 (https) or 1080 (socks5).
// Errors say what is wrong and name the member without its password (nor a
// lone user name, which may be a token), path or query; for a value that
// does not parse, without anything after a ':' that could be the first
// part of a password cut short.
func ParseMemberURL(raw string) (MemberSpec, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return MemberSpec{}, fmt.Errorf("empty upstream proxy URL")
	}
	if _, _, ok := splitScheme(raw); !ok {
		raw = "http://" + raw
	}
	if err := checkUserinfo(raw); err != nil {
		return MemberSpec{}, fmt.Errorf("upstream proxy %s: %w", display(raw, false), err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// Never err: url.Error quotes the URL and its parts.
		return MemberSpec{}, fmt.Errorf("upstream proxy %s: %s", display(raw, true), urlProblem(raw))
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case SchemeHTTP, SchemeHTTPS, SchemeSOCKS5:
	case "socks5h":
		scheme = SchemeSOCKS5 // egret always lets the socks5 proxy resolve names
	default:
		return MemberSpec{}, fmt.Errorf("upstream proxy %s: unsupported scheme %q (want http, https or socks5)", display(raw, false), u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return MemberSpec{}, fmt.Errorf("upstream proxy %s: no host", display(raw, false))
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		return MemberSpec{}, fmt.Errorf("upstream proxy %s: a proxy URL has no path, query or fragment (a '/', '?' or '#' in the password must be percent-encoded: %%2F, %%3F, %%23)", display(raw, false))
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{SchemeHTTP: "80", SchemeHTTPS: "443", SchemeSOCKS5: "1080"}[scheme]
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return MemberSpec{}, fmt.Errorf("upstream proxy %s: bad port %q", display(raw, false), port)
	}
	ms := MemberSpec{URL: &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}, Weight: 1}
	if u.User != nil {
		ms.User = u.User.Username()
		ms.Password, _ = u.User.Password()
		ms.OwnAuth = ms.User != "" || ms.Password != ""
	}
	return ms, nil
}

// ParseMemberSpec reads a member with optional attributes after the URL,
// separated by spaces: "weight=N" (1..100), "backup", "auth=basic|ntlm|
// negotiate" and, for negotiate, "spn=HTTP/host" (the proxy's Kerberos
// service principal). It is the syntax of UPSTREAM_PROXY items, member
// files and string members in the config file:
//
//	http://proxy-a:3128 weight=3
//	http://proxy-c:3128 backup
//	http://proxy.corp.example:8080 auth=negotiate spn=HTTP/proxy.corp.example
func ParseMemberSpec(spec string) (MemberSpec, error) {
	raw, attrs := splitSpec(spec)
	if raw == "" {
		return MemberSpec{}, fmt.Errorf("empty upstream proxy URL")
	}
	m, err := ParseMemberURL(raw)
	if err != nil {
		return MemberSpec{}, err
	}
	for i, a := range attrs {
		k, v, _ := strings.Cut(a, "=")
		k = strings.ToLower(k)
		if k != "spn" {
			v = strings.ToLower(v)
		}
		switch k {
		case "backup":
			if v != "" && v != "true" {
				return MemberSpec{}, fmt.Errorf("upstream proxy %s: %q: write backup on its own", m.Name(), a)
			}
			m.Backup = true
		case "weight":
			w, err := strconv.Atoi(v)
			if err != nil || w < 1 || w > MaxWeight {
				return MemberSpec{}, fmt.Errorf("upstream proxy %s: weight %q: want 1-%d", m.Name(), v, MaxWeight)
			}
			m.Weight = w
		case "auth":
			sc, err := proxyauth.ParseScheme(v)
			if err != nil {
				return MemberSpec{}, fmt.Errorf("upstream proxy %s: %w", m.Name(), err)
			}
			m.Auth = sc
		case "spn":
			m.SPN = v
		default:
			// Not quoted: a password cut short by a caller's splitting
			// would show here.
			return MemberSpec{}, fmt.Errorf("upstream proxy %s: unknown attribute %d after the URL (want weight=N, backup, auth=basic|ntlm|negotiate or spn=HTTP/host)", m.Name(), i+1)
		}
	}
	if err := m.CheckAuth(); err != nil {
		return MemberSpec{}, err
	}
	return m, nil
}

// CheckAuth checks that the spec's Auth and SPN fit together and with its
// scheme.
func (s MemberSpec) CheckAuth() error {
	if s.Auth.PerConnection() && s.URL.Scheme == SchemeSOCKS5 {
		return fmt.Errorf("upstream proxy %s: auth=%s needs an http:// or https:// member (SOCKS5 has its own authentication)", s.Name(), s.Auth)
	}
	if s.SPN != "" && s.Auth != proxyauth.Negotiate {
		return fmt.Errorf("upstream proxy %s: spn= is for auth=negotiate members", s.Name())
	}
	if s.SPN != "" && (strings.ContainsAny(s.SPN, " \t\r\n@") || !strings.Contains(s.SPN, "/")) {
		return fmt.Errorf("upstream proxy %s: spn %q: want service/host, like HTTP/proxy.corp.example (the realm comes from the credential)", s.Name(), s.SPN)
	}
	return nil
}

// ServicePrincipal is the Kerberos service principal of a Negotiate
// member: SPN, or HTTP/<the member's host>.
func (m *Member) ServicePrincipal() string { return servicePrincipal(m.SPN, m.URL) }

// ServicePrincipal is the Kerberos service principal a Negotiate member
// of s will use.
func (s MemberSpec) ServicePrincipal() string { return servicePrincipal(s.SPN, s.URL) }

func servicePrincipal(spn string, u *url.URL) string {
	if spn != "" {
		return spn
	}
	return "HTTP/" + u.Hostname()
}

// Handshake returns the authentication of one connection (Basic: one
// request) to the member with cred. For Negotiate members it also drops
// the Kerberos clients of credentials no longer in use.
func (m *Member) Handshake(cred *credentials.Credential) *proxyauth.Handshake {
	h := &proxyauth.Handshake{Scheme: m.Auth, Cred: cred}
	if m.Auth == proxyauth.Negotiate {
		m.krbOnce.Do(func() { m.krb = &proxyauth.Kerberos{} })
		h.Kerberos, h.SPN = m.krb, m.ServicePrincipal()
		if m.krb != nil && m.auth != nil {
			m.krb.Keep(cred, m.auth.Current(), m.auth.Fallback())
		}
	}
	return h
}

// Close releases what the member holds beyond its connections (the
// Kerberos clients of a Negotiate member) once it is no longer used.
func (m *Member) Close() {
	m.krbOnce.Do(func() {})
	if m.krb != nil {
		m.krb.Close()
	}
}

// ParseMemberList reads a list of members, one ParseMemberSpec per line,
// with blank lines and comments ignored: the format of a member file. A '#'
// starts a comment at the start of a line or after a space, so a '#' in a
// password does not cut the URL short; a comment after a member holds no
// '@' (else it might be the rest of a password with " #" in it). Errors
// name the line and never a password.
func ParseMemberList(text string) ([]MemberSpec, error) {
	var out []MemberSpec
	for n, line := range strings.Split(text, "\n") {
		line, comment := stripComment(line)
		if strings.TrimSpace(line) == "" {
			continue
		}
		if strings.Contains(comment, "@") {
			// "http://u:pa #ss@proxy:3128" or "http://proxy:3128 # ops@corp"?
			return nil, fmt.Errorf("line %d: a comment after a member holds '@': if the '#' is in a password, percent-encode ' ' and '#' (%%20, %%23); else put the comment on a line of its own", n+1)
		}
		m, err := ParseMemberSpec(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// UseStore makes a member without credentials of its own use s, the pool's
// shared (rotating) credentials. It is meant for building a member, before
// it is shared; a member with its own credentials keeps them.
func (m *Member) UseStore(s *credentials.Store) {
	if !m.ownAuth {
		m.auth = s
	}
}

// Credentials returns the member's credential store, or nil.
func (m *Member) Credentials() *credentials.Store { return m.auth }

// Credential returns the credential to try first, or nil.
func (m *Member) Credential() *credentials.Credential {
	if m.auth == nil {
		return nil
	}
	return m.auth.Current()
}

// ProxyURL returns the member's URL with its current credentials, for
// http.Transport. The caller must not modify it. Never log it.
func (m *Member) ProxyURL() *url.URL { return m.ProxyURLWith(m.Credential()) }

// ProxyURLWith returns the member's URL carrying c (nil: none). The URL is
// built once per credential. An https member is returned with the http
// scheme: egret dials it and does the TLS itself (transport.DialMember), so the
// transport must not add a second TLS layer.
func (m *Member) ProxyURLWith(c *credentials.Credential) *url.URL {
	if v, ok := m.urls.Load(c); ok {
		return v.(*url.URL)
	}
	u := *m.URL
	if u.Scheme == SchemeHTTPS {
		u.Scheme = SchemeHTTP
	}
	if c != nil {
		u.User = url.UserPassword(c.User, c.Password)
	}
	v, _ := m.urls.LoadOrStore(c, &u)
	// Forget URLs of credentials no longer in use (rotation is rare).
	m.urls.Range(func(k, _ any) bool {
		kc, _ := k.(*credentials.Credential)
		if kc != c && m.auth != nil && kc != m.auth.Current() && kc != m.auth.Fallback() {
			m.urls.Delete(k)
		}
		return true
	})
	return v.(*url.URL)
}

// AuthHeader returns the Proxy-Authorization value for the current
// credential, or "" when the member has none.
func (m *Member) AuthHeader() string {
	if c := m.Credential(); c != nil {
		return c.AuthHeader()
	}
	return ""
}

func (m *Member) String() string { return m.Name }

// Acquire counts a connection or request in flight through the member (for
// least-connections); call the returned function exactly once when it ends.
func (m *Member) Acquire() func() {
	m.active.Add(1)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			m.active.Add(-1)
		}
	}
}

// Active returns the number of connections and requests in flight.
func (m *Member) Active() int64 { return m.active.Load() }

// same reports whether two members are the same configuration (for keeping
// state across a change of the member list).
func (m *Member) same(o *Member) bool {
	if m.Name != o.Name || m.Weight != o.Weight || m.Backup != o.Backup || m.ownAuth != o.ownAuth ||
		m.Auth != o.Auth || m.SPN != o.SPN {
		return false
	}
	if m.ownAuth {
		return m.auth.Current().Same(o.auth.Current())
	}
	return m.auth == o.auth
}
