package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"

	"egret.io/egret/internal/ipaddr"
	"egret.io/egret/internal/limit"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/resolve"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/upstream"
)

// Protection is the gateway's hardening and the limits. The zero value
// protects nothing and costs nothing on the request path.
type Protection struct {
	// ClientCIDRs, when set, are the only client addresses served; others
	// get 403.
	ClientCIDRs []netip.Prefix
	// Guard, when set, refuses direct connections to the addresses it
	// prohibits (SSRF): checked on each address dialled.
	Guard *resolve.Guard
	// Breakers, when set, fail requests to a destination fast after
	// consecutive connection failures.
	Breakers *limit.Breakers
	// Destinations, when set, limits each destination host's request rate
	// and concurrency.
	Destinations *limit.Destinations
	// Clients, when set, limits each client's requests and tunnels in
	// flight.
	Clients *limit.Clients
	// ClientConns, when set, limits each client's open connections
	// (idle ones included); a client over it is refused as it connects.
	ClientConns *limit.Clients
	// Tunnels, when set, bounds the tunnels open at once.
	Tunnels *limit.Counter
}

// admitDest applies the breaker and the destination limits before
// connecting to dest; tunnel also takes a slot of the tunnel limit. The
// slots are added to l (on a refusal, l releases nothing of them). It reports whether the breaker was consulted
// (the outcome must then be reported with reportDest).
func (s *Server) admitDest(dest route.Dest, tunnel bool, l *lease) (bool, error) {
	p := &s.opts.Protection
	if tunnel && p.Tunnels != nil {
		r, err := p.Tunnels.Acquire()
		if err != nil {
			return false, s.limitErr(err)
		}
		l.hold(r)
	}
	if p.Destinations != nil {
		r, err := p.Destinations.Acquire(dest.Host)
		if err != nil {
			l.end()
			return false, s.limitErr(err)
		}
		l.hold(r)
	}
	if p.Breakers != nil {
		if err := p.Breakers.Allow(dest.String()); err != nil {
			l.end()
			return false, s.limitErr(err)
		}
		return true, nil
	}
	return false, nil
}

// reportDest tells the breaker how connecting to dest went: a failure
// counts only when it is the destination's (not a deny, a limit, a dead
// pool or a failing member).
func (s *Server) reportDest(dest route.Dest, err error) {
	b := s.opts.Protection.Breakers
	if b == nil {
		return
	}
	if err == nil {
		b.Report(dest.String(), true, "")
		return
	}
	if destFault(err) {
		b.Report(dest.String(), false, string(proxystatus.From(err).Type))
		return
	}
	b.Cancel(dest.String())
}

// destFault reports whether a failure to reach a destination was the
// destination's: it refused or timed out, or an upstream said so.
func destFault(err error) bool {
	var r *upstream.Refusal
	if errors.As(err, &r) {
		return r.DestinationFault
	}
	pe := proxystatus.From(err)
	switch pe.Type {
	case proxystatus.ConnectionReadTimeout:
		return true // also through a member: it answers CONNECT after reaching the destination
	case proxystatus.ConnectionRefused, proxystatus.ConnectionTimeout, proxystatus.DestinationIPUnroute,
		proxystatus.DestinationUnavailable, proxystatus.ConnectionTerminated, proxystatus.HTTPResponseIncomplete:
		return pe.Upstream == ""
	}
	return false
}

func (s *Server) limitErr(err error) *proxystatus.Error {
	var le *limit.Error
	var oe *limit.OpenError
	switch {
	case errors.As(err, &le):
		s.countLimit(string(le.Kind))
		st := http.StatusServiceUnavailable
		if le.Kind == limit.KindRate || le.Kind == limit.KindClientConcurrency {
			st = http.StatusTooManyRequests
		}
		return &proxystatus.Error{Type: proxystatus.ConnectionLimitReached, Status: st, Detail: le.Error(), Err: err}
	case errors.As(err, &oe):
		s.countLimit(string(limit.KindBreaker))
		return &proxystatus.Error{Type: proxystatus.DestinationUnavailable, Status: http.StatusServiceUnavailable, Detail: oe.Error(), Err: err}
	}
	return proxystatus.From(err)
}

func (s *Server) countLimit(kind string) {
	if s.m != nil {
		s.m.LimitRejections.WithLabelValues(kind).Inc()
	}
}

func (s *Server) countPolicy(policy string) {
	if s.m != nil {
		s.m.PolicyDenials.WithLabelValues(policy).Inc()
	}
}

// guard returns the 403 when the SSRF guard refuses a, an address of dest.
// exempt are prefixes the operator's deciding direct rule names: they open
// what they cover, as an allow does, except the gateway's own addresses.
func (s *Server) guard(dest route.Dest, a netip.Addr, exempt []netip.Prefix) *proxystatus.Error {
	g := s.opts.Protection.Guard
	r := g.Check(a)
	if r == nil {
		return nil
	}
	if ipaddr.Contains(exempt, a) && !g.Owns(a) {
		return nil
	}
	if s.m != nil {
		s.m.GuardRefusals.WithLabelValues(r.Class.String()).Inc()
	}
	what := dest.Host + " is"
	if !dest.Addr.IsValid() {
		what = dest.Host + " resolves to " + a.String() + ","
	}
	hint := "EGRET_SSRF_ALLOW_CIDRS opens a range"
	if r.Class == resolve.ClassOwnAddress {
		own := r.Range.Addr()
		hint = "only an EGRET_SSRF_ALLOW_CIDRS entry of exactly " + netip.PrefixFrom(own, own.BitLen()).String() + " opens it"
	}
	return &proxystatus.Error{Type: proxystatus.DestinationIPProhibit,
		Detail: fmt.Sprintf("%s %s, which this gateway does not connect to (%s)", what, r, hint)}
}

// reportDest tells the destination's breaker the outcome, once.
func (x *exchange) reportDest(err error) {
	if x.breaker {
		x.breaker = false
		x.cc.s.reportDest(x.dest, err)
	}
}
