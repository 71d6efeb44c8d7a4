package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/proxy"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/proxyauth"
	"egret.io/egret/internal/proxystatus"
)

// Defaults for Pool fields left zero.
const (
	DefaultDialTimeout    = 10 * time.Second
	DefaultConnectTimeout = 15 * time.Second
)

// Events receives what happens to a pool's members (for metrics and logs).
// Nil fields are skipped. The functions run on the request's goroutine and
// must be quick.
type Events struct {
	// Attempt is called after each try through a member: code is the
	// member's answer (0 when there was none) and err the failure, if any.
	Attempt func(pool string, m *Member, code int, err error)
	// Down is called when a member is marked down, with its back-off.
	Down func(pool string, m *Member, backoff time.Duration, err error)
	// Up is called when a member that was failing succeeds again; how is
	// "request" or "probe".
	Up func(pool string, m *Member, how string)
	// Fallback is called when the previous credential was used because the
	// current one was refused with 407.
	Fallback func(pool string, m *Member)
	// Probed is called after each active probe of a member.
	Probed func(pool string, m *Member, err error)
}

// Pool is a named set of upstream proxies. It is safe for concurrent use;
// its exported fields must not change once it is in use (the member list
// changes only through SetMembers).
type Pool struct {
	Name string
	// Members is the initial member list; SetMembers replaces it.
	Members []*Member
	// Policy orders members for each attempt; zero means RoundRobin.
	Policy Policy
	// Backoff is how long a failing member stays down.
	Backoff Backoff
	// Credentials is given to members without credentials of their own
	// (nil: such members do not authenticate).
	Credentials *credentials.Store
	// CredentialsFor, when set, says which of those members get
	// Credentials (a sidecar's token goes only to its gateway).
	CredentialsFor func(*Member) bool
	// Dialer dials members; nil means a net.Dialer with DefaultDialTimeout.
	Dialer interface {
		DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	}
	// TLSConfig is used for https:// members; nil means the system roots.
	// ServerName defaults to the member's host.
	TLSConfig *tls.Config
	// ConnectTimeout bounds the whole handshake with one member (dial, TLS,
	// CONNECT answer); zero means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// Events, when set, is told about attempts and health changes.
	Events *Events
	// Now returns the time; nil means time.Now.
	Now func() time.Time
	// Health keeps the members' health by pool and member name, so that
	// it survives a rebuilt pool (a reloaded configuration) and a changed
	// member list; nil gives the pool a table of its own.
	Health *Health

	next atomic.Uint64
	snap atomic.Pointer[snapshot]
	mu   sync.Mutex // serialises SetMembers and the first snapshot
}

