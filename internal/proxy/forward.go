package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"time"

	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxyauth"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/transport"
	"egret.io/egret/internal/upstream"
)

// The forwarding policy of absolute-URI requests: where a request goes
// (directly, or through the members of a pool in the order Pool.Do gives),
// when it may be sent again (a reused connection that was closed, another
// member), and what the client is answered. The wire — framing, heads,
// bodies, 1xx, the idle connections — is internal/http1's.

// tlsHandshakeTimeout bounds TLS to an https origin of a forwarded URL.
const tlsHandshakeTimeout = 10 * time.Second

// originKey says which requests a connection may carry, like
// http.Transport's connectMethodKey.
type originKey struct {
	// member is the upstream the connection goes through; nil when direct.
	member *upstream.Member
	// scheme is "http" or "https" for a connection that speaks to the
	// origin (direct, or tunnelled through the member), "" for one that
	// speaks to an http(s) member in absolute form, for any origin.
	scheme string
	// addr is the origin's host:port; "" with scheme "".
	addr string
	// client is the client connection a connection through an NTLM or
	// Negotiate member was authenticated for: it carries only that
	// client's requests, and is closed when the client leaves
	// (dropAuthConns). nil for the others, which any client may reuse.
	client *clientConn
}

// originPool is the proxy's pool of idle connections to origins and
// members.
type originPool = http1.Pool[originKey]

// exchange is one forwarded request: the message on its way (http1), the
// attempts to send it, and the response streamed back. A client connection
// reuses one.
type exchange struct {
	http1.Forward
	cc         *clientConn
	ctx        context.Context // the request's: cancelled when its client leaves while it waits
	ev         event
	st         *State
	dest       route.Dest
	pin        string // the approved address a member is asked for (admission.pin); "" for the name
	scheme     string
	idempotent bool

	cred    *upstream.Credential // for a tunnel through the member being tried
	hs      *proxyauth.Handshake // the handshake run on oc, if it ran on this request
	oc      *http1.Conn          // the connection of the current attempt
	key     originKey            // its key
	release func()               // the member's request count
	// breaker is set while the destination's breaker awaits the outcome:
	// it is told before the client is answered, so the client's next
	// request already meets the breaker's new state.
	breaker bool
	// writeDeadline is set once the response copy put a write deadline on
	// the client connection; respond clears it.
	writeDeadline bool
	lenBuf        [32]byte
}

// reportDest tells the destination's breaker the outcome, once.
func (x *exchange) reportDest(err error) {
	if x.breaker {
		x.breaker = false
		x.cc.s.reportDest(x.dest, err)
	}
}

// forward serves an absolute-URI request; it reports whether the client
// connection may carry another request.
func (cc *clientConn) forward(req *http.Request) bool {
	s := cc.s
	x := &cc.x
	*x = exchange{cc: cc}
	ev := &x.ev
	*ev = event{kind: metrics.KindHTTP, client: cc.remote, method: req.Method, dest: scrubHost(req.URL.Host), start: time.Now()}
	var defPort uint16
	switch x.scheme = req.URL.Scheme; x.scheme {
	case "http":
		defPort = 80
	case "https":
		defPort = 443
	default:
		return cc.fail(req, ev, &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "unsupported URL scheme " + proxystatus.Scrub(strconv.Quote(x.scheme)) + ": egret forwards http:// and https:// URLs, and tunnels anything with CONNECT"}, false)
	}
	if s.alog != nil {
		ev.url = x.scheme + "://" + scrubHost(req.URL.Host) + req.URL.EscapedPath() // no query: it may hold tokens
	}
	a, e := s.admit(cc.ctx, ev, &target{hostport: req.URL.Host, defPort: defPort, via: req.Header["Via"], auth: proxyAuth(req.Header)})
	if e != nil {
		return cc.fail(req, ev, e, false)
	}
	x.st, x.dest, x.breaker, x.pin = a.st, a.dest, a.breaker, a.pin
	x.idempotent = http1.Idempotent(req)
	if e := x.Prepare(req); e != nil {
		return cc.fail(req, ev, e, false)
	}
	x.Client = http1.Client{Conn: cc.c, R: cc.r.Buf(), W: cc.bw}
	x.BodyIdle = positive(s.opts.Timeouts.ClientIdle)
	x.HeaderTimeout = positive(s.opts.Timeouts.ResponseHeader)
	// While a request without a body waits on the far side, its client is
	// watched: one that leaves cancels the wait. (A body's copy reads the
	// client itself.)
	x.ctx = cc.ctx
	var stop func() ([]byte, bool)
	if x.Framing.Kind == http1.BodyNone {
		x.ctx, stop = cc.watchClient(x.Interrupt)
	}
	resp, err := x.roundTrip()
	if stop != nil {
		if _, gone := stop(); gone {
			// Nobody waits for the answer; the origin connection may
			// hold an interrupted read.
			resp, err = nil, clientGone(http1.ErrClientLeft)
			x.dropOrigin()
		}
	}
	var keep bool
	var destErr error
	if err != nil {
		keep, destErr = x.failed(err)
	} else {
		keep = x.respond(resp)
		if x.ev.err != nil && !isClientGone(x.ev.err) {
			destErr = x.ev.err
		}
	}
	if x.release != nil {
		x.release()
	}
	x.reportDest(destErr)
	ev.up = x.Up()
	if cc.handedOff {
		return false // a tunnel now; it logs when it ends
	}
	ev.timed = true
	s.finishWith(ev, &cc.meters)
	return keep
}

