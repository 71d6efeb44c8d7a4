package doctor

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"sync"
)

// form is one way of naming an internal destination: the name as given,
// its FQDN, its ClusterIP.
type form struct {
	label string // "name", "FQDN", "ClusterIP"
	host  string
}

// forms resolves t and returns its short name, FQDN and address (those
// that differ), with the lookup.
func (s *state) forms(ctx context.Context, t target) ([]form, lookupResult) {
	res := s.lk.lookup(ctx, t.host)
	if _, err := netip.ParseAddr(t.host); err == nil {
		return []form{{"IP", t.host}}, res
	}
	fs := []form{{"name", t.host}}
	if res.err != nil {
		return fs, res
	}
	if f := res.fqdn(); f != t.host {
		fs = append(fs, form{"FQDN", f})
	}
	return append(fs, form{"ClusterIP", res.addrs[0].String()}), res
}

// directCheck reaches an internal destination directly by each of its
// forms: TCP connect to the port, and the URL fetched when one was given.
func (s *state) directCheck(t target) Check {
	return Check{Name: "direct", Target: t.raw, Run: func(ctx context.Context) Result {
		fs, res := s.forms(ctx, t)
		var r Result
		if res.err != nil {
			f := failureOf("resolve "+t.host, res.err)
			r.Status = Fail
			r.Summary = fmt.Sprintf("%s cannot be reached: %s (see the dns check)", t.host, f.what())
			r.Details = []string{f.Error()}
			r.Advice = "Fix name resolution first; the dns check for " + t.host + " says how."
			return r
		}
		type out struct {
			line string
			f    *failure
		}
		outs := make([]out, len(fs))
		var wg sync.WaitGroup
		for i, fm := range fs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i].line, outs[i].f = s.reach(ctx, t, fm, res.addrs)
			}()
		}
		wg.Wait()
		var ok, bad []string
		var first *failure
		for i, o := range outs {
			r.Details = append(r.Details, o.line)
			if o.f != nil {
				bad = append(bad, fs[i].host)
				if first == nil {
					first = o.f
				}
			} else {
				ok = append(ok, fs[i].host)
			}
		}
		if first == nil {
			r.Status = Pass
			r.Summary = fmt.Sprintf("reached %s directly on port %d", joinAnd(ok), t.port)
			return r
		}
		r.Status = Fail
		r.Summary = fmt.Sprintf("%s: %s on port %d", joinAnd(bad), first.what(), t.port)
		switch first.kind {
		case fkRefused:
			r.Advice = fmt.Sprintf("Nothing accepts port %d there: a wrong port, or a Service without ready endpoints (kube-proxy rejects those); check kubectl get endpointslices for the Service. A NetworkPolicy with a reject action looks the same.", t.port)
		case fkTimeout:
			r.Advice = "Packets are dropped on the way: a NetworkPolicy (this pod's egress or the target's ingress) or a missing route. Allow this pod to reach the Service's pods on their target port."
		case fkUnreachable:
			r.Advice = "No route from this pod to that address: check the pod network and the address."
		case fkTLS:
			r.Advice = "The port answers, but not with TLS the doctor can speak: check the URL's scheme."
		default:
			r.Advice = "Check the destination and the network between this pod and it."
		}
		return r
	}}
}

// reach connects to one form of t (the resolved addresses are reused for
// the name forms, so all forms test the same endpoints) and, when t is a
// URL, fetches it with that host.
func (s *state) reach(ctx context.Context, t target, fm form, addrs []netip.Addr) (string, *failure) {
	var as []netip.Addr
	if a, err := netip.ParseAddr(fm.host); err == nil {
		as = []netip.Addr{a}
	} else {
		as = addrs
	}
	c, ap, f := s.dialAddrs(ctx, as, t.port)
	if f != nil {
		return fmt.Sprintf("%s %s: %s", fm.label, fm.host, f.Error()), f
	}
	defer c.Close()
	line := fmt.Sprintf("%s %s: TCP connect to %s ok", fm.label, fm.host, ap)
	if t.url == nil {
		return line, nil
	}
	u, _ := url.Parse(t.urlFor(fm.host))
	a, f := s.getOver(ctx, c, nil, u, false)
	if f != nil {
		return line + "; " + f.Error(), f
	}
	return line + "; GET " + u.String() + " answered " + strings.TrimSpace(a.status), nil
}
