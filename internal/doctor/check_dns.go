package doctor

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// dnsRole is why a name matters.
type dnsRole int

const (
	roleInternal dnsRole = iota + 1 // a cluster destination
	roleExternal                    // the echo server outside
	roleProxy                       // a proxy the clients use
)

// dnsChecks resolves every name the runbook uses, as the application
// would (the search list from resolv.conf applied).
func (s *state) dnsChecks() []Check {
	type item struct {
		host string
		role dnsRole
		from string
	}
	var items []item
	seen := map[string]bool{}
	add := func(host string, role dnsRole, from string) {
		host = strings.ToLower(host)
		if _, err := netip.ParseAddr(host); err == nil || seen[host] {
			return
		}
		seen[host] = true
		items = append(items, item{host, role, from})
	}
	for _, t := range s.internal {
		add(t.host, roleInternal, "")
	}
	if s.echo != nil {
		add(s.echo.Hostname(), roleExternal, "")
	}
	for _, scheme := range []string{"http", "https"} {
		for _, p := range s.proxies(scheme) {
			if p.url != nil && !strings.HasPrefix(p.url.Scheme, "socks") {
				add(p.url.Hostname(), roleProxy, p.source())
			}
		}
	}
	checks := make([]Check, 0, len(items))
	for _, it := range items {
		checks = append(checks, Check{Name: "dns", Target: it.host, Run: func(ctx context.Context) Result {
			return s.dnsResult(ctx, it.host, it.role, it.from)
		}})
	}
	return checks
}

func (s *state) dnsResult(ctx context.Context, host string, role dnsRole, from string) Result {
	res := s.lk.lookup(ctx, host)
	var r Result
	if s.rcErr != nil {
		r.Details = append(r.Details, s.rcErr.Error()+" (no search list applied)")
	} else {
		r.Details = append(r.Details, fmt.Sprintf("resolv.conf: nameserver %s; search %s; ndots %d",
			orDefault(strings.Join(s.rc.nameservers(), " "), "(none)"), orDefault(strings.Join(s.rc.Search, " "), "(none)"), s.rc.Ndots))
	}
	if len(res.tried) > 0 {
		r.Details = append(r.Details, "asked: "+strings.Join(res.tried, " "))
	}
	if res.err == nil {
		r.Status = Pass
		r.Summary = fmt.Sprintf("%s resolves to %s", host, addrList(res.addrs))
		if res.fqdn() != host {
			r.Summary += " (as " + res.fqdn() + ")"
		}
		return r
	}
	f := failureOf("resolve "+host, res.err)
	r.Details = append(r.Details, f.Error())
	ns := orDefault(strings.Join(s.rc.nameservers(), ", "), "the cluster DNS")
	dnsDown := f.kind == fkDNSTimeout || f.kind == fkDNS || f.kind == fkTimeout || f.kind == fkRefused || f.kind == fkOther
	switch role {
	case roleInternal:
		r.Status = Fail
		if dnsDown {
			r.Summary = fmt.Sprintf("no DNS answer for %s: %s", host, shortErr(res.err))
			r.Advice = "Let DNS through: the pod's NetworkPolicy must allow UDP and TCP port 53 to " + ns + " (kube-dns/CoreDNS in kube-system), and CoreDNS must be running."
		} else {
			r.Summary = fmt.Sprintf("%s does not exist in the cluster DNS", host)
			r.Advice = "Check the Service name and namespace (kubectl get svc -A); a short name resolves only from the Service's own namespace, use <name>.<namespace>.svc elsewhere."
		}
	case roleProxy:
		r.Status = Fail
		r.Summary = fmt.Sprintf("the proxy host %s (from %s) does not resolve: %s", host, from, f.what())
		r.Advice = "Fix the proxy URL in " + from + " (a Service is <name>.<namespace>[.svc]); if DNS itself fails, allow UDP and TCP 53 to " + ns + "."
	default:
		r.Status = Warn
		r.Summary = fmt.Sprintf("this pod cannot resolve %s (%s)", host, f.what())
		r.Advice = "Fine when it is reached only through the proxy, which resolves names itself; clients that go direct, and egret's CIDR rules for names, need the name to resolve here."
	}
	return r
}
