package transport

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"time"

	"egret.io/egret/internal/credentials"
	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/proxyauth"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/upstream"
)

// Request is a forwarded request on its way: the message (http1.Forward)
// and what the transport needs to send it — directly, or through the
// members of a pool — and, once sent, the connection its response is read
// from. The caller fills the fields above the line and calls RoundTrip; a
// Request is used by one request at a time and may be reset for the next.
type Request struct {
	http1.Forward

	// Ctx is the request's: its end (the client left) gives up a wait.
	Ctx context.Context
	// Scheme and Host are the origin's ("http" or "https", and the URL's
	// host[:port]); Dest is the destination "host:port" as logged, and
	// DestHost its host: what members are ordered by, and the name an
	// https origin's certificate must hold.
	Scheme, Host, Dest, DestHost string
	// Via is egret's Via element for the request (its protocol) and Via11
	// the one for a message egret writes itself in HTTP/1.1.
	Via, Via11 string
	// Idempotent is set when the request may be sent twice.
	Idempotent bool
	// Approved are the addresses a direct connection goes to, in order:
	// what admission settled (the judged answer, each address allowed by
	// the SSRF guard and the loop check). A new direct connection dials
	// these on Port within DialTimeout (DialAddrsWithin) and nothing else;
	// a pooled connection to another address is not reused for this
	// request. Empty: no direct connection may be made.
	Approved []netip.Addr
	Port     uint16
	// DialTimeout bounds a direct connect (none when not positive).
	DialTimeout time.Duration
	// Pin is the approved address ("ip:port") a member is asked for in
	// place of the name; "" for the name.
	Pin string
	// Identity is the client connection, for connections an NTLM or
	// Negotiate member authenticates (Key.Identity).
	Identity any

	// ------ set by RoundTrip
	// Conn is the connection the response is read from, Key its key.
	Conn *http1.Conn
	Key  Key
	// Connect is how long reaching the member that served took.
	Connect time.Duration
	// Member is the member the last attempt went through (nil: direct),
	// whether it served or failed.
	Member *upstream.Member
	// MemberDone gives back the serving member's request count (nil when
	// direct); the caller runs it when the request or its tunnel ends.
	MemberDone func()
	// Authenticated is set when Conn was authenticated for Identity: the
	// caller drops Key when its client leaves.
	Authenticated bool

	t      *Transport
	cred   *credentials.Credential
	hs     *proxyauth.Handshake // the handshake run on Conn, if it ran for this request
	lenBuf [32]byte
}

// Reset readies r for the next request of the same client.
func (r *Request) Reset() { *r = Request{} }

