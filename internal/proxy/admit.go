package proxy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"egret.io/egret/internal/http1"
	"egret.io/egret/internal/ipaddr"
	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/route"
	"egret.io/egret/internal/sniff"
)

// The one admission path. Every listener — the explicit HTTP listener's
// forwarded requests and CONNECT tunnels, the transparent listener and the
// SOCKS5 listener — speaks only its own protocol: it reads where the client
// wants to go into a target and hands it to admit, which applies the policy
// they all share, in one order:
//
//	client allow-list and per-client limit → identity (Workloads) →
//	destination → loop check → route → workload policy → deny →
//	workload limits → destination limits and breaker
//
// and, for a direct decision, the addresses to dial: the admission's one
// answer, each address through the loop check and the SSRF guard
// (directAddrs, addrs.go). open (tunnels) and the transport (forwarded
// requests) then dial exactly those, calling nothing back. A rule
// that holds on one listener holds on all; finish writes the one log line
// and the metrics of each.

// target is what a listener learned about a client's destination.
type target struct {
	// hostport is the destination as the client named it: a CONNECT
	// authority, an absolute URL's host, a SOCKS5 address; with defPort
	// set the port may be missing.
	hostport string
	defPort  uint16
	// transparent is set for a redirected connection: orig is where it was
	// going, sniffed what its first bytes name (hostport is unused).
	transparent bool
	orig        netip.AddrPort
	sniffed     sniff.Result
	// via holds the request's Via field values (HTTP), for the loop check.
	via []string
	// tunnel marks a tunnel (it takes a slot of the tunnel limit).
	tunnel bool
	// auth is the request's Proxy-Authorization (HTTP): a workload's
	// service-account token.
	auth string
	// wouldDeny is a report-only denial the listener found before
	// admission (transparent: an SNI check that could not finish); it is
	// logged when admission finds none of its own.
	wouldDeny string
}

// admission is a destination admit let through.
//
// It is the seam between judging and dialling: dec.Addrs are the exact
// addresses the routes and the workload's policy approved, from the one
// lookup they all judged (names), and a direct dial connects to those and
// nothing else — never a second resolution between the decision and the
// dial. nil Addrs mean nothing judged the name by its addresses: admission
// then makes the one lookup (or reuses the routes'), and the SSRF guard
// judges each address; addrs is what a direct decision dials.
type admission struct {
	st   *State
	dest route.Dest // as logged and routed
	dial route.Dest // what to connect to (transparent: the original address)
	dec  route.Decision
	// names is the admission's one lookup of the destination's name,
	// shared by every table that judges it and by the dial.
	names answer
	// addrs are the addresses a direct decision dials (directAddrs): from
	// names or the decision, each allowed by the loop check and the SSRF
	// guard. nil for a decision through a pool.
	addrs []netip.Addr
	// breaker is set when the destination's breaker awaits the outcome
	// (reportDest).
	breaker bool
	// pin is, for a decision through an upstream pool that approved the
	// destination's name by its addresses (route.ReasonResolved, in the
	// routes or the workload's policy), the address the member is asked
	// to reach in place of the name ("ip:port"): the member connects to
	// what was judged, not to its own lookup of the name. Empty when the
	// name itself was approved, or the destination is an address.
	pin string
	// policyAddrs are the addresses the workload's policy approved by
	// address when the routes chose an upstream (policyJudged set).
	policyAddrs  []netip.Addr
	policyJudged bool
	// short is the short name the client gave when dest is the FQDN it
	// was expanded to (shortnames.go).
	short string
	// lease holds the slots admission took; open moves it into the
	// connection, and the end of the request or tunnel releases it.
	lease lease
}

