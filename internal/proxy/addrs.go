package proxy

import (
	"context"
	"net"
	"net/netip"

	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/route"
)

// What a direct decision dials, settled in admission: the addresses come
// from the admission's one answer (the lookup the routes and the
// workload's policy judged, made at most once), and each has passed the
// loop check and the SSRF guard before admission lets the request or
// tunnel through. The dial (dial.go for tunnels, the transport for
// forwarded requests) connects to exactly these and asks nobody again:
// judge what you dial.

// answer is one lookup, made at most once: the first name asked is
// resolved and remembered, and every later question about it gets the same
// addresses, so what is judged and what is dialled come from one answer
// (a name that answers differently a moment later — DNS rebinding — is not
// asked again). It satisfies route.Resolver.
type answer struct {
	s     *Server
	host  string
	addrs []netip.Addr
	err   error
	done  bool
}

// LookupNetIP returns the remembered answer for host, resolving it the
// first time (through the server's resolver, counted). Another name (there
// is none in one admission) is resolved without being remembered.
func (n *answer) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if n.done && host == n.host {
		return n.addrs, n.err
	}
	addrs, err := n.s.resolve(ctx, host)
	if !n.done {
		n.host, n.addrs, n.err, n.done = host, addrs, err, true
	}
	return addrs, err
}

// directAddrs returns the addresses a direct decision of a dials, in
// order: the address of an IP literal (or a transparent connection's
// original address), else the addresses the decision approved
// (route.Decision.Addrs: the judged answer), else — when nothing judged
// the name by its addresses — the admission's one answer for it (a
// lookup only if the routes made none). A lookup that failed refuses the
// destination; it is not retried. Every address is then checked by the
// loop check and the SSRF guard (gateway): only the addresses both allow
// are returned, and when none is, the refusal names the first address and
// why. The lookup is bounded by the resolver's own timeout and by ctx
// (the client's: it ends when the client leaves).
func (s *Server) directAddrs(ctx context.Context, a *admission) ([]netip.Addr, *proxystatus.Error) {
	dest, dec := a.dial, a.dec
	addrs := dec.Addrs
	switch {
	case dest.Addr.IsValid():
		addrs = []netip.Addr{dest.Addr}
	case len(addrs) == 0 && dec.ResolveErr != nil:
		return nil, lookupErr(dest.Host, dec.ResolveErr)
	case len(addrs) == 0:
		var err error
		addrs, err = a.names.LookupNetIP(ctx, "ip", dest.Host)
		if err != nil {
			return nil, lookupErr(dest.Host, err)
		}
		if len(addrs) == 0 {
			return nil, &proxystatus.Error{Type: proxystatus.DestinationNotFound, Detail: "resolve " + dest.Host + ": no addresses"}
		}
	}
	ok, refused := s.dialable(a.st, dest, dec, addrs)
	if len(ok) == 0 {
		return nil, refused
	}
	return ok, nil
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
