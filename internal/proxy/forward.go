package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/metrics"
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

// exchange is one forwarded request: the message on its way (http1), the
// attempts to send it, and the response streamed back. A client connection
// reuses one.
type exchange struct {
	transport.Request // the message, and its attempts through the transport
	cc                *clientConn
	ev                event
	st                *State
	dest              route.Dest
	scheme            string
	// breaker is set while the destination's breaker awaits the outcome:
	// it is told before the client is answered, so the client's next
	// request already meets the breaker's new state.
	breaker bool
	// writeDeadline is set once the response copy put a write deadline on
	// the client connection; respond clears it.
	writeDeadline bool
	// lease holds the admission's slots until the request ends (or its
	// tunnel, after a switch of protocols).
	lease   lease
	respBuf [32]byte
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
	if site := s.interceptSite(ev, a); site != nil {
		// An interception site's rules and credential hold inside its
		// tunnels only: a request forwarded in absolute form would reach
		// its origin past them.
		a.lease.end()
		ev.site = site.Name
		return cc.fail(req, ev, &proxystatus.Error{Type: proxystatus.HTTPRequestDenied,
			Detail: a.dest.Host + " is intercepted (its method/path rules and credentials): reach it through a CONNECT tunnel (an https:// URL), not a request in absolute form"}, false)
	}
	x.lease.take(&a.lease)
	x.st, x.dest, x.breaker, x.Pin = a.st, a.dest, a.breaker, a.pin
	x.Idempotent = http1.Idempotent(req)
	x.Identity = cc
	x.Scheme, x.Host, x.Dest, x.DestHost = x.scheme, req.URL.Host, ev.dest, a.dest.Host
	x.Via, x.Via11 = s.via(req.ProtoMajor, req.ProtoMinor), s.via11
	x.Approved, x.Port, x.DialTimeout = a.addrs, a.dial.Port, s.opts.Timeouts.Dial
	if e := x.Prepare(req); e != nil {
		x.lease.end()
		return cc.fail(req, ev, e, false)
	}
	x.Client = http1.Client{Conn: cc.c, R: cc.r.Buf(), W: cc.bw}
	x.BodyIdle = positive(s.opts.Timeouts.ClientIdle)
	x.HeaderTimeout = positive(s.opts.Timeouts.ResponseHeader)
	// While a request without a body waits on the far side, its client is
	// watched: one that leaves cancels the wait. (A body's copy reads the
	// client itself.)
	x.Ctx = cc.ctx
	var stop func() ([]byte, bool)
	if x.Framing.Kind == http1.BodyNone {
		x.Ctx, stop = cc.watchClient(x.Interrupt)
	}
	resp, err := x.roundTrip()
	if stop != nil {
		if _, gone := stop(); gone {
			// Nobody waits for the answer; the origin connection may
			// hold an interrupted read.
			resp, err = nil, clientGone(http1.ErrClientLeft)
			x.Drop()
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
	if x.MemberDone != nil {
		x.MemberDone()
	}
	x.reportDest(destErr)
	x.lease.end() // the request is over (a tunnel took it over otherwise)
	ev.up = x.Up()
	if cc.handedOff {
		return false // a tunnel now; it logs when it ends
	}
	ev.timed = true
	s.finishWith(ev, &cc.meters)
	return keep
}

// roundTrip sends the request through the transport: directly, or
// through the members of the decision's pool.
func (x *exchange) roundTrip() (*http.Response, error) {
	s := x.cc.s
	var p *upstream.Pool
	if x.ev.dec.Action == route.Upstream {
		if p = x.st.pool(x.ev.dec.Pool); p == nil {
			return nil, &proxystatus.Error{Type: proxystatus.ProxyConfigurationErr, Detail: fmt.Sprintf("route names pool %q, which does not exist", x.ev.dec.Pool)}
		}
	}
	resp, err := s.tr.RoundTrip(&x.Request, p)
	if x.Member != nil {
		x.ev.member = x.Member.Name
	}
	if x.Authenticated {
		x.cc.noteAuthKey(x.Key)
	}
	if err != nil {
		if pe := proxystatus.From(err); p != nil && pe.Type == proxystatus.PoolUnavailable {
			s.countUpstreamErr(p.Name, err)
		}
		return nil, err
	}
	x.ev.connect = x.Connect
	return resp, nil
}

// noteAuthKey records that the client connection has pooled connections
// under k (a key naming it), to close them when it ends.
func (cc *clientConn) noteAuthKey(k transport.Key) {
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
		cc.s.tr.Drop(k)
	}
	cc.authKeys = nil
}
