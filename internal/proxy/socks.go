package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"strconv"

	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/socks5"
)

// SOCKSOptions configure ServeSOCKS.
type SOCKSOptions struct {
	// Auth is the authentication policy; the zero value accepts clients
	// without authentication.
	Auth socks5.Auth
}

// ServeSOCKS accepts SOCKS5 clients on ln until Shutdown. A CONNECT
// request is routed like an explicit proxy request — a domain name by name
// (the name goes to an upstream as is), an IP by its address — then
// dialled, answered and relayed. BIND and UDP ASSOCIATE are answered
// "command not supported". It returns http.ErrServerClosed after Shutdown.
func (s *Server) ServeSOCKS(ln net.Listener, o SOCKSOptions) error {
	return s.serveRaw(ln, metrics.KindSOCKS, func(ctx context.Context, c net.Conn, ev *event, l *lease) { s.serveSOCKS(ctx, c, ev, l, &o) })
}

func (s *Server) serveSOCKS(ctx context.Context, c net.Conn, ev *event, l *lease, o *SOCKSOptions) {
	ev.method = "CONNECT"
	if d := s.opts.Timeouts.HeaderRead; d > 0 {
		c.SetDeadline(ev.start.Add(d))
	}
	cc := &countingConn{Conn: c}
	req, err := socks5.Handshake(cc, o.Auth)
	if err != nil {
		c.Close()
		if cc.n == 0 && errors.Is(err, io.EOF) {
			return // connected and left without a word, like a port probe: no log line
		}
		e := socksHandshakeError(err)
		status := e.Code()
		if e.Type == proxystatus.ConnectionTerminated || e.Type == proxystatus.ConnectionTimeout {
			status = 0
		}
		if req.Command != 0 {
			ev.dest = req.Dest.String()
		}
		s.failRaw(ctx, ev, e, status)
		return
	}
	ev.dest = scrubHost(req.Dest.String())
	host := req.Dest.Name
	if host == "" {
		host = req.Dest.IP.String()
	}
	wctx, stop := watchClient(ctx, c, nil, nil)
	s.tunnel(wctx, ev, &target{hostport: net.JoinHostPort(host, strconv.Itoa(int(req.Dest.Port))), tunnel: true},
		c, stop, &socksSide{s: s, ctx: ctx, c: c, l: l}, tunnelOpts{sni: true})
}

// socksSide is a SOCKS5 request's part in the tail: SOCKS5 replies.
type socksSide struct {
	s   *Server
	ctx context.Context
	c   net.Conn
	l   *lease // the connection's slots
	sc  *Conn
}

func (ss *socksSide) refuse(ev *event, e *proxystatus.Error, cause error) {
	ss.s.refuseSOCKS(ss.ctx, ev, ss.c, socksReplyFor(cause, e), e)
}

func (ss *socksSide) hand(sc *Conn) {
	ss.sc = sc
	sc.lease.take(ss.l) // the connection's slot, until the tunnel ends
}

func (ss *socksSide) established(more []byte) ([]byte, *proxystatus.Error) {
	bound, _ := addrPort(ss.sc.Conn.LocalAddr())
	if err := socks5.Reply(ss.c, socks5.Succeeded, bound); err != nil {
		return nil, &proxystatus.Error{Type: proxystatus.ConnectionTerminated, Detail: "send the SOCKS5 reply: " + errText(err), Err: err}
	}
	ss.c.SetDeadline(time.Time{})
	return more, nil
}

// refuseSOCKS answers a request with a failure reply, closes the
// connection and logs e.
func (s *Server) refuseSOCKS(ctx context.Context, ev *event, c net.Conn, code socks5.ReplyCode, e *proxystatus.Error) {
	socks5.Reply(c, code, netip.AddrPort{})
	c.Close()
	s.failRaw(ctx, ev, e, e.Code())
}

// socksHandshakeError classifies a failed negotiation for the log. The
// client has already been answered by socks5.Handshake. No password is in
// any of these errors.
func socksHandshakeError(err error) *proxystatus.Error {
	switch {
	case errors.Is(err, socks5.ErrAuthFailed), errors.Is(err, socks5.ErrNoAcceptableMethod):
		return &proxystatus.Error{Type: proxystatus.HTTPRequestDenied, Status: http.StatusProxyAuthRequired, Detail: err.Error(), Err: err}
	case errors.Is(err, socks5.ErrCommandNotSupported):
		return &proxystatus.Error{Type: proxystatus.HTTPRequestError, Status: http.StatusNotImplemented, Detail: err.Error(), Err: err}
	case errors.Is(err, socks5.ErrVersion), errors.Is(err, socks5.ErrMalformed), errors.Is(err, socks5.ErrAddressTypeNotSupported):
		return &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: err.Error(), Err: err}
	}
	e := proxystatus.From(err)
	out := *e
	out.Detail = "SOCKS5 handshake: " + errText(err)
	if out.Type == proxystatus.ProxyInternalError {
		out.Type = proxystatus.ConnectionTerminated
	}
	return &out
}

// socksReplyFor maps a failed dial to a SOCKS5 reply code. A direct dial's
// operating-system error says what happened at the destination. Through an
// upstream, only the upstream's own answer says anything about the
// destination: a 403 is a policy refusal ("not allowed by ruleset"), a 504
// a timeout; everything else is the upstream's failure, a general one.
func socksReplyFor(err error, e *proxystatus.Error) socks5.ReplyCode {
	if e.Upstream != "" {
		switch {
		case e.Type == proxystatus.UpstreamRefused && e.Status == http.StatusForbidden:
			return socks5.NotAllowed
		case e.Type == proxystatus.UpstreamRefused && e.Status == http.StatusGatewayTimeout:
			return socks5.TTLExpired
		}
		return socks5.GeneralFailure
	}
	if code := socks5.ReplyCodeFor(err); code != socks5.GeneralFailure {
		return code
	}
	switch e.Type {
	case proxystatus.DestinationNotFound, proxystatus.DNSError, proxystatus.DestinationIPUnroute:
		return socks5.HostUnreachable
	case proxystatus.ConnectionRefused:
		return socks5.ConnectionRefused
	case proxystatus.DNSTimeout, proxystatus.ConnectionTimeout:
		return socks5.TTLExpired
	case proxystatus.HTTPRequestDenied, proxystatus.DestinationIPProhibit, proxystatus.ProxyLoopDetected:
		return socks5.NotAllowed
	case proxystatus.ConnectionLimitReached:
		return socks5.GeneralFailure
	}
	return socks5.GeneralFailure
}

// countingConn counts the bytes read through it (the handshake only).
type countingConn struct {
	net.Conn
	n int
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n += n
	return n, err
}