// admit applies the shared policy to a client's request or tunnel. ev
// gets the destination and the decision as they become known (for the
// log line). The admission returned holds the limit slots taken (its
// lease), released by the end of the request or tunnel; a refusal is the
// error to answer with, and holds nothing.
func (s *Server) admit(ctx context.Context, ev *event, tg *target) (*admission, *proxystatus.Error) {
	a := &admission{st: s.state.Load()}
	a.names.s = s
	e := s.admitLease(ctx, ev, tg, a)
	if tg.wouldDeny != "" && ev.dec.WouldDeny == "" {
		ev.dec.WouldDeny = tg.wouldDeny
	}
	if e != nil {
		a.lease.end()
		return nil, e
	}
	return a, nil
}

// admitLease is admit's work; the slots it takes go into a.lease.
func (s *Server) admitLease(ctx context.Context, ev *event, tg *target, a *admission) *proxystatus.Error {
	if !ev.clientAdmitted {
		if e := s.admitClient(ev, &a.lease); e != nil {
			return e
		}
	}
	if s.opts.Workloads != nil && !ev.identified {
		if e := s.identify(ctx, ev, tg.auth); e != nil {
			return e
		}
	}
	if tg.transparent {
		if e := s.selfLoop(ev, tg.orig); e != nil {
			return e
		}
		s.routeTransparent(ctx, ev, a, tg.orig, tg.sniffed)
	} else {
		dest, err := route.ParseDest(tg.hostport, tg.defPort)
		if err != nil {
			return &proxystatus.Error{Type: proxystatus.HTTPRequestError, Detail: "destination: " + proxystatus.Scrub(err.Error())}
		}
		if e := s.shortName(ctx, ev, a, &dest); e != nil {
			return e
		}
		a.dest, a.dial = dest, dest
		ev.dest = dest.String()
		if e := s.loopVia(tg.via); e != nil {
			return e
		}
		if dest.Addr.IsValid() && s.raw.isSelf(netip.AddrPortFrom(dest.Addr, dest.Port)) {
			return s.loopSelf(dest)
		}
		a.dec = a.st.Routes.Decide(ctx, dest, &a.names)
	}
	s.judge(ctx, ev, a)
	if tg.transparent {
		s.pinOriginal(a, tg.orig)
	}
	if a.dec.Action == route.Upstream {
		s.pinUpstream(a, tg)
	}
	a.routedShort()
	ev.dest, ev.dec, ev.decided = a.dest.String(), a.dec, true
	if a.dec.Action == route.Deny {
		return denied(a.dest, a.dec)
	}
	if e := s.admitWorkload(ctx, ev, &a.lease); e != nil {
		return e
	}
	breaker, err := s.admitDest(a.dest, tg.tunnel, &a.lease)
	if err != nil {
		return proxystatus.From(err)
	}
	a.breaker = breaker
	if a.dec.Action == route.Direct {
		addrs, e := s.directAddrs(ctx, a)
		if e != nil {
			if breaker {
				s.reportDest(a.dest, e)
			}
			return e
		}
		a.addrs = addrs
	}
	return nil
}

// pinUpstream sets a.pin for a decision through an upstream pool: when the
// routes or the workload's policy approved the name by its addresses, the
// member is asked for one of the addresses both approve — a transparent
// connection's original address when it is one of them, else the first in
// the answer's order — never for the name, which it would resolve on its
// own (DNS rebinding between egret's judgement and the member's dial).
// When both judged and approve no address in common, the destination is
// denied.
func (s *Server) pinUpstream(a *admission, tg *target) {
	if a.dial.Addr.IsValid() {
		return // an address: the member is asked for it as it is
	}
	var addrs []netip.Addr
	judged := false
	if a.dec.Reason == route.ReasonResolved {
		addrs, judged = a.dec.Addrs, true
	}
	if a.policyJudged {
		if !judged {
			addrs, judged = a.policyAddrs, true
		} else if both, ok := approved(addrs, a.policyAddrs); ok {
			addrs = both
		} else {
			a.dec = unapproved(a.dec, "the gateway's route "+a.dec.Detail()+" and the policy approve no address in common")
			return
		}
	}
	if !judged || len(addrs) == 0 {
		return
	}
	pick := addrs[0]
	if tg.transparent {
		if ip := ipaddr.Plain(tg.orig.Addr()); slices.Contains(addrs, ip) {
			pick = ip
		}
	}
	a.pin = netip.AddrPortFrom(pick, a.dial.Port).String()
}

