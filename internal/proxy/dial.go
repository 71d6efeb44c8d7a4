package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
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

// open connects an admitted tunnel as its decision says: directly (to
// the addresses routing resolved, through the SSRF guard and the loop
// check) or through the decision's pool, which never falls back to direct.
// It tells the destination's breaker the outcome and records the member
// and the set-up time in ev. The connection takes over the admission's
// lease; a failure releases it.
func (s *Server) open(ctx context.Context, ev *event, a *admission) (*Conn, error) {
	start := time.Now()
	c, err := s.dial(ctx, a.st, a.dial, a.dec, a.pin)
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

// dial connects to dest as dec says; through a pool, the member is asked
// for pin ("ip:port", the address the decision approved) when it is set,
// else for dest.
func (s *Server) dial(ctx context.Context, st *State, dest route.Dest, dec route.Decision, pin string) (*Conn, error) {
	switch dec.Action {
	case route.Direct:
		c, err := s.dialDirect(ctx, st, dest, dec)
		if err != nil {
			return nil, err
		}
		return &Conn{Conn: c}, nil
	case route.Upstream:
	default:
		return nil, denied(dest, dec)
	}
	p := st.pool(dec.Pool)
	if p == nil {
		return nil, &proxystatus.Error{Type: proxystatus.ProxyConfigurationErr, Detail: fmt.Sprintf("route names pool %q, which does not exist", dec.Pool)}
	}
	start := time.Now()
	target := dest.String()
	if pin != "" {
		target = pin
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

// dialDirect connects to dest — the transport dials (DialAddrsWithin), trying
// its addresses in order within the dial timeout: the address of an IP literal (or a transparent
// connection's original address), else the addresses dec approved
// (route.Decision.Addrs: the judged answer, never resolved again), else —
// when nothing judged the name by its addresses — one lookup's. A lookup
// the decision made that failed fails the dial; it is not retried. Every
// address is checked right before it is dialled by the SSRF guard
// (gateway) and the loop check: only the addresses both allow are tried,
// and when none is, the refusal names the first address and why.
func (s *Server) dialDirect(ctx context.Context, st *State, dest route.Dest, dec route.Decision) (net.Conn, error) {
	addrs := dec.Addrs
	timeout := s.opts.Timeouts.Dial
	switch {
	case dest.Addr.IsValid():
		addrs = []netip.Addr{dest.Addr}
	case len(addrs) == 0 && dec.ResolveErr != nil:
		return nil, lookupErr(dest.Host, dec.ResolveErr)
	case len(addrs) == 0:
		// The lookup and the connect share the dial timeout.
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
			timeout = 0
		}
		var err error
		addrs, err = s.lookup(ctx, dest.Host)
		if err != nil {
			return nil, err
		}
	}
	addrs, refused := s.dialable(st, dest, dec, addrs)
	if len(addrs) == 0 {
		return nil, refused
	}
	// The usual case, addresses at hand: the transport bounds the connect
	// without a timer (DialAddrsWithin).
	return s.tr.DialAddrsWithin(ctx, timeout, dest.String(), addrs, dest.Port)
}

// dialable returns the addresses of dest that may be dialled: not egret's
// own listeners, and allowed by the SSRF guard — where the CIDRs of the
// direct rule that decided are the operator's explicit allow. It returns
// the refusal of the first address when none may be.
func (s *Server) dialable(st *State, dest route.Dest, dec route.Decision, addrs []netip.Addr) ([]netip.Addr, *proxystatus.Error) {
	g := s.opts.Protection.Guard
	var exempt []netip.Prefix
	if g != nil && dec.Action == route.Direct && dec.Rule >= 0 {
		if rules := st.Routes.Rules(); dec.Rule < len(rules) {
			exempt = rules[dec.Rule].Match.CIDRs
		}
	}
	var refused *proxystatus.Error
	ok := addrs[:0:0]
	for i, a := range addrs {
		var e *proxystatus.Error
		switch {
		case s.raw.isSelf(netip.AddrPortFrom(a.WithZone("").Unmap(), dest.Port)):
			e = s.loopSelf(dest)
		case g != nil:
			e = s.guard(dest, a, exempt)
		}
		if e == nil {
			if len(ok) == 0 && i == len(addrs)-1 {
				return addrs[i:], nil // the usual case: one address, allowed
			}
			ok = append(ok, a)
			continue
		}
		if refused == nil {
			refused = e
		}
	}
	if len(ok) == 0 && refused != nil && refused.Type == proxystatus.DestinationIPProhibit {
		s.countPolicy("destination_ip")
	}
	return ok, refused
}

// resolve looks host up through the resolver, counting the result.
func (s *Server) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, err := s.opts.Resolver.LookupNetIP(ctx, "ip", host)
	if s.m != nil {
		if err != nil {
			s.dnsErr.Inc()
		} else {
			s.dnsOK.Inc()
		}
	}
	return addrs, err
}

// lookup resolves host (resolve) for a dial: the addresses, or the error
// to answer with.
func (s *Server) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, err := s.resolve(ctx, host)
	if err != nil {
		return nil, lookupErr(host, err)
	}
	if len(addrs) == 0 {
		return nil, &proxystatus.Error{Type: proxystatus.DestinationNotFound, Detail: "resolve " + host + ": no addresses"}
	}
	return addrs, nil
}

// lookupErr is the answer to a failed lookup of host.
func lookupErr(host string, err error) *proxystatus.Error {
	pe := proxystatus.From(err)
	out := *pe
	out.Detail = "resolve " + host + ": " + errText(err)
	if out.Type == proxystatus.ProxyInternalError {
		out.Type = proxystatus.DNSError
	}
	return &out
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