func (p *Pool) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pool) snapshot() *snapshot {
	if s := p.snap.Load(); s != nil {
		return s
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.snap.Load(); s != nil {
		return s
	}
	if p.Health == nil {
		p.Health = &Health{}
	}
	for _, m := range p.Members {
		m.UseStore(p.credentialsFor(m))
		m.h = p.Health.entry(p.Name, m.Name)
	}
	s := newSnapshot(append([]*Member(nil), p.Members...))
	p.snap.Store(s)
	return s
}

// Current returns the members in use now (primaries and backups).
func (p *Pool) Current() []*Member { return p.snapshot().all }

// SetMembers replaces the member list. A member whose URL, weight, backup
// flag and credentials are unchanged is kept as it is (with its connection
// count); every member finds its health in the pool's Health table by its
// URL. It returns the members that are no longer used.
func (p *Pool) SetMembers(ms []*Member) (removed []*Member) {
	old := p.snapshot()
	p.mu.Lock()
	defer p.mu.Unlock()
	byName := map[string]*Member{}
	for _, m := range old.all {
		byName[m.Name] = m
	}
	next := make([]*Member, 0, len(ms))
	kept := map[*Member]bool{}
	for _, m := range ms {
		m.UseStore(p.credentialsFor(m))
		if o := byName[m.Name]; o != nil && o.same(m) {
			m = o
		}
		m.h = p.Health.entry(p.Name, m.Name)
		kept[m] = true
		next = append(next, m)
	}
	for _, m := range old.all {
		if !kept[m] {
			removed = append(removed, m)
		}
	}
	p.snap.Store(newSnapshot(next))
	for _, m := range removed {
		m.Close()
	}
	return removed
}

// Candidates returns the healthy members in the order to try them for a
// destination host: primaries by the policy, then backups by the policy.
// It is empty when every member is down.
func (p *Pool) Candidates(host string) []*Member {
	return p.AppendCandidates(nil, host, p.now())
}

// AppendCandidates is Candidates appending to dst, to let callers avoid an
// allocation.
func (p *Pool) AppendCandidates(dst []*Member, host string, now time.Time) []*Member {
	s := p.snapshot()
	pol := p.Policy
	if pol == 0 {
		pol = RoundRobin
	}
	var ctr uint64
	if pol == RoundRobin || pol == LeastConn {
		ctr = p.next.Add(1) - 1
	}
	dst = s.groups[0].appendOrdered(dst, pol, host, ctr, now)
	return s.groups[1].appendOrdered(dst, pol, host, ctr, now)
}

// Unavailable returns the error for a pool with no healthy member.
func (p *Pool) Unavailable() *proxystatus.Error {
	s := p.snapshot()
	if len(s.all) == 0 {
		return &proxystatus.Error{Type: proxystatus.PoolUnavailable, Detail: fmt.Sprintf("pool %q has no members", p.Name)}
	}
	now := p.now()
	var soonest *Member
	for _, m := range s.all {
		if soonest == nil || m.h.downUntil.Load() < soonest.h.downUntil.Load() {
			soonest = m
		}
	}
	st := soonest.State(now)
	detail := fmt.Sprintf("all %d members of pool %q are down; %s is retried in %s", len(s.all), p.Name, soonest.Name, st.DownFor.Round(time.Millisecond))
	if st.LastError != "" {
		detail += " (last error: " + st.LastError + ")"
	}
	return &proxystatus.Error{Type: proxystatus.PoolUnavailable, Detail: detail}
}

// LastResort returns the member to try when every member is down: the one
// due back first, so a pool whose only member failed once (a restart, a
// password being rotated) answers with that member's real error and
// recovers on the first success instead of refusing everything for the
// back-off. It returns nil when that member's last failure was a timeout:
// trying again would only make the client wait, so the pool fails fast.
func (p *Pool) LastResort(now time.Time) *Member {
	var soonest *Member
	for _, m := range p.snapshot().all {
		if soonest == nil || m.h.downUntil.Load() < soonest.h.downUntil.Load() {
			soonest = m
		}
	}
	if soonest == nil {
		return nil
	}
	st := soonest.State(now)
	if strings.Contains(st.LastError, "timeout") {
		return nil
	}
	return soonest
}

// ResetHealth marks every member up: after a change that may have fixed
// them (new credentials), they get a fresh chance at once.
func (p *Pool) ResetHealth() {
	now := p.now()
	for _, m := range p.Current() {
		m.MarkUp(now)
	}
}

// Tunnel is an established CONNECT tunnel through a member.
type Tunnel struct {
	net.Conn
	Member *Member
	// Prefix holds bytes the member sent after its CONNECT answer that are
	// already read from Conn; they belong to the tunnel and must be relayed
	// first.
	Prefix []byte
}

// Credential is a member's user name and password, as Try receives it.
type Credential = credentials.Credential

// AuthHeader is the Proxy-Authorization value for c, "" for none.
func AuthHeader(c *Credential) string {
	if c == nil {
		return ""
	}
	return c.AuthHeader()
}

// Try is one attempt through member m with credential cred (nil: none),
// made by Do's caller. more reports whether another member would follow a
// failure. It returns the member's status code when it answered (0 when it
// did not) and the failure, nil on success; a refusal is a *Refusal, a
// member that took the request and went silent a *Silence.
type Try func(ctx context.Context, m *Member, cred *credentials.Credential, more bool) (code int, err error)

// Do runs one request or tunnel through the pool, to host: it tries the
// healthy members in policy order (when every member is down, the
// last-resort one) until try succeeds, and returns the member that served.
// It is the one failover every caller shares:
//   - a 407 to a member's current credential is tried once more with the
//     previous one while a rotation is pending (the fallback);
//   - a failure that is the member's marks it down (Fault);
//   - another member is tried while the failure allows it (Fault) and
//     again(err) says the request may be repeated (nil: always);
//   - a member that took the request and went silent (Silence) is blamed
//     only once another member answered in its place: until then it may be
//     the destination that is slow.
//
// It never falls back to a direct connection: with no member to try, it
// fails with PoolUnavailable (503).
func (p *Pool) Do(ctx context.Context, host string, again func(error) bool, try Try) (*Member, error) {
	now := p.now()
	var buf [8]*Member
	cands := p.AppendCandidates(buf[:0], host, now)
	if len(cands) == 0 {
		m := p.LastResort(now)
		if m == nil {
			return nil, p.Unavailable()
		}
		cands = append(cands, m)
	}
	var silent []*Member
	var last error
	for i, m := range cands {
		more := i < len(cands)-1
		cred, err := p.tryMember(ctx, m, more, again, try)
		if err == nil {
			p.succeeded(m, cred, "request")
			for _, s := range silent {
				p.blameSilence(s, m)
			}
			return m, nil
		}
		last = err
		var sil *Silence
		if errors.As(err, &sil) {
			silent = append(silent, m)
		}
		if !p.Failed(m, err) || !more || ctx.Err() != nil || (again != nil && !again(err)) {
			break
		}
	}
	return nil, last
}

// tryMember runs try through m with its current credential and, when that
// got a 407 during a rotation and the request may be repeated, once more
// with the previous one. It reports each attempt to Events and returns the
// credential to confirm on success (nil after a fallback, or none).
func (p *Pool) tryMember(ctx context.Context, m *Member, more bool, again func(error) bool, try Try) (*credentials.Credential, error) {
	cred := m.Credential()
	code, err := try(ctx, m, cred, more)
	if (code == http.StatusProxyAuthRequired || CredentialRefused(err)) && m.auth != nil && (again == nil || again(err)) {
		if fb := m.auth.Fallback(); fb != nil {
			p.attempt(m, code, err)
			code, err = try(ctx, m, fb, more)
			if err == nil {
				if ev := p.Events; ev != nil && ev.Fallback != nil {
					ev.Fallback(p.Name, m)
				}
				cred = nil // the current credential was refused: confirm nothing
			}
		}
	}
	p.attempt(m, code, err)
	return cred, err
}

// DialTunnel opens a tunnel to target ("host:port") through the pool (see
// Do for the failover).
func (p *Pool) DialTunnel(ctx context.Context, target string) (*Tunnel, error) {
	var t *Tunnel
	_, err := p.Do(ctx, hostOf(target), nil, func(ctx context.Context, m *Member, cred *credentials.Credential, _ bool) (int, error) {
		tt, code, err := p.OpenTunnel(ctx, m, target, cred)
		t = tt
		return code, err
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Silence is a member that took a request or a CONNECT and did not answer
// in time. Do blames it only when another member answers in its place.
type Silence struct {
	Err *proxystatus.Error // names the member
}

func (s *Silence) Error() string { return s.Err.Error() }
func (s *Silence) Unwrap() error { return s.Err }

// blameSilence marks down m, which went silent on a request that member
// answered.
func (p *Pool) blameSilence(m, answered *Member) {
	err := &proxystatus.Error{Type: proxystatus.ConnectionReadTimeout, Upstream: m.Name,
		Detail: "upstream " + m.Name + " took a request and did not answer in time; " + answered.Name + " answered it"}
	d := m.MarkDown(p.now(), p.Backoff, err.Error())
	if ev := p.Events; ev != nil && ev.Down != nil {
		ev.Down(p.Name, m, d, err)
	}
}

func (p *Pool) attempt(m *Member, code int, err error) {
	if ev := p.Events; ev != nil && ev.Attempt != nil {
		ev.Attempt(p.Name, m, code, err)
	}
}

// succeeded records that m worked with cred (nil: nothing to confirm);
// how is "request" or "probe".
func (p *Pool) succeeded(m *Member, cred *credentials.Credential, how string) {
	if cred != nil && m.auth != nil {
		m.auth.Confirm(cred)
	}
	if m.MarkUp(p.now()) {
		if ev := p.Events; ev != nil && ev.Up != nil {
			ev.Up(p.Name, m, how)
		}
	}
}

// Failed records a failed attempt through m: a failure caused by the member
// marks it down. It reports whether another member may be tried.
func (p *Pool) Failed(m *Member, err error) (retry bool) {
	member, retry := Fault(err)
	if member {
		pe := proxystatus.From(err)
		d := m.MarkDown(p.now(), p.Backoff, pe.Error())
		if ev := p.Events; ev != nil && ev.Down != nil {
			ev.Down(p.Name, m, d, err)
		}
	}
	return retry
}

// CredentialRefused reports whether err says a member's authentication
// refused egret's credential before any answer from the member: the KDC
// of a Negotiate member refused the password or keytab.
func CredentialRefused(err error) bool {
	var ae *proxyauth.Error
	return errors.As(err, &ae) && ae.CredentialRefused()
}

// Fault classifies a failed attempt through a member: whether the member
// is to blame (it is then marked down), and whether trying another member
// is worthwhile. Reaching the member failing, the member closing the
// connection, and answers 407, 403 and 5xx are the member's fault and move
// on; a 5xx in which the member says the destination failed (Squid's
// X-Squid-Error ERR_CONNECT_FAIL, an RFC 9209 Proxy-Status destination or
// DNS error) moves on without marking it down; a member that accepted the
// connection but is slow to answer is not blamed (Squid answers CONNECT only
// after reaching the destination) and not retried.
func Fault(err error) (member, retry bool) {
	var sil *Silence
	if errors.As(err, &sil) {
		return false, true // blamed by Do if another member answers
	}
	var r *Refusal
	if errors.As(err, &r) {
		switch {
		case r.Policy:
			return false, false // the member's policy refused the destination: so would another
		case r.Code == http.StatusProxyAuthRequired, r.Code == http.StatusForbidden:
			return true, true
		case r.Code >= 500:
			return !r.DestinationFault, true
		}
		return false, false
	}
	var pe *proxystatus.Error
	if !errors.As(err, &pe) || pe.Upstream == "" {
		return false, false
	}
	switch pe.Type {
	case proxystatus.UpstreamAuthRequired, proxystatus.UpstreamRefused,
		proxystatus.ConnectionRefused, proxystatus.ConnectionTimeout,
		proxystatus.ConnectionTerminated, proxystatus.DestinationIPUnroute,
		proxystatus.DNSError, proxystatus.DNSTimeout, proxystatus.DestinationNotFound,
		proxystatus.TLSProtocolError, proxystatus.TLSCertificateError, proxystatus.HTTPProtocolError,
		proxystatus.ProxyConfigurationErr: // the member's authentication setup (SPN, realm, keytab)
		return true, true
	}
	return false, false
}

func hostOf(target string) string {
	if i := strings.LastIndexByte(target, ':'); i >= 0 && !strings.HasSuffix(target, "]") {
		target = target[:i]
	}
	return strings.TrimSuffix(strings.TrimPrefix(target, "["), "]")
}

// Timeout is ConnectTimeout, or DefaultConnectTimeout when that is zero.
func (p *Pool) Timeout() time.Duration {
	if p.ConnectTimeout > 0 {
		return p.ConnectTimeout
	}
	return DefaultConnectTimeout
}

// OpenTunnel makes one attempt at a tunnel to target through m with cred
// (nil: none): no failover, no fallback, no health verdict (Do's work). It
// returns the member's status code (0 when it did not answer).
func (p *Pool) OpenTunnel(ctx context.Context, m *Member, target string, cred *credentials.Credential) (*Tunnel, int, error) {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout())
	defer cancel()
	if m.URL.Scheme == SchemeSOCKS5 {
		t, err := p.dialSOCKS(ctx, m, target, cred)
		return t, 0, err
	}
	// A per-connection scheme's first value comes before the dial: a
	// Kerberos ticket the KDC will not give makes the member unusable.
	var h *proxyauth.Handshake
	auth := ""
	if m.Auth.PerConnection() {
		h = m.Handshake(cred)
		var err error
		if auth, err = h.First(); err != nil {
			return nil, 0, AuthError(m.Name, err)
		}
	} else if cred != nil {
		auth = cred.AuthHeader()
	}
	c, err := p.DialMember(ctx, m)
	if err != nil {
		return nil, 0, err
	}
	prefix, err := connect(ctx, c, target, auth, h, m.Name)
	if err != nil {
		c.Close()
		code := 0
		var r *Refusal
		var pe *proxystatus.Error
		switch {
		case errors.As(err, &r):
			code = r.Code
		case errors.As(err, &pe) && pe.Type == proxystatus.ConnectionReadTimeout:
			err = &Silence{Err: pe} // it took the CONNECT and said nothing
		}
		return nil, code, err
	}
	return &Tunnel{Conn: c, Member: m, Prefix: prefix}, http.StatusOK, nil
}

// DialMember connects to an http or https member: TCP, then TLS for https
// (with TLSConfig). Failures name the member.
func (p *Pool) DialMember(ctx context.Context, m *Member) (net.Conn, error) {
	c, err := p.dial(ctx, m.URL.Host)
	if err != nil {
		return nil, memberErr(m, "connect to upstream", err)
	}
	if m.URL.Scheme != SchemeHTTPS {
		return c, nil
	}
	cfg := &tls.Config{}
	if p.TLSConfig != nil {
		cfg = p.TLSConfig.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = m.URL.Hostname()
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		var ce *tls.CertificateVerificationError
		t := proxystatus.TLSProtocolError
		if errors.As(err, &ce) {
			t = proxystatus.TLSCertificateError
		}
		return nil, &proxystatus.Error{Type: t, Upstream: m.Name, Detail: "TLS to upstream: " + err.Error(), Err: err}
	}
	return tc, nil
}

func (p *Pool) dial(ctx context.Context, addr string) (net.Conn, error) {
	if p.Dialer != nil {
		return p.Dialer.DialContext(ctx, "tcp", addr)
	}
	d := net.Dialer{Timeout: DefaultDialTimeout}
	return d.DialContext(ctx, "tcp", addr)
}

func (p *Pool) dialSOCKS(ctx context.Context, m *Member, target string, cred *credentials.Credential) (*Tunnel, error) {
	var auth *proxy.Auth
	if cred != nil && !cred.IsBearer() { // SOCKS5 has no place for a bearer token
		auth = &proxy.Auth{User: cred.User, Password: cred.Password}
	}
	var fwd proxy.Dialer = ctxDialer{p}
	d, err := proxy.SOCKS5("tcp", m.URL.Host, auth, fwd)
	if err != nil {
		return nil, memberErr(m, "socks5 upstream", err)
	}
	c, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, memberErr(m, "socks5 connect", err)
	}
	return &Tunnel{Conn: c, Member: m}, nil
}

type ctxDialer struct{ p *Pool }

func (c ctxDialer) Dial(network, addr string) (net.Conn, error) {
	return c.p.dial(context.Background(), addr)
}

func (c ctxDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return c.p.dial(ctx, addr)
}

func memberErr(m *Member, doing string, err error) error {
	pe := proxystatus.From(err)
	out := *pe
	out.Upstream = m.Name
	out.Detail = doing + " " + m.Name + ": " + errText(err)
	out.Err = err
	if out.Type == proxystatus.ProxyInternalError {
		out.Type = proxystatus.ConnectionTerminated
	}
	return &out
}

// errText strips Go's "dial tcp 1.2.3.4:5:" noise down to the cause.
func errText(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 1024) }}

