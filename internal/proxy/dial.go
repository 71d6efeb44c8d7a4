package proxy

import (
	"context"
	"fmt"
	"net"
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

	// lease holds the admission's slots, the client connection's slot
	// once the connection is a tunnel's, and the member's connection
	// count.
	lease lease
}

// Release gives back what the connection holds (its lease). It is called
// by Close and when a relayed tunnel ends; calling it again does nothing.
func (c *Conn) Release() { c.lease.end() }

// Close closes the connection and releases it.
func (c *Conn) Close() error {
	c.Release()
	return c.Conn.Close()
}

// open connects an admitted tunnel as its decision says: directly to the
// addresses admission settled (admission.addrs: the judged answer, each
// through the SSRF guard and the loop check), which the transport dials
// in order within the dial timeout, or through the decision's pool, which
// never falls back to direct. It tells the destination's breaker the
// outcome and records the member and the set-up time in ev. The
// connection takes over the admission's lease; a failure releases it.
func (s *Server) open(ctx context.Context, ev *event, a *admission) (*Conn, error) {
	start := time.Now()
	c, err := s.dial(ctx, a)
	if a.breaker {
		s.reportDest(a.dest, err)
	}
	if err != nil {
		a.lease.end()
		return nil, err
	}
	c.lease.take(&a.lease)
	c.Connect = time.Since(start)
	ev.connect = c.Connect
	if c.Member != nil {
		ev.member = c.Member.Name
	}
	s.observeSetup(ev)
	return c, nil
}

// dial connects to a's destination as its decision says; through a pool,
// the member is asked for a.pin ("ip:port", the address the decision
// approved) when it is set, else for the destination.
func (s *Server) dial(ctx context.Context, a *admission) (*Conn, error) {
	dest, dec := a.dial, a.dec
	switch dec.Action {
	case route.Direct:
		// The transport bounds the connect without a timer of its own
		// (DialAddrsWithin).
		c, err := s.tr.DialAddrsWithin(ctx, s.opts.Timeouts.Dial, dest.String(), a.addrs, dest.Port)
		if err != nil {
			return nil, err
		}
		return &Conn{Conn: c}, nil
	case route.Upstream:
	default:
		return nil, denied(dest, dec)
	}
	p := a.st.pool(dec.Pool)
	if p == nil {
		return nil, &proxystatus.Error{Type: proxystatus.ProxyConfigurationErr, Detail: fmt.Sprintf("route names pool %q, which does not exist", dec.Pool)}
	}
	start := time.Now()
	target := dest.String()
	if a.pin != "" {
		target = a.pin
	}
	t, err := s.tr.DialTunnel(ctx, p, target)
	if err != nil {
		if pe := proxystatus.From(err); pe.Type == proxystatus.PoolUnavailable {
			s.countUpstreamErr(p.Name, err)
		}
		return nil, err
	}
	if s.m != nil {
		s.m.UpstreamConnect.WithLabelValues(p.Name).Observe(time.Since(start).Seconds())
	}
	c := &Conn{Conn: t.Conn, Prefix: t.Prefix, Member: t.Member}
	c.lease.hold(t.Member.Acquire())
	return c, nil
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
