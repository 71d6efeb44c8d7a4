package proxy

import (
	"context"
	"errors"
	"net"
	"runtime/debug"
	"strconv"
	"sync/atomic"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/relay"
	"egret.io/egret/internal/transport"
)

// Interception hands admitted CONNECT tunnels whose target is one of Sites
// to Engine (internal/intercept) instead of relaying them. Only a tunnel
// the whole admission path approved gets here; the engine reaches the
// origin through the same dial as the tunnel, to the addresses admission
// approved.
type Interception struct {
	Engine *intercept.Engine
	Sites  intercept.Sites
}

// Access log fields of an intercepted tunnel (each request inside it has
// its own line, intercept.Event).
const (
	logIntercepted = "intercepted" // true when the engine served the tunnel
	logSite        = "site"        // the site's first host pattern
	logExempt      = "exempt"      // the TLS server name was exempt: passed through
	logRequests    = "requests"    // requests served inside the tunnel
	logIntError    = "intercept_error"
)

// SiteRules is implemented by the WorkloadRules of a policy that may
// intercept (package policy's Effective): the site of a host for the
// workload, or nil.
type SiteRules interface {
	InterceptSite(host string) *intercept.Site
}

// interceptSite returns the site an admitted tunnel to a is intercepted
// for, or nil: an opaque tunnel. The gateway's own sites come first (its
// operator's), then those of the client's policy.
func (s *Server) interceptSite(ev *event, a *admission) *intercept.Site {
	if s.opts.Intercept != nil {
		if site := s.opts.Intercept.Sites.Lookup(a.dest.Host); site != nil {
			return site
		}
	}
	if r, ok := ev.wl.Rules.(SiteRules); ok && r != nil {
		return r.InterceptSite(a.dest.Host)
	}
	return nil
}

// intercept serves a registered tunnel (t: the client and sc) with the
// engine in the background; when it ends the tunnel is unregistered, its
// limits released and it is logged, as start does for a relayed one.
func (s *Server) intercept(ev *event, t *relay.Tunnel, client net.Conn, early []byte, sc *Conn, a *admission, site *intercept.Site) {
	ev.site = site.Name
	if s.opts.Intercept == nil {
		// A policy's site, and no engine to serve it (the policy package
		// refuses such a policy; this holds should one get through):
		// never an opaque tunnel in its place, which would skip its rules.
		ev.err = &proxystatus.Error{Type: proxystatus.ProxyConfigurationErr,
			Detail: "the workload's policy intercepts " + a.dest.Host + " and this gateway has no interception CA"}
		client.Close()
		sc.Close()
		s.finish(ev)
		s.removeTunnel(t)
		return
	}
	ev.intercepted = true
	tc := &touchConn{Conn: client, t: t}
	client = tc
	client = transport.WithPrefix(client, early)
	origin := transport.WithPrefix(sc.Conn, sc.Prefix)
	workload := ""
	if ev.identified && ev.wl.Namespace != "" {
		workload = ev.wl.Namespace + "/" + ev.wl.ServiceAccount
	}
	tun := &intercept.Tunnel{
		Host: a.dest.Host, Port: strconv.Itoa(int(a.dest.Port)),
		Client: ev.client, Workload: workload, Site: site,
		Origin: origin,
		// Every further connection to the origin is the tunnel's own dial
		// again: the addresses admission settled (judged, and allowed by
		// the SSRF guard), never a new lookup, or the same pool. It is a
		// new connection to the destination, so it takes the
		// destination's slot and asks its breaker as admission did, and
		// tells the breaker how it went; closing it gives the slot back.
		Dial: func(ctx context.Context) (conn net.Conn, err error) {
			// It runs on the engine's and net/http's goroutines, where
			// nothing else would recover a panic.
			defer func() {
				if v := recover(); v != nil {
					s.panicked(panicIntercept, ev.client, v, debug.Stack())
					conn, err = nil, &proxystatus.Error{Type: proxystatus.ProxyInternalError, Detail: "egret failed connecting to " + a.dest.Host + " (an internal error, logged)"}
				}
			}()
			var l lease
			breaker, err := s.admitDest(a.dest, false, &l)
			if err != nil {
				return nil, s.limitErr(err)
			}
			c, err := s.dial(ctx, a)
			if breaker {
				s.reportDest(a.dest, err)
			}
			if err != nil {
				l.end()
				return nil, err
			}
			c.lease.take(&l)
			return transport.WithPrefix(c, c.Prefix), nil
		},
		// An exempt server name stays an opaque tunnel to the connection
		// admission made, the ClientHello replayed.
		Passthrough: func(conn net.Conn) error {
			done := make(chan relay.Result, 1)
			rt := relay.New(conn, sc.Conn)
			rt.OnPanic = s.onPanic
			rt.Start(nil, sc.Prefix, func(r relay.Result) { done <- r })
			<-done
			return nil
		},
	}
	// The engine runs on the tunnel's own context: the server's, ended
	// too when egret closes the tunnel (the idle reaper, a drain's cut-off)
	// — the requests in flight and the origin dials end with it.
	ctx, cancel := context.WithCancel(s.ctx)
	t.AfterClose(cancel)
	go func() {
		defer cancel()
		defer func() {
			// A panic ends this tunnel only.
			if v := recover(); v != nil {
				s.panicked(panicIntercept, ev.client, v, debug.Stack())
				client.Close()
				sc.Close()
				ev.interceptErr = "error"
				s.finish(ev)
				s.removeTunnel(t)
			}
		}()
		res, err := s.opts.Intercept.Engine.Serve(ctx, client, tun)
		ev.exempt, ev.requests, ev.sni = res.Exempt, res.Requests, res.SNI
		ev.up, ev.down = tc.up.Load(), tc.down.Load()
		if err != nil {
			var he *intercept.HandshakeError
			if errors.As(err, &he) {
				ev.interceptErr = he.Reason
			} else {
				ev.interceptErr = "error"
			}
		}
		sc.Close()
		s.finish(ev)
		s.removeTunnel(t)
	}()
}

// touchConn marks its tunnel active on every read and write, so the idle
// reaper (Timeouts.TunnelIdle) never cuts an intercepted tunnel that still
// carries traffic: the engine, not relay, moves its bytes. It counts the
// client's bytes each way for the tunnel's line (TLS records included, as
// for a relayed tunnel).
type touchConn struct {
	net.Conn
	t        *relay.Tunnel
	up, down atomic.Int64
}

func (c *touchConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.t.Touch()
		c.up.Add(int64(n))
	}
	return n, err
}

func (c *touchConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.t.Touch()
		c.down.Add(int64(n))
	}
	return n, err
}

// CloseWrite half-closes the connection when it can (an exempt tunnel's
// relay).
func (c *touchConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// logIntercept writes the interception fields of a tunnel's line.
func logIntercept(l *logLine, ev *event) {
	if !ev.intercepted {
		return
	}
	l.b = append(l.b, `,"intercepted":true`...)
	l.str(logSite, ev.site)
	if ev.exempt {
		l.b = append(l.b, `,"exempt":true`...)
	}
	l.int(logRequests, ev.requests)
	if ev.interceptErr != "" {
		l.str(logIntError, ev.interceptErr)
	}
}