// RoundTrip sends the request directly (p nil) or through the members of
// p (Pool.Do: candidates, failover, credential fallback, health) and
// returns the final response, its header read and 1xx answers passed on.
// Another member, or the previous credential, is tried only while the body
// can still be sent again, so a request is never sent twice: failures
// before the request reached the origin (NotSent) move on for any method;
// others (timeouts, a member's 5xx) only for idempotent requests.
func (t *Transport) RoundTrip(r *Request, p *upstream.Pool) (*http.Response, error) {
	r.t = t
	if p == nil {
		resp, err := r.attempt(Key{Scheme: r.Scheme, Addr: r.Dest}, nil, "")
		if err != nil {
			return nil, originErr(err, nil)
		}
		return resp, nil
	}
	again := func(err error) bool { return !r.Started() && (r.Idempotent || IsNotSent(err)) }
	var resp *http.Response
	_, err := p.Do(r.Ctx, r.DestHost, again, func(_ context.Context, m *upstream.Member, cred *credentials.Credential, more bool) (int, error) {
		r.Member = m
		start := time.Now()
		rs, code, err := r.tryMember(p, m, cred, more && r.Idempotent)
		if err == nil {
			r.Connect, resp = time.Since(start), rs
		}
		return code, err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// tryMember sends the request through m with cred, once (Pool.Do owns
// the failover and the credential fallback). Through an http(s) member a
// plain-HTTP request goes in absolute form with cred in
// Proxy-Authorization; an https:// request, a request whose destination
// is pinned to an approved address, and any request through a socks5
// member, goes through a tunnel to the origin opened with cred. It
// returns the member's status code (0 when it did not answer). A 407 is an
// error; so is a refusal the member wrote itself (403 or 5xx with Squid's
// X-Squid-Error) when failover may follow (mayRetry), which otherwise goes
// to the client as it is. A member that took the request and sent no
// response header in time is an *upstream.Silence.
func (r *Request) tryMember(p *upstream.Pool, m *upstream.Member, cred *credentials.Credential, mayRetry bool) (*http.Response, int, error) {
	release := m.Acquire()
	var resp *http.Response
	var err error
	// A connection an NTLM or Negotiate member authenticated serves only
	// the client it was made for.
	var id any
	if m.Auth.PerConnection() {
		id = r.Identity
	}
	r.cred, r.hs = cred, nil
	// A pinned destination is reached through a tunnel to the approved
	// address, with the request in origin form inside: in absolute form
	// the member would resolve the name itself (and an address in the
	// request target would replace the Host the origin must see).
	if r.Scheme == "https" || m.URL.Scheme == upstream.SchemeSOCKS5 || r.Pin != "" {
		addr := r.Dest
		if r.Pin != "" {
			addr = r.Pin
		}
		k := Key{Member: m, Scheme: r.Scheme, Addr: addr, Identity: id}
		if r.Pin != "" && r.Scheme == "https" {
			k.Host = r.DestHost // verified for this name only
		}
		resp, err = r.attempt(k, p, "")
	} else {
		auth := ""
		if id == nil {
			auth = upstream.AuthHeader(cred)
		}
		resp, err = r.attempt(Key{Member: m, Identity: id}, p, auth)
		if err == nil && resp.StatusCode == http.StatusProxyAuthRequired {
			if r.hs != nil {
				_, herr := r.hs.Next(resp.Header.Values("Proxy-Authenticate"))
				err = upstream.AuthRefusal(m.Name, herr)
			} else {
				err = upstream.RefusalError(m.Name, resp)
			}
			resp = nil
			r.Drop()
		}
	}
	if err != nil {
		release()
		err = originErr(err, m)
		if pe := proxystatus.From(err); pe.Type == proxystatus.ConnectionReadTimeout && !r.GotByte() && refusalCode(err) == 0 {
			out := *pe
			out.Upstream = m.Name
			err = &upstream.Silence{Err: &out}
		}
		err = Attempt(err)
		return nil, refusalCode(err), err
	}
	if mayRetry && !r.Started() && memberWrote(resp) {
		rerr := Attempt(upstream.RefusalError(m.Name, resp))
		r.Drop()
		release()
		return nil, resp.StatusCode, rerr
	}
	r.MemberDone = release
	return resp, resp.StatusCode, nil
}

// attempt sends the request on an idle connection for key, or a new one.
// An idle connection that fails before any answer (the other side closed
// it while it idled) is replaced by a new one when that is safe: the
// request did not reach the origin (writing it failed), or it is
// idempotent, and its body can still be sent.
func (r *Request) attempt(key Key, p *upstream.Pool, auth string) (*http.Response, error) {
	t := r.t
	pool := t.idle
	head := http1.RequestHead{Scheme: r.Scheme, Host: r.Host, Absolute: key.Member != nil && key.Scheme == "", Via: r.Via, Auth: auth}
	for try := 0; ; try++ {
		var oc *http1.Conn
		if try == 0 {
			oc = pool.Get(key, !r.Idempotent)
			if oc != nil && key.Member == nil && !approves(r.Approved, oc) {
				// Dialled for another request, to an address this one's
				// decision does not approve: it stays for those it fits.
				pool.Put(key, oc)
				oc = nil
			}
		}
		if oc == nil {
			var err error
			if oc, err = r.dial(key, p, pool.Gen()); err != nil {
				return nil, err
			}
		}
		r.Conn, r.Key = oc, key
		if key.Identity != nil && key.Scheme == "" {
			// A new connection to an NTLM or Negotiate member is
			// authenticated first; a pooled one already is.
			head.Auth, r.hs = "", nil
			if !oc.Reused {
				auth, err := r.authenticate(oc, key.Member, p)
				if err != nil {
					r.Drop()
					return nil, err
				}
				head.Auth = auth
			}
		}
		resp, err := r.Send(r.Ctx, oc, &head)
		if err == nil && resp.StatusCode == http.StatusProxyAuthRequired && key.Identity != nil && oc.Reused &&
			try == 0 && !r.Started() && !r.Skipped() {
			// The member forgot the connection's authentication (it
			// idled too long, say): authenticate a new one. Nothing was
			// sent on.
			r.Drop()
			continue
		}
		if err == nil {
			r.Authenticated = key.Identity != nil
			return resp, nil
		}
		r.Drop()
		var ce *http1.ClientError
		if errors.As(err, &ce) {
			return nil, ClientGoneError(ce.Err)
		}
		// A reused connection the other side had closed fails at once; a
		// timeout is no such thing, and is not waited out twice.
		var we *http1.WriteError
		if oc.Reused && !r.GotByte() && !r.Started() && try == 0 && (r.Idempotent || errors.As(err, &we)) && !errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if errors.As(err, &we) {
			err = we.Err
		}
		return nil, err
	}
}

// approves reports whether the direct origin connection oc goes to one of
// addrs, the addresses admission settled.
func approves(addrs []netip.Addr, oc *http1.Conn) bool {
	ta, ok := oc.Raw.RemoteAddr().(*net.TCPAddr)
	return ok && slices.Contains(addrs, ta.AddrPort().Addr().Unmap())
}

// authenticate runs the handshake of m's scheme on oc, a new connection
// to m for requests in absolute form, and returns the Proxy-Authorization
// value of the request itself. For Negotiate that is the first and only
// round. NTLM's first round (the negotiate message, answered by the
// challenge) goes in a HEAD request for the same URL without a body or any
// of the client's fields, so the request itself is sent once, with the
// last message: a member that answers the HEAD without asking for
// authentication has sent on nothing but a HEAD.
func (r *Request) authenticate(oc *http1.Conn, m *upstream.Member, p *upstream.Pool) (string, error) {
	h := m.Handshake(r.cred)
	first, err := h.First()
	if err != nil {
		return "", upstream.AuthError(m.Name, err)
	}
	r.hs = h
	if m.Auth != proxyauth.NTLM {
		return first, nil
	}
	stand := &http.Request{Method: http.MethodHead, URL: r.Req.URL, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	head := http1.RequestHead{Scheme: r.Scheme, Host: r.Host, Absolute: true, Via: r.Via11}
	cv := &conversation{oc: oc, name: m.Name, h: h, req: stand, write: func(w *bufio.Writer, auth string) {
		head.Auth = auth
		http1.WriteRequestHead(w, stand, &head, r.lenBuf[:0])
	}}
	ctx, cancel := context.WithTimeout(r.Ctx, p.Timeout())
	defer cancel()
	cv.start(ctx)
	defer cv.end()
	resp, err := cv.round(first)
	if err != nil {
		var we *http1.WriteError
		if errors.As(err, &we) {
			return "", &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Upstream: m.Name, Detail: "send the NTLM negotiate message to upstream " + m.Name + ": " + we.Err.Error(), Err: we.Err}
		}
		if r.Ctx.Err() != nil {
			return "", ClientGoneError(http1.ErrClientLeft)
		}
		var pe *proxystatus.Error
		if errors.As(err, &pe) && pe.Upstream != "" {
			return "", err
		}
		t := proxystatus.ConnectionTerminated
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t = proxystatus.ConnectionReadTimeout
		}
		return "", &proxystatus.Error{Type: t, Upstream: m.Name, Detail: "upstream " + m.Name + " did not answer the NTLM negotiate message: " + err.Error(), Err: err}
	}
	if resp.StatusCode != http.StatusProxyAuthRequired {
		resp.Body.Close() // a HEAD's answer has none
		if resp.Close {
			return "", &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Upstream: m.Name,
				Detail: "upstream " + m.Name + " answered the NTLM negotiate message with " + strconv.Itoa(resp.StatusCode) + " and closed the connection"}
		}
		r.hs = nil
		return "", nil // it does not ask for authentication
	}
	return cv.challenge(resp)
}

// dial connects for key: to the origin directly, to an http(s) member, or
// to the origin through a member's tunnel; TLS to an https origin.
func (r *Request) dial(key Key, p *upstream.Pool, gen uint64) (*http1.Conn, error) {
	t := r.t
	switch {
	case key.Member == nil:
		c, err := t.DialAddrsWithin(r.Ctx, r.DialTimeout, r.Dest, r.Approved, r.Port)
		if err != nil {
			return nil, err
		}
		return r.originTLS(c, c, gen)
	case key.Scheme == "":
		ctx, cancel := context.WithTimeout(r.Ctx, p.Timeout())
		defer cancel()
		c, err := t.DialMember(ctx, p, key.Member)
		if err != nil {
			return nil, err
		}
		return http1.NewConn(c, RawConn(c), gen), nil
	}
	tun, _, err := t.OpenTunnel(r.Ctx, p, key.Member, key.Addr, r.cred)
	if err != nil {
		return nil, err
	}
	return r.originTLS(WithPrefix(tun.Conn, tun.Prefix), RawConn(tun.Conn), gen)
}

// originTLS makes c an origin connection, with TLS for an https origin.
func (r *Request) originTLS(c, raw net.Conn, gen uint64) (*http1.Conn, error) {
	if r.Scheme != "https" {
		return http1.NewConn(c, raw, gen), nil
	}
	tc, err := r.t.OriginTLSConn(r.Ctx, c, r.DestHost, r.Dest)
	if err != nil {
		return nil, err
	}
	return http1.NewConn(tc, raw, gen), nil
}

// Drop closes the request's connection: it cannot carry another request.
func (r *Request) Drop() {
	if r.Conn != nil {
		r.Conn.Close()
		r.Conn = nil
	}
}

// Release keeps the request's connection for the next request after a
// clean exchange (the whole request sent, the whole response read, nothing
// more waiting, no close asked for) and closes it otherwise.
func (r *Request) Release(resp *http.Response) {
	oc := r.Conn
	if oc == nil {
		return
	}
	if resp.Close || r.Skipped() || !r.BodyDone() || oc.R.Buffered() > 0 {
		r.Drop()
		return
	}
	r.Conn = nil
	r.t.idle.Put(r.Key, oc)
}

// Hijack takes the request's connection out of the transport for a
// tunnel (a switch of protocols): the connection and the bytes already
// read from it.
func (r *Request) Hijack() (net.Conn, []byte) {
	oc := r.Conn
	r.Conn = nil
	prefix := http1.Buffered(oc.R)
	oc.Detach()
	return oc.Conn, prefix
}

// originErr classifies a failure on the way to an origin, naming the
// member m (if any) when reaching it failed; failures after the member
// was reached are the origin's (or the member's relaying of it).
func originErr(err error, m *upstream.Member) error {
	var rf *upstream.Refusal
	if errors.As(err, &rf) {
		return err
	}
	pe := proxystatus.From(err)
	if pe.Upstream != "" || IsClientGone(pe) {
		return pe // a member's own failure, or the client's
	}
	out := *pe
	if m != nil {
		out.Detail = "via upstream " + m.Name + ": " + out.Detail
	}
	if out.Type == proxystatus.ProxyInternalError {
		out.Type = proxystatus.HTTPResponseIncomplete
	}
	return &out
}

// refusalCode is the member's refusal status in err, or 0.
func refusalCode(err error) int {
	code, _ := UpstreamStatus(err)
	return code
}

// memberWrote reports whether resp is an error the member wrote itself
// (rather than the origin's answer): 403 or 5xx with Squid's error header.
func memberWrote(resp *http.Response) bool {
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode < 500 {
		return false
	}
	return resp.Header.Get("X-Squid-Error") != ""
}