// maxChallengeBody bounds the body of a 407 that carries a handshake's
// challenge: egret reads it to send the next CONNECT on the same
// connection.
const maxChallengeBody = 64 << 10

// connect performs an HTTP CONNECT handshake for target on c, which is
// already connected to an HTTP proxy named name, running the handshake h
// (nil: none) from its first Proxy-Authorization value auth (or ""). It
// returns bytes that arrived after the proxy's 200 answer; failures are
// *proxystatus.Error values naming the proxy, a refusal is a *Refusal.
// A 407 that h can answer is answered with the next CONNECT on the same
// connection, so the authentication stays with the tunnel.
func connect(ctx context.Context, c net.Conn, target, auth string, h *proxyauth.Handshake, name string) ([]byte, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
		defer c.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	br := readerPool.Get().(*bufio.Reader)
	br.Reset(c)
	defer func() { br.Reset(nil); readerPool.Put(br) }()
	for {
		var b strings.Builder
		b.Grow(96 + len(auth))
		b.WriteString("CONNECT ")
		b.WriteString(target)
		b.WriteString(" HTTP/1.1\r\nHost: ")
		b.WriteString(target)
		b.WriteString("\r\n")
		if auth != "" {
			b.WriteString("Proxy-Authorization: ")
			b.WriteString(auth)
			b.WriteString("\r\n")
		}
		b.WriteString("\r\n")
		if _, err := io.WriteString(c, b.String()); err != nil {
			return nil, &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Upstream: name, Detail: "send CONNECT to upstream: " + errText(err), Err: err}
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t := proxystatus.HTTPProtocolError
			if pe := proxystatus.From(err); pe.Type != proxystatus.ProxyInternalError {
				t = pe.Type
			}
			if t == proxystatus.ConnectionTimeout {
				t = proxystatus.ConnectionReadTimeout
			}
			detail := "read upstream's CONNECT answer: " + errText(err)
			if h != nil && errors.Is(err, io.EOF) && auth != "" && strings.HasPrefix(auth, "NTLM ") {
				t, detail = proxystatus.ConnectionTerminated, "upstream closed the connection during the NTLM handshake"
			}
			return nil, &proxystatus.Error{Type: t, Upstream: name, Detail: detail, Err: err}
		}
		if resp.StatusCode/100 == 2 {
			if n := br.Buffered(); n > 0 {
				prefix := make([]byte, n)
				br.Read(prefix)
				return prefix, nil
			}
			return nil, nil
		}
		if h == nil || resp.StatusCode != http.StatusProxyAuthRequired {
			resp.Body.Close()
			return nil, RefusalError(name, resp)
		}
		next, herr := h.Next(resp.Header.Values("Proxy-Authenticate"))
		if herr != nil {
			resp.Body.Close()
			return nil, AuthRefusal(name, herr)
		}
		// The next round goes on this connection: read the 407's body.
		if resp.Close {
			resp.Body.Close()
			return nil, &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Upstream: name,
				Detail: "upstream " + name + " closes the connection after its " + h.Scheme.String() + " challenge; the handshake needs it kept alive"}
		}
		if n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxChallengeBody+1)); err != nil || n > maxChallengeBody {
			return nil, &proxystatus.Error{Type: proxystatus.HTTPProtocolError, Upstream: name,
				Detail: "upstream " + name + ": the body of its 407 challenge is unreadable or larger than 64 KiB"}
		}
		auth = next
	}
}

