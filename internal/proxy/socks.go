package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"

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