// admitClient applies the client allow-list and the per-client limit to
// the request or tunnel of ev (whose client is "ip:port"). The client's
// slot goes into l. An address that does not parse is an
// unknown client: refused by an allow-list, and limited as one client.
func (s *Server) admitClient(ev *event, l *lease) *proxystatus.Error {
	ev.clientAdmitted = true
	p := &s.opts.Protection
	if len(p.ClientCIDRs) == 0 && p.Clients == nil {
		return nil
	}
	ip, ok := clientIP(ev.client)
	if len(p.ClientCIDRs) > 0 && !(ok && containsAddr(p.ClientCIDRs, ip)) {
		s.countPolicy("client")
		return &proxystatus.Error{Type: proxystatus.HTTPRequestDenied, Detail: fmt.Sprintf("client %s is not on this proxy's client allow-list", ev.client)}
	}
	if p.Clients != nil {
		key := "unknown"
		if ok {
			key = ip.String()
		}
		rel, err := p.Clients.Acquire(key)
		if err != nil {
			return s.limitErr(err)
		}
		l.hold(rel)
	}
	return nil
}

// clientIP is the address of a client "ip:port", without an IPv4-mapped
// prefix or a zone.
func clientIP(client string) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(client)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// loopVia refuses a request that already passed through this proxy.
func (s *Server) loopVia(via []string) *proxystatus.Error {
	for _, v := range via {
		if http1.ViaHas(v, s.opts.Via) {
			return &proxystatus.Error{Type: proxystatus.ProxyLoopDetected, Detail: "this request has already passed through " + s.opts.Via}
		}
	}
	return nil
}

// selfLoop refuses a redirected connection whose original destination is
// one of egret's own listeners.
func (s *Server) selfLoop(ev *event, orig netip.AddrPort) *proxystatus.Error {
	if !s.raw.isSelf(orig) {
		return nil
	}
	s.log.Warn("transparent: refused a connection to egret itself (loop guard)", "client", ev.client, logOrigDst, orig.String())
	return &proxystatus.Error{Type: proxystatus.ProxyLoopDetected,
		Detail: orig.String() + " is egret's own listener: the connection was not redirected, or was redirected back to egret"}
}

func (s *Server) loopSelf(dest route.Dest) *proxystatus.Error {
	return &proxystatus.Error{Type: proxystatus.ProxyLoopDetected, Detail: dest.String() + " is one of egret's own listeners"}
}

// observeSetup records how long a tunnel took to be established.
func (s *Server) observeSetup(ev *event) {
	if s.m != nil {
		s.setupObserver(ev.kind, ev.dec.Action).Observe(time.Since(ev.start).Seconds())
	}
}

// setupObserver returns the duration histogram's child for a set-up of
// kind decided as action, looked up in the vector once per pair.
func (s *Server) setupObserver(kind string, action route.Action) prometheus.Observer {
	a := int(action)
	for i, k := range tunnelKinds {
		if k != kind || a < 0 || a >= len(s.setupObservers[i]) {
			continue
		}
		if o := s.setupObservers[i][a].Load(); o != nil {
			return *o
		}
		o := s.m.Duration.WithLabelValues(kind, action.String())
		s.setupObservers[i][a].Store(&o)
		return o
	}
	return s.m.Duration.WithLabelValues(kind, action.String())
}

// scrubHost is a client's destination text fit for the log line before
// it has been parsed: without user information.
func scrubHost(h string) string {
	if i := strings.LastIndexByte(h, '@'); i >= 0 {
		return h[i+1:]
	}
	return h
}
