package doctor

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"egret.io/egret/internal/proxystatus"
)

// forbiddenChecks prove the fourth path of the runbook for each
// --forbidden URL: the destination is blocked, not merely unused — a
// direct request must fail at the network (a NetworkPolicy or firewall
// drops or rejects it, or a transparent proxy refuses it) and a request
// through each proxy the clients would use must be refused by the proxy's
// policy. A forbidden destination that answers on either path fails.
func (s *state) forbiddenChecks() []Check {
	var out []Check
	for _, u := range s.forbidden {
		out = append(out, Check{Name: "forbidden", Target: u.String(), Run: func(ctx context.Context) Result {
			return s.forbiddenResult(ctx, u)
		}})
	}
	return out
}

// attempt is one way of reaching a forbidden destination and how it ended.
type attempt struct {
	way     string // "direct over IPv4", "through http://gw:3128"
	reached bool   // the destination (or a tunnel to it) answered: not blocked
	blocked bool   // refused by policy or dropped/rejected by the network
	what    string // what happened, in words
}

func (s *state) forbiddenResult(ctx context.Context, u *url.URL) Result {
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		directs  []attempt
		vias     []attempt
		dnsBlock string
	)
	res := s.lk.lookup(ctx, u.Hostname())
	fams := []string{""}
	if res.err == nil {
		present := map[string]bool{}
		for _, a := range res.addrs {
			present[addrFamily(a)] = true
		}
		switch {
		case s.o.Family != "":
			fams = []string{s.o.Family}
		case present["4"] && present["6"]:
			fams = []string{"4", "6"}
		}
	} else {
		dnsBlock = failureOf("resolve "+u.Hostname(), res.err).Error()
	}
	if res.err == nil {
		for _, fam := range fams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := s.forbiddenDirect(ctx, u, fam)
				mu.Lock()
				directs = append(directs, a)
				mu.Unlock()
			}()
		}
	}
	ps := s.proxies(u.Scheme)
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := s.forbiddenVia(ctx, u, p)
			mu.Lock()
			vias = append(vias, a)
			mu.Unlock()
		}()
	}
	wg.Wait()

	var r Result
	if dnsBlock != "" {
		r.Details = append(r.Details, "direct: "+dnsBlock+" — no address to connect to here (an IP literal could still get out)")
	}
	for _, group := range [][]attempt{directs, vias} {
		for _, a := range group {
			r.Details = append(r.Details, a.way+": "+a.what)
		}
	}
	var direct, proxied []string
	if rs, err := s.explain(u.String()); err == nil {
		g := group(rs)
		direct, proxied = clientsOf(g.direct), clientsOf(g.proxy)
		if len(direct) > 0 {
			r.Details = append(r.Details, "runtimes that go direct to it (NO_PROXY or no proxy variable): "+joinAnd(direct))
		}
		if len(proxied) > 0 {
			r.Details = append(r.Details, "runtimes that send it to the proxy: "+joinAnd(proxied))
		}
	}

	var reachedDirect, reachedVia, open []string
	for _, a := range directs {
		if a.reached {
			reachedDirect = append(reachedDirect, a.way)
		} else if !a.blocked {
			open = append(open, a.way+" ("+a.what+")")
		}
	}
	for _, a := range vias {
		if a.reached {
			reachedVia = append(reachedVia, a.way)
		} else if !a.blocked {
			open = append(open, a.way+" ("+a.what+")")
		}
	}
	switch {
	case len(reachedDirect) > 0:
		r.Status = Fail
		r.Summary = fmt.Sprintf("%s is reachable directly (%s): egress does not go only through the proxy", u.Host, strings.Join(reachedDirect, ", "))
		if len(direct) > 0 {
			r.Summary += "; " + joinAnd(direct) + " would go there directly"
		}
		if len(reachedVia) > 0 {
			r.Summary += ", and the proxy lets it through too (" + strings.Join(reachedVia, ", ") + ")"
		}
		r.Advice = "Block direct egress with a NetworkPolicy that allows only DNS, the cluster's ranges and the gateway (`egret render networkpolicy NAMESPACE`), or transparent interception; " +
			"a client that ignores the proxy variables (raw TCP, some gRPC or SDK clients) otherwise reaches it."
	case len(reachedVia) > 0:
		r.Status = Fail
		r.Summary = fmt.Sprintf("the proxy lets %s through (%s): its policy does not block it", u.Host, strings.Join(reachedVia, ", "))
		r.Advice = "Add a deny rule (egret: a route with action deny, or an EgressPolicy without this destination) at the proxy; the network blocks only direct traffic."
	case len(open) > 0:
		r.Status = Warn
		r.Summary = fmt.Sprintf("%s was not reached, but not every path is proven blocked: %s", u.Host, strings.Join(open, "; "))
		r.Advice = "A proxy that tries and fails (5xx) would let the destination through once it is up; a 407 hides the policy behind the credentials. Make the proxy refuse it by policy (403)."
	default:
		r.Status = Pass
		var ways []string
		for _, a := range append(directs, vias...) {
			ways = append(ways, a.way)
		}
		if dnsBlock != "" {
			ways = append([]string{"direct (no address here)"}, ways...)
		}
		r.Summary = fmt.Sprintf("%s is blocked on every path: %s", u.Host, strings.Join(ways, ", "))
		if len(ps) == 0 {
			r.Summary += " (no proxy variable for " + u.Scheme + ":// URLs)"
		}
	}
	return r
}

