package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
		proxystatus.HTTPResponseHeaderSize, // the member's own answer header (a CONNECT's, a challenge's) past the bound
		proxystatus.ProxyConfigurationErr:  // the member's authentication setup (SPN, realm, keytab)
		return true, true
	}
	return false, false
}

// TargetHost is the host of a tunnel target "host:port" (brackets off an
// IPv6 address): what Do is given to order members by.
func TargetHost(target string) string {
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

// MemberError is a failure reaching the member named name while doing
// something (a dial, TLS, a SOCKS5 handshake): a *proxystatus.Error that
// names the member, with Go's "dial tcp 1.2.3.4:5:" noise stripped.
func MemberError(name, doing string, err error) error {
	pe := proxystatus.From(err)
	out := *pe
	out.Upstream = name
	out.Detail = doing + " " + name + ": " + errText(err)
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

// AuthError is the failure of a member's authentication before the member
// was asked (a Kerberos ticket the KDC would not give), naming the member.
func AuthError(name string, err error) error {
	var ae *proxyauth.Error
	if !errors.As(err, &ae) {
		return MemberError(name, "authenticate to upstream", err)
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