// AuthError is the failure of a member's authentication before the member
// was asked (a Kerberos ticket the KDC would not give), naming the member.
func AuthError(name string, err error) error {
	var ae *proxyauth.Error
	if !errors.As(err, &ae) {
		return memberErr(&Member{Name: name}, "authenticate to upstream", err)
	}
	return &proxystatus.Error{Type: ae.Type(), Status: ae.Status(), Upstream: name, Detail: "upstream " + name + ": " + ae.Detail, Err: ae}
}

// AuthRefusal is a member's 407 that the handshake cannot answer: a
// *Refusal with the member's code and the handshake's account of it.
func AuthRefusal(name string, err error) error {
	var ae *proxyauth.Error
	detail := err.Error()
	t := proxystatus.UpstreamAuthRequired
	if errors.As(err, &ae) {
		t = ae.Type()
	}
	return &Refusal{Code: http.StatusProxyAuthRequired, Err: &proxystatus.Error{Type: t, Status: http.StatusBadGateway, Upstream: name,
		Detail: "upstream " + name + " answered 407: " + detail, Err: err}}
}

// Refusal is an upstream proxy's non-2xx answer. It wraps the
// *proxystatus.Error egret answers with.
type Refusal struct {
	Err  *proxystatus.Error
	Code int // the member's status code
	// DestinationFault is set when the member said the failure was the
	// destination's (it could not resolve or reach it).
	DestinationFault bool
	// Policy is set when the member refused the destination by its policy
	// (a 403 whose Proxy-Status says http_request_denied or
	// destination_ip_prohibited, as an egret gateway answers): the member
	// works, and another would refuse too.
	Policy bool
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// RefusalError turns a non-2xx answer of an upstream proxy into a *Refusal.
// A 407 becomes UpstreamAuthRequired answered as 502, so the client is never
// told its own credentials are wrong. Other statuses keep their code.
func RefusalError(name string, resp *http.Response) error {
	code := resp.StatusCode
	e := &proxystatus.Error{Type: proxystatus.UpstreamRefused, Upstream: name, Status: code}
	detail := fmt.Sprintf("upstream %s answered %d %s", name, code, http.StatusText(code))
	if ps := resp.Header.Get("Proxy-Status"); ps != "" {
		detail += " (" + ps + ")"
	} else if se := resp.Header.Get("X-Squid-Error"); se != "" {
		detail += " (" + se + ")"
	}
	switch {
	case code == http.StatusProxyAuthRequired:
		e.Type, e.Status = proxystatus.UpstreamAuthRequired, http.StatusBadGateway
		detail = fmt.Sprintf("upstream %s rejected egret's credentials (407)", name)
	case code < 400 || code > 599:
		e.Status = http.StatusBadGateway
	}
	e.Detail = detail
	return &Refusal{Err: e, Code: code, DestinationFault: code >= 500 && blamesDestination(resp.Header),
		Policy: code == http.StatusForbidden && policyRefusal(resp.Header)}
}

// policyRefusal reports whether the member's Proxy-Status error says it
// refused the destination by policy.
func policyRefusal(h http.Header) bool {
	switch memberError(h) {
	case proxystatus.HTTPRequestDenied, proxystatus.DestinationIPProhibit:
		return true
	}
	return false
}

// memberError is the error type of the member's own Proxy-Status element
// (the last one), or "".
func memberError(h http.Header) proxystatus.Type {
	ps := h.Values("Proxy-Status")
	if len(ps) == 0 {
		return ""
	}
	last := ps[len(ps)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	for _, param := range strings.Split(last, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(param), "="); ok && k == "error" {
			return proxystatus.Type(strings.Trim(v, `"`))
		}
	}
	return ""
}

// blamesDestination reports whether an upstream's error answer says the
// destination, not the upstream, failed.
func blamesDestination(h http.Header) bool {
	if se := h.Get("X-Squid-Error"); se != "" {
		code, _, _ := strings.Cut(se, " ")
		switch code {
		case "ERR_CONNECT_FAIL", "ERR_DNS_FAIL", "ERR_READ_TIMEOUT", "ERR_ZERO_SIZE_OBJECT", "ERR_CANNOT_FORWARD":
			return true
		}
	}
	if ps := proxystatus.Parse(h.Values("Proxy-Status")); len(ps) > 0 {
		// The last element is the proxy closest to us: the member.
		switch proxystatus.Type(ps[len(ps)-1].Params["error"]) {
		case proxystatus.DNSTimeout, proxystatus.DNSError, proxystatus.DestinationNotFound,
			proxystatus.DestinationUnavailable, proxystatus.DestinationIPUnroute,
			proxystatus.ConnectionRefused, proxystatus.ConnectionTimeout:
			return true
		}
	}
	return false
}

// credentialsFor is the store m may use: Credentials, unless
// CredentialsFor refuses it.
func (p *Pool) credentialsFor(m *Member) *credentials.Store {
	if p.CredentialsFor != nil && !p.CredentialsFor(m) {
		return nil
	}
	return p.Credentials
}