// forbiddenDirect connects to u's addresses of family fam without a proxy.
func (s *state) forbiddenDirect(ctx context.Context, u *url.URL, fam string) attempt {
	a := attempt{way: "direct"}
	if fam != "" {
		a.way = "direct over " + famLabel(fam)
	}
	ex := Exchange{Check: "forbidden", Target: u.String(), Way: "direct", Family: fam}
	defer func() { s.rec.add(ex) }()
	ans, ap, f := s.getDirectFam(ctx, u, false, fam)
	if ap.IsValid() {
		a.way += " to " + ap.String()
	}
	if f != nil {
		ex.Error = f.Error()
		switch f.kind {
		case fkRefused, fkTimeout, fkUnreachable, fkNotFound:
			a.blocked = true
			a.what = "blocked: " + f.what() + " (" + f.Error() + ")"
		case fkReset, fkTLS:
			// The connection opened and was cut: what a transparent proxy
			// that refuses the destination does.
			a.blocked = true
			a.what = "blocked: the connection was cut after it opened (" + f.what() + "), as a transparent proxy refusing it does"
		default:
			a.what = "not reached, but not refused either: " + f.Error()
		}
		return a
	}
	ex.Status = ans.code
	if ans.header.Get("Proxy-Status") != "" || ans.header.Get("X-Squid-Error") != "" {
		// A transparent proxy answered in the destination's place.
		if ans.code == 403 {
			a.blocked = true
			a.what = "refused by a transparent proxy: " + ans.status + proxyStatusNote(ans)
			return a
		}
		a.what = "a transparent proxy answered " + ans.status + proxyStatusNote(ans) + " (not a policy refusal)"
		return a
	}
	a.reached = true
	a.what = "reached: it answered " + ans.status
	return a
}

// forbiddenVia asks proxy p for u the way clients do.
func (s *state) forbiddenVia(ctx context.Context, u *url.URL, p proxyChoice) attempt {
	a := attempt{way: "through " + p.name()}
	ex := Exchange{Check: "forbidden", Target: u.String(), Way: "proxy", Proxy: p.name()}
	defer func() { s.rec.add(ex) }()
	if p.err != nil {
		a.what = p.err.Error()
		ex.Error = a.what
		return a
	}
	ans, pa, f, of := s.getVia(ctx, p.url, u)
	switch {
	case f != nil:
		ex.Error = f.Error()
		a.what = "the proxy could not be asked: " + f.Error()
	case of != nil:
		// The tunnel opened: the proxy let it through.
		ex.Status = 200
		ex.Error = of.Error()
		a.reached = true
		a.what = "the proxy opened a tunnel to it (" + of.what() + " afterwards)"
	case pa != nil:
		ex.Status = pa.code
		switch {
		case pa.code == 403:
			a.blocked = true
			a.what = "refused by the proxy's policy: " + pa.status + proxyStatusNote(pa)
		case pa.code == 407:
			a.what = "the proxy wants credentials (407): its policy for this destination is not tested"
		default:
			a.what = "the proxy tried and failed: " + pa.status + proxyStatusNote(pa) + " — not a policy refusal"
		}
	default:
		ex.Status = ans.code
		a.reached = true
		a.what = "reached through the proxy: it answered " + ans.status
	}
	return a
}

// proxyStatusNote is ", error_type" from a proxy's Proxy-Status or Squid's
// error, or "".
func proxyStatusNote(a *answer) string {
	if pe, ok := proxyError(proxystatus.Parse(a.header.Values("Proxy-Status"))); ok {
		return ", " + pe.Params["error"]
	}
	if e := a.header.Get("X-Squid-Error"); e != "" {
		return ", " + strings.Fields(e)[0]
	}
	return ""
}
