package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/upstream"
)

// Conn is a connection to a destination, direct or through an upstream.
type Conn struct {
	net.Conn
	// Prefix holds bytes from the destination side that were read during
	// the handshake and must be relayed first.
	Prefix []byte
	// Member is the upstream used, nil when direct.
	Member *upstream.Member
	// Connect is how long establishing took.
	Connect time.Duration

	release releases // limit slots and the member's connection count
}

// Release gives back what the connection holds against limits (and its
// member's connection count). It is called by Close and when a relayed
// tunnel ends; calling it again does nothing.
func (c *Conn) Release() { c.release.run() }

// Close closes the connection and releases it.
func (c *Conn) Close() error {
	c.Release()
	return c.Conn.Close()
}

// Route decides where dest goes under the current state.
func (s *Server) Route(ctx context.Context, st *State, dest route.Dest) route.Decision {
	dec := st.Routes.Decide(ctx, dest, s.opts.Resolver)
	return dec
}

// Dial connects to dest as dec says: directly (to the addresses the
// decision resolved, if any) or through dec's pool. A deny decision is an
// error; an unreachable pool never falls back to direct.
func (s *Server) Dial(ctx context.Context, st *State, dest route.Dest, dec route.Decision) (*Conn, error) {
	start := time.Now()
	if dec.Action != route.Direct && dec.Action != route.Upstream {
		return nil, denied(dest, dec)
	}
	var rel releases
	breaker, err := s.admitDest(dest, true, &rel)
	if err != nil {
		return nil, err
	}
	c, err := s.dial(ctx, st, dest, dec, &rel)
	if breaker {
		s.reportDest(dest, err)
	}
	if err != nil {
		rel.run()
		return nil, err
	}
	c.release = rel
	c.Connect = time.Since(start)
	return c, nil
}

func (s *Server) dial(ctx context.Context, st *State, dest route.Dest, dec route.Decision, rel *releases) (*Conn, error) {
	if dec.Action == route.Direct {
		c, err := s.dialDirect(ctx, dest, dec.Addrs)
		if err != nil {
			return nil, err
		}
		return &Conn{Conn: c}, nil
	}
	p := st.pool(dec.Pool)
	if p == nil {
		return nil, &proxystatus.Error{Type: proxystatus.ProxyConfigurationErr, Detail: fmt.Sprintf("route names pool %q, which does not exist", dec.Pool)}
	}
	start := time.Now()
	t, err := p.DialTunnel(ctx, dest.String())
	if err != nil {
		if pe := proxystatus.From(err); pe.Type == proxystatus.PoolUnavailable {
			s.countUpstreamErr(p.Name, err)
		}
		return nil, err
	}
	if s.m != nil {
		s.m.UpstreamConnect.WithLabelValues(p.Name).Observe(time.Since(start).Seconds())
	}
	rel.add(t.Member.Acquire())
	return &Conn{Conn: t.Conn, Prefix: t.Prefix, Member: t.Member}, nil
}

func denied(dest route.Dest, dec route.Decision) *proxystatus.Error {
	return &proxystatus.Error{Type: proxystatus.HTTPRequestDenied, Detail: fmt.Sprintf("%s is denied by %s", dest.Host, dec.Detail())}
}

func (s *Server) countUpstreamErr(pool string, err error) {
	if s.m == nil {
		return
	}
	pe := proxystatus.From(err)
	s.m.UpstreamErrors.WithLabelValues(pool, pe.Upstream, string(pe.Type)).Inc()
}

// dialDirect connects to dest, trying its addresses in order within the
// dial timeout. addrs, when given, are the addresses routing resolved.
func (s *Server) dialDirect(ctx context.Context, dest route.Dest, addrs []netip.Addr) (net.Conn, error) {
	if d := s.opts.Timeouts.Dial; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	switch {
	case dest.Addr.IsValid():
		addrs = []netip.Addr{dest.Addr}
	case len(addrs) == 0:
		var err error
		addrs, err = s.lookup(ctx, dest.Host)
		if err != nil {
			return nil, err
		}
	}
	port := strconv.Itoa(int(dest.Port))
	if s.opts.Protection.Guard != nil {
		allowed := make([]netip.Addr, 0, len(addrs))
		var prohibited *proxystatus.Error
		for _, a := range addrs {
			if e := s.guard(dest, a); e != nil {
				prohibited = e
				continue
			}
			allowed = append(allowed, a)
		}
		if len(allowed) == 0 {
			s.countPolicy("destination_ip")
			return nil, prohibited
		}
		addrs = allowed
	}
	var last error
	for i, a := range addrs {
		actx := ctx
		var cancel context.CancelFunc = func() {}
		if dl, ok := ctx.Deadline(); ok && i < len(addrs)-1 {
			// Leave each remaining address a fair share of the time.
			share := time.Until(dl) / time.Duration(len(addrs)-i)
			actx, cancel = context.WithTimeout(ctx, max(share, 500*time.Millisecond))
		}
		c, err := s.opts.DialContext(actx, "tcp", net.JoinHostPort(a.String(), port))
		cancel()
		if err == nil {
			return c, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	pe := proxystatus.From(last)
	out := *pe
	out.Detail = fmt.Sprintf("connect to %s: %s", dest, errText(last))
	if len(addrs) > 1 {
		out.Detail += fmt.Sprintf(" (%d addresses tried)", len(addrs))
	}
	if out.Type == proxystatus.ProxyInternalError {
		out.Type = proxystatus.DestinationUnavailable
	}
	return nil, &out
}

// lookup resolves host through the resolver, counting the result.
func (s *Server) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, err := s.opts.Resolver.LookupNetIP(ctx, "ip", host)
	if s.m != nil {
		res := "ok"
		if err != nil {
			res = "error"
		}
		s.m.DNSLookups.WithLabelValues(res).Inc()
	}
	if err != nil {
		pe := proxystatus.From(err)
		out := *pe
		out.Detail = "resolve " + host + ": " + errText(err)
		if out.Type == proxystatus.ProxyInternalError {
			out.Type = proxystatus.DNSError
		}
		return nil, &out
	}
	if len(addrs) == 0 {
		return nil, &proxystatus.Error{Type: proxystatus.DestinationNotFound, Detail: "resolve " + host + ": no addresses"}
	}
	return addrs, nil
}

func errText(err error) string {
	if oe, ok := err.(*net.OpError); ok && oe.Err != nil {
		return oe.Err.Error()
	}
	if de, ok := err.(*net.DNSError); ok {
		return de.Err
	}
	return err.Error()
}