// roundTrip sends the request directly or through the members of its pool
// (Pool.Do: candidates, failover, credential fallback, health) and returns
// the final response, its header read and 1xx answers passed on. Another
// member, or the previous credential, is tried only while the body can
// still be sent again, so a request is never sent twice: failures before
// the request reached the origin (the member could not be reached, or
// refused it with 407/403) move on for any method; others (timeouts, a
// member's 5xx) only for idempotent requests.
func (x *exchange) roundTrip() (*http.Response, error) {
	if x.ev.dec.Action != route.Upstream {
		resp, err := x.attempt(originKey{scheme: x.scheme, addr: x.ev.dest}, nil, "")
		if err != nil {
			return nil, originErr(err, nil)
		}
		return resp, nil
	}
	s := x.cc.s
	p := x.st.pool(x.ev.dec.Pool)
	if p == nil {
		return nil, &proxystatus.Error{Type: proxystatus.ProxyConfigurationErr, Detail: fmt.Sprintf("route names pool %q, which does not exist", x.ev.dec.Pool)}
	}
	again := func(err error) bool { return !x.Started() && (x.idempotent || transport.IsNotSent(err)) }
	var resp *http.Response
	_, err := p.Do(x.ctx, x.dest.Host, again, func(_ context.Context, m *upstream.Member, cred *upstream.Credential, more bool) (int, error) {
		x.ev.member = m.Name
		start := time.Now()
		r, code, err := x.tryMember(p, m, cred, more && x.idempotent)
		if err == nil {
			x.ev.connect, resp = time.Since(start), r
		}
		return code, err
	})
	if err != nil {
		if pe := proxystatus.From(err); pe.Type == proxystatus.PoolUnavailable {
			s.countUpstreamErr(p.Name, err)
		}
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
// response header in time is a *upstream.Silence.
func (x *exchange) tryMember(p *upstream.Pool, m *upstream.Member, cred *upstream.Credential, mayRetry bool) (*http.Response, int, error) {
	release := m.Acquire()
	var resp *http.Response
	var err error
	// A connection an NTLM or Negotiate member authenticated serves only
	// the client it was made for.
	var client *clientConn
	if m.Auth.PerConnection() {
		client = x.cc
	}
	x.cred, x.hs = cred, nil
	// A pinned destination (admission.pin) is reached through a tunnel
	// to the approved address, with the request in origin form inside:
	// in absolute form the member would resolve the name itself (and an
	// address in the request target would replace the Host the origin
	// must see).
	if x.scheme == "https" || m.URL.Scheme == upstream.SchemeSOCKS5 || x.pin != "" {
		addr := x.ev.dest
		if x.pin != "" {
			addr = x.pin
		}
		resp, err = x.attempt(originKey{member: m, scheme: x.scheme, addr: addr, client: client}, p, "")
	} else {
		auth := ""
		if client == nil {
			auth = upstream.AuthHeader(cred)
		}
		resp, err = x.attempt(originKey{member: m, client: client}, p, auth)
		if err == nil && resp.StatusCode == http.StatusProxyAuthRequired {
			if x.hs != nil {
				_, herr := x.hs.Next(resp.Header.Values("Proxy-Authenticate"))
				err = upstream.AuthRefusal(m.Name, herr)
			} else {
				err = upstream.RefusalError(m.Name, resp)
			}
			resp = nil
			x.dropOrigin()
		}
	}
	if err != nil {
		release()
		err = originErr(err, m)
		if pe := proxystatus.From(err); pe.Type == proxystatus.ConnectionReadTimeout && !x.GotByte() && refusalCode(err) == 0 {
			out := *pe
			out.Upstream = m.Name
			err = &upstream.Silence{Err: &out}
		}
		err = transport.Attempt(err)
		return nil, refusalCode(err), err
	}
	if mayRetry && !x.Started() && memberWrote(resp) {
		rerr := transport.Attempt(upstream.RefusalError(m.Name, resp))
		x.dropOrigin()
		release()
		return nil, resp.StatusCode, rerr
	}
	x.release = release
	return resp, resp.StatusCode, nil
}

// attempt sends the request on a pooled connection for key, or a new one.
// A pooled connection that fails before any answer (the other side closed
// it while it idled) is replaced by a new one when that is safe: the
// request did not reach the origin (writing it failed), or it is
// idempotent, and its body can still be sent.
func (x *exchange) attempt(key originKey, p *upstream.Pool, auth string) (*http.Response, error) {
	s := x.cc.s
	pool := s.origins
	head := http1.RequestHead{Scheme: x.scheme, Host: x.Req.URL.Host, Absolute: key.member != nil && key.scheme == "",
		Via: s.via(x.Req.ProtoMajor, x.Req.ProtoMinor), Auth: auth}

	for try := 0; ; try++ {
		var oc *http1.Conn
		if try == 0 {
			oc = pool.Get(key, !x.idempotent)
			if oc != nil && key.member == nil && !approves(x.ev.dec.Addrs, oc) {
				// Dialled for another request, to an address this one's
				// decision does not approve: it stays for those it fits.
				pool.Put(key, oc)
				oc = nil
			}
		}
		if oc == nil {
			var err error
			if oc, err = x.dial(key, p, pool.Gen()); err != nil {
				return nil, err
			}
		}
		x.oc, x.key = oc, key
		if key.client != nil && key.scheme == "" {
			// A new connection to an NTLM or Negotiate member is
			// authenticated first; a pooled one already is.
			head.Auth, x.hs = "", nil
			if !oc.Reused {
				auth, err := x.authenticate(oc, key.member, p)
				if err != nil {
					x.dropOrigin()
					return nil, err
				}
				head.Auth = auth
			}
		}
		resp, err := x.Send(x.ctx, oc, &head)
		if err == nil && resp.StatusCode == http.StatusProxyAuthRequired && key.client != nil && oc.Reused &&
			try == 0 && !x.Started() && !x.Skipped() {
			// The member forgot the connection's authentication (it
			// idled too long, say): authenticate a new one. Nothing was
			// sent on.
			x.dropOrigin()
			continue
		}
		if err == nil {
			if key.client != nil {
				x.cc.noteAuthKey(key)
			}
			return resp, nil
		}
		x.dropOrigin()
		var ce *http1.ClientError
		if errors.As(err, &ce) {
			return nil, clientGone(ce.Err)
		}
		// A reused connection the other side had closed fails at once; a
		// timeout is no such thing, and is not waited out twice.
		var we *http1.WriteError
		if oc.Reused && !x.GotByte() && !x.Started() && try == 0 && (x.idempotent || errors.As(err, &we)) && !errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if errors.As(err, &we) {
			err = we.Err
		}
		return nil, err
	}
}

// approves reports whether the direct origin connection oc goes to one of
// addrs, the addresses a decision approved (nil: any).
func approves(addrs []netip.Addr, oc *http1.Conn) bool {
	if addrs == nil {
		return true
	}
	ap, ok := addrPort(oc.Raw.RemoteAddr())
	return ok && slices.Contains(addrs, ap.Addr())
}

// authenticate runs the handshake of m's scheme on oc, a new connection
// to m for requests in absolute form, and returns the Proxy-Authorization
// value of the request itself. For Negotiate that is the first and only
// round. NTLM's first round (the negotiate message, answered by the
// challenge) goes in a HEAD request for the same URL without a body or any
// of the client's fields, so the request itself is sent once, with the
// last message: a member that answers the HEAD without asking for
// authentication has sent on nothing but a HEAD.
func (x *exchange) authenticate(oc *http1.Conn, m *upstream.Member, p *upstream.Pool) (string, error) {
	h := m.Handshake(x.cred)
	first, err := h.First()
	if err != nil {
		return "", upstream.AuthError(m.Name, err)
	}
	x.hs = h
	if m.Auth != proxyauth.NTLM {
		return first, nil
	}
	s := x.cc.s
	stand := &http.Request{Method: http.MethodHead, URL: x.Req.URL, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	head := http1.RequestHead{Scheme: x.scheme, Host: x.Req.URL.Host, Absolute: true, Via: s.via(1, 1), Auth: first}
	oc.Conn.SetDeadline(time.Now().Add(p.Timeout()))
	defer oc.Conn.SetDeadline(time.Time{})
	stop := context.AfterFunc(x.ctx, func() { oc.Conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	http1.WriteRequestHead(oc.W, stand, &head, x.lenBuf[:0])
	if err := oc.W.Flush(); err != nil {
		return "", &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Upstream: m.Name, Detail: "send the NTLM negotiate message to upstream " + m.Name + ": " + err.Error(), Err: err}
	}
	resp, _, err := oc.ReadResponse(stand, http1.DefaultMaxResponseHeaderBytes)
	if err != nil {
		if x.ctx.Err() != nil {
			return "", clientGone(http1.ErrClientLeft)
		}
		t := proxystatus.ConnectionTerminated
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t = proxystatus.ConnectionReadTimeout
		}
		return "", &proxystatus.Error{Type: t, Upstream: m.Name, Detail: "upstream " + m.Name + " did not answer the NTLM negotiate message: " + err.Error(), Err: err}
	}
	resp.Body.Close() // a HEAD's answer has none
	if resp.StatusCode != http.StatusProxyAuthRequired {
		if resp.Close {
			return "", &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Upstream: m.Name,
				Detail: "upstream " + m.Name + " answered the NTLM negotiate message with " + strconv.Itoa(resp.StatusCode) + " and closed the connection"}
		}
		x.hs = nil
		return "", nil // it does not ask for authentication
	}
	next, err := h.Next(resp.Header.Values("Proxy-Authenticate"))
	if err != nil {
		return "", upstream.AuthRefusal(m.Name, err)
	}
	if resp.Close {
		return "", &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Upstream: m.Name,
			Detail: "upstream " + m.Name + " closes the connection after its NTLM challenge; the handshake needs it kept alive"}
	}
	return next, nil
}

// noteAuthKey records that the client connection has pooled connections
// under k (a key naming it), to close them when it ends.
func (cc *clientConn) noteAuthKey(k originKey) {
	for _, o := range cc.authKeys {
		if o == k {
			return
		}
	}
	cc.authKeys = append(cc.authKeys, k)
}

// dropAuthConns closes the connections authenticated for this client
// connection, which has ended.
func (cc *clientConn) dropAuthConns() {
	for _, k := range cc.authKeys {
		cc.s.origins.Drop(k)
	}
	cc.authKeys = nil
}

// dial connects for key: to the origin directly, to an http(s) member, or
// to the origin through a member's tunnel; TLS to an https origin.
func (x *exchange) dial(key originKey, p *upstream.Pool, gen uint64) (*http1.Conn, error) {
	s := x.cc.s
	switch {
	case key.member == nil:
		c, err := s.dialDirect(x.ctx, x.st, x.dest, x.ev.dec)
		if err != nil {
			return nil, err
		}
		return x.originTLS(c, c, gen)
	case key.scheme == "":
		ctx, cancel := context.WithTimeout(x.ctx, p.Timeout())
		defer cancel()
		c, err := p.DialMember(ctx, key.member)
		if err != nil {
			return nil, err
		}
		return http1.NewConn(c, rawConn(c), gen), nil
	}
	t, _, err := p.OpenTunnel(x.ctx, key.member, key.addr, x.cred)
	if err != nil {
		return nil, err
	}
	var c net.Conn = t.Conn
	if len(t.Prefix) > 0 {
		c = &prefixConn{Conn: c, prefix: t.Prefix}
	}
	return x.originTLS(c, rawConn(t.Conn), gen)
}

// originTLS makes c an origin connection, with TLS for an https origin.
func (x *exchange) originTLS(c, raw net.Conn, gen uint64) (*http1.Conn, error) {
	if x.scheme != "https" {
		return http1.NewConn(c, raw, gen), nil
	}
	s := x.cc.s
	cfg := &tls.Config{}
	if s.opts.OriginTLS != nil {
		cfg = s.opts.OriginTLS.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = x.dest.Host
	}
	tc := tls.Client(c, cfg)
	ctx, cancel := context.WithTimeout(x.ctx, tlsHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		t := proxystatus.TLSProtocolError
		var ce *tls.CertificateVerificationError
		if errors.As(err, &ce) {
			t = proxystatus.TLSCertificateError
		}
		return nil, &proxystatus.Error{Type: t, Detail: "TLS to " + x.ev.dest + ": " + err.Error(), Err: err}
	}
	return http1.NewConn(tc, raw, gen), nil
}

// rawConn returns the socket beneath a TLS connection.
func rawConn(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return c
}

// dropOrigin closes the current origin connection: it cannot carry
// another request.
func (x *exchange) dropOrigin() {
	if x.oc != nil {
		x.oc.Close()
		x.oc = nil
	}
}

// releaseOrigin pools the origin connection after a clean exchange (the
// whole request sent, the whole response read, nothing more waiting, no
// close asked for) and closes it otherwise.
func (x *exchange) releaseOrigin(resp *http.Response) {
	oc := x.oc
	if oc == nil {
		return
	}
	if resp.Close || x.Skipped() || !x.BodyDone() || oc.R.Buffered() > 0 {
		x.dropOrigin()
		return
	}
	x.oc = nil
	x.cc.s.origins.Put(x.key, oc)
}

// originErr classifies a failure on the way to an origin, naming the
// member m (if any) when reaching it failed; failures after the member
// was reached are the origin's (or the member's relaying of it).
func originErr(err error, m *upstream.Member) error {
	var r *upstream.Refusal
	if errors.As(err, &r) {
		return err
	}
	pe := proxystatus.From(err)
	if pe.Upstream != "" || isClientGone(pe) {
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
	var r *upstream.Refusal
	if errors.As(err, &r) {
		return r.Code
	}
	return 0
}

// memberWrote reports whether resp is an error the member wrote itself
// (rather than the origin's answer): 403 or 5xx with Squid's error header.
func memberWrote(resp *http.Response) bool {
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode < 500 {
		return false
	}
	return resp.Header.Get("X-Squid-Error") != ""
}

// prefixConn returns prefix before what it reads from Conn.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// clientGoneDetail is the detail of clientGone's errors.
const clientGoneDetail = "client went away"

// clientGone wraps a failure on the client's side (it left, or writing to
// it failed) as the error logged for it: a transport.ClientGone, read with
// isClientGone.
func clientGone(err error) *proxystatus.Error {
	return &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Detail: clientGoneDetail, Err: &transport.ClientGone{Err: err}}
}

// isClientGone reports whether err is a failure on the client's side.
func isClientGone(err error) bool { return transport.IsClientGone(err) }
