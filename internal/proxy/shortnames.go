package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"egret.io/egret/internal/proxystatus"
	"egret.io/egret/internal/route"
)

// Short names at the gateway (issue 24, item 6). A pod that calls
// http://payments:8080 or payments.shop with HTTP_PROXY set sends the short
// name to the gateway, whose resolver is not the pod's: resolved there it
// names the gateway's own namespace's Service, or nothing. The gateway
// knows the calling pod's namespace (Workloads), so it expands the name the
// way the pod's resolver would — the search path <ns>.svc.<domain>,
// svc.<domain>, <domain> — and either routes the FQDN it finds (the
// operator turned it on: EGRET_SHORT_NAMES=route) or refuses with 502 and
// a Proxy-Status that names the fix. A routed short name is judged as its
// FQDN by the routes and the workload's policy, and the addresses of the
// one lookup that found it are what is dialled (admission.names): it is
// never resolved again. The transparent listener is not concerned: it
// dials the address the client connected to.

// logShortName is the access log field of a routed short name (dest is
// the FQDN it was expanded to).
const logShortName = "short_name"

// ShortNames is how a gateway treats destinations named by short names.
type ShortNames struct {
	// On marks a gateway: names are resolved by a resolver that is not
	// the client's. Off (a sidecar shares its pod's resolver), short
	// names are resolved like any other.
	On bool
	// Route routes a short name as the cluster-internal FQDN the pod's
	// resolver finds; false refuses it (502) with the fix.
	Route bool
	// Domain is the cluster DNS domain; "" means cluster.local.
	Domain string
}

// namespaces is what a Workloads may also tell: whether a namespace
// exists (has pods), so that "name.ns" is known to be a Service's name.
type namespaces interface {
	HasNamespace(ns string) bool
}

func (sn *ShortNames) domain() string {
	if d := strings.Trim(strings.ToLower(sn.Domain), "."); d != "" {
		return d
	}
	return "cluster.local"
}

// expansions returns the names a pod of namespace ns ("" unknown) tries
// for host before host itself (its search path, ndots 5), or nil when
// host is not a short name: a single label (but localhost), "name.ns"
// where ns is a namespace known to the gateway (known may be nil), or
// "name.ns.svc". A name under the cluster domain is already whole.
func (sn *ShortNames) expansions(host, ns string, known func(string) bool) []string {
	d := sn.domain()
	if host == "" || host == "localhost" || strings.HasSuffix(host, ".localhost") || host == d || strings.HasSuffix(host, "."+d) {
		return nil
	}
	switch labels := strings.Count(host, ".") + 1; {
	case labels == 1:
	case labels == 2 && known != nil && known(host[strings.IndexByte(host, '.')+1:]):
	case labels == 3 && strings.HasSuffix(host, ".svc"):
	default:
		return nil
	}
	out := make([]string, 0, 3)
	if ns != "" {
		out = append(out, host+"."+ns+".svc."+d)
	}
	return append(out, host+".svc."+d, host+"."+d)
}

// likely is the FQDN a Service called host is found at from namespace ns
// (no lookup): the name to tell the client to use.
func (sn *ShortNames) likely(host, ns string) string {
	d := sn.domain()
	switch strings.Count(host, ".") {
	case 0:
		if ns == "" {
			ns = "NAMESPACE"
		}
		return host + "." + ns + ".svc." + d
	case 1:
		return host + ".svc." + d
	}
	return host + "." + d
}

// shortName applies ShortNames to dest, a client's destination, before
// it is judged: nil when dest is not a short name, or when it is routed —
// then dest is its FQDN and a.names holds the answer that found it. A
// refusal is the error to answer with.
func (s *Server) shortName(ctx context.Context, ev *event, a *admission, dest *route.Dest) *proxystatus.Error {
	sn := &s.opts.ShortNames
	if !sn.On || dest.Addr.IsValid() {
		return nil
	}
	ns := ev.wl.Namespace // "" when the client is not identified
	var known func(string) bool
	if k, ok := s.opts.Workloads.(namespaces); ok {
		known = k.HasNamespace
	}
	names := sn.expansions(dest.Host, ns, known)
	if names == nil {
		return nil
	}
	host := dest.Host
	if !sn.Route {
		fqdn := sn.likely(host, ns)
		return s.refuseShort(ev, host, ns, fqdn, "which this gateway does not route (EGRET_SHORT_NAMES=refuse)")
	}
	if strings.IndexByte(host, '.') < 0 && ns == "" {
		return s.refuseShort(ev, host, ns, sn.likely(host, ns), "but the gateway does not know the calling pod's namespace (EGRET_POLICY off, or the client is not a known pod)")
	}
	for _, name := range names {
		addrs, err := s.resolve(ctx, name)
		if err == nil && len(addrs) > 0 {
			a.names.host, a.names.addrs, a.names.err, a.names.done = name, addrs, nil, true
			a.short, ev.shortName = host, host
			dest.Host = name
			return nil
		}
		var de *net.DNSError
		if err != nil && !(errors.As(err, &de) && de.IsNotFound) {
			return lookupErr(name, err) // fail closed: the pod would not have gone on either
		}
	}
	return s.refuseShort(ev, host, ns, names[0], "and none of "+strings.Join(names, ", ")+" resolves at the gateway")
}

// refuseShort is the 502 for a short name the gateway does not serve, and
// its log line (at most one a second), both naming the fix.
func (s *Server) refuseShort(ev *event, host, ns, fqdn, why string) *proxystatus.Error {
	fix := "call it " + fqdn + " (NO_PROXY's ." + s.opts.ShortNames.domain() + " entry sends it direct) or add " + host + " to NO_PROXY, or use sidecar mode"
	from := ""
	if ns != "" {
		from = " from namespace " + ns
	}
	if n, ok := s.shortLog.allow(time.Now()); ok {
		s.log.Warn("short name refused: it names a cluster Service only the pod's resolver expands", "client", ev.client,
			"namespace", ns, "destination", host, "fqdn", fqdn, "fix", fix, "suppressed", n)
	}
	return &proxystatus.Error{Type: proxystatus.DestinationNotFound, Status: 502,
		Detail: host + " is a short name" + from + " for " + fqdn + ", " + why + ": " + fix}
}

// routedShort keeps a routed short name's dial on the addresses that
// found it (called once the routes and the policy decided): a direct
// decision that judged no addresses gets them, and a pool's member is
// asked for one of them, never for the FQDN.
func (a *admission) routedShort() {
	if a.short == "" || len(a.names.addrs) == 0 {
		return
	}
	switch a.dec.Action {
	case route.Direct:
		if a.dec.Addrs == nil {
			a.dec.Addrs = a.names.addrs
		}
	case route.Upstream:
		if a.pin == "" {
			a.pin = netip.AddrPortFrom(a.names.addrs[0], a.dial.Port).String()
		}
	}
}

// everySecond lets one log line through a second, counting the others.
type everySecond struct {
	mu      sync.Mutex
	next    time.Time
	dropped int
}

// allow reports whether to log now, and how many lines were held back
// since the last one.
func (e *everySecond) allow(now time.Time) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if now.Before(e.next) {
		e.dropped++
		return "", false
	}
	n := e.dropped
	e.next, e.dropped = now.Add(time.Second), 0
	return strconv.Itoa(n), true
}
