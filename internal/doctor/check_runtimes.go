package doctor

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"sync"

	"egret.io/egret/internal/noproxy"
	"egret.io/egret/internal/proxystatus"
)

// byDecision groups noproxy results.
type byDecision struct {
	direct, proxy, fail []noproxy.Result
}

func group(rs []noproxy.Result) byDecision {
	var g byDecision
	for _, r := range rs {
		switch r.Decision {
		case noproxy.DecisionDirect:
			g.direct = append(g.direct, r)
		case noproxy.DecisionProxy:
			g.proxy = append(g.proxy, r)
		default:
			g.fail = append(g.fail, r)
		}
	}
	return g
}

func clientsOf(rs []noproxy.Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Client
	}
	return out
}

// resultLines writes one detail line per client.
func resultLines(u string, rs []noproxy.Result) []string {
	var out []string
	for _, r := range rs {
		line := fmt.Sprintf("%s: %s %s", r.Client, r.Decision, u)
		if r.Proxy != "" {
			line += " via " + r.Proxy
		}
		out = append(out, line+" — "+r.Reason)
	}
	return out
}

// suggestEntry finds the NO_PROXY entry that makes the proxied clients go
// direct for host: the Service suffix, the cluster domain, or the name or
// address itself, tried with noproxy's models in that order.
func (s *state) suggestEntry(u, host string, proxied []string) string {
	var cands []string
	if _, err := netip.ParseAddr(host); err != nil {
		dom := s.clusterDomain()
		if strings.HasSuffix(host, ".svc") {
			cands = append(cands, ".svc")
		}
		if strings.HasSuffix(host, "."+dom) {
			cands = append(cands, "."+dom)
		}
	}
	cands = append(cands, host)
	best, bestFixed := "", -1
	for _, c := range cands {
		env := noproxy.Env{}
		for k, v := range s.env {
			env[k] = v
		}
		for _, n := range []string{"NO_PROXY", "no_proxy"} {
			env[n] = noproxy.WithEntries(env[n], c)
		}
		cs, _ := noproxy.SelectClients(proxied)
		rs, err := noproxy.Explain(u, env, cs)
		if err != nil {
			continue
		}
		fixed := len(group(rs).direct)
		if fixed == len(proxied) {
			return c
		}
		if fixed > bestFixed {
			best, bestFixed = c, fixed
		}
	}
	return best
}

// formRoute is what the runtimes do with one form of an internal
// destination, and what the proxy answers for it when some send it there.
type formRoute struct {
	host    string
	proxied []string // clients that send it to the proxy
	entry   string   // the NO_PROXY entry that would fix it
	outcome string   // what the proxy answered ("" when nobody proxies it)
	status  Status   // Warn: the proxy reaches it; Fail: it does not
	details []string
}

// runtimesInternalCheck predicts, per runtime, what happens to the
// internal destination's name, FQDN and ClusterIP, and when some runtime
// would send one to the proxy, asks the proxy what it does with it.
func (s *state) runtimesInternalCheck(t target) Check {
	return Check{Name: "runtimes", Target: t.raw, Run: func(ctx context.Context) Result {
		fs, _ := s.forms(ctx, t)
		var r Result
		var broken []string
		routes := make([]formRoute, len(fs))
		var wg sync.WaitGroup
		for i, fm := range fs {
			u := t.urlFor(fm.host)
			rs, err := s.explain(u)
			if err != nil {
				r.Details = append(r.Details, fmt.Sprintf("%s: %v", u, err))
				continue
			}
			r.Details = append(r.Details, resultLines(u, rs)...)
			g := group(rs)
			for _, fr := range g.fail {
				broken = append(broken, fmt.Sprintf("%s fails on %s: %s", fr.Client, u, fr.Reason))
			}
			routes[i].host = fm.host
			if len(g.proxy) == 0 {
				continue
			}
			routes[i].proxied = clientsOf(g.proxy)
			routes[i].entry = s.suggestEntry(u, fm.host, routes[i].proxied)
			wg.Add(1)
			go func(fr *formRoute, u string, via string) {
				defer wg.Done()
				s.askProxy(ctx, fr, u, via)
			}(&routes[i], u, g.proxy[0].Proxy)
		}
		wg.Wait()

		// Group the forms by who proxies them and what the proxy said, so
		// the summary reads "x and y would go to the proxy: ...".
		type key struct {
			clients, outcome string
			status           Status
		}
		var order []key
		hosts, entries := map[key][]string{}, map[key][]string{}
		status := Pass
		var advice []string
		for _, fr := range routes {
			r.Details = append(r.Details, fr.details...)
			if len(fr.proxied) == 0 {
				continue
			}
			k := key{joinAnd(fr.proxied), fr.outcome, fr.status}
			if _, ok := hosts[k]; !ok {
				order = append(order, k)
			}
			hosts[k] = append(hosts[k], fr.host)
			if fr.entry != "" {
				entries[k] = append(entries[k], fr.entry)
				advice = append(advice, fr.entry)
			}
			status = max(status, fr.status)
		}
		var holes, worked []string
		for _, k := range order {
			line := fmt.Sprintf("%s would send %s to the proxy", k.clients, joinAnd(hosts[k]))
			if es := dedupe(entries[k]); len(es) > 0 {
				line += ": NO_PROXY lacks " + joinAnd(es)
			}
			line += "; " + k.outcome
			if k.status == Fail {
				holes = append(holes, line)
			} else {
				worked = append(worked, line)
			}
		}
		if len(broken) > 0 {
			status = Fail
		}
		r.Status = status
		switch {
		case len(holes) > 0:
			r.Summary = "NO_PROXY hole: " + strings.Join(holes, "; ")
		case len(broken) > 0:
			r.Summary = strings.Join(broken, "; ")
		case len(worked) > 0:
			r.Summary = strings.Join(worked, "; ")
		default:
			var all []string
			for _, fm := range fs {
				all = append(all, fm.host)
			}
			r.Summary = fmt.Sprintf("%s go direct to %s", joinAnd(s.clientNames()), joinAnd(all))
		}
		if len(advice) > 0 {
			r.Advice = s.internalAdvice(dedupe(advice), len(holes) == 0)
		} else if len(broken) > 0 {
			r.Advice = "These clients cannot call this URL with the current variables; see the details."
		}
		return r
	}}
}

// askProxy sends CONNECT for u to the proxy the clients would use (named
// by a noproxy result, redacted) and records what it answered.
func (s *state) askProxy(ctx context.Context, fr *formRoute, u, via string) {
	pu, _ := url.Parse(u)
	p, ok := s.proxyByResult(pu.Scheme, via)
	fr.status = Fail
	if !ok || p.url == nil {
		fr.outcome = "the proxy " + via + " is not a usable URL"
		return
	}
	in := decodeIn{proxy: p.name(), source: p.source(), target: hostPortOf(pu), internal: true, noProxy: fr.entry}
	if p.url.User != nil {
		in.user = p.url.User.Username()
	}
	c, _, a, f := s.connectVia(ctx, p.url, hostPortOf(pu))
	switch {
	case f != nil:
		v := decodeProxyFailure(f, in)
		fr.details = v.details
		fr.outcome = "and the proxy cannot be reached: " + v.summary
	case a.code/100 == 2:
		c.Close()
		fr.status = Warn
		fr.outcome = "the proxy reaches it anyway (" + in.proxy + " answered " + a.status + ")"
	default:
		v := decodeAnswer(a, in)
		fr.details = v.details
		fr.outcome = in.proxy + " answered " + a.status + psSuffix(psType(a))
	}
}

// internalAdvice says which NO_PROXY entries to add.
func (s *state) internalAdvice(entries []string, works bool) string {
	adv := "Add " + strings.Join(entries, ",") + " to NO_PROXY and no_proxy: an outside proxy cannot resolve or reach cluster names and addresses"
	if works {
		adv += "; today the proxy covers for it, at the cost of an extra hop and a dependency on the proxy for in-cluster calls"
	}
	for _, e := range entries {
		if !strings.Contains(e, ".") && !strings.Contains(e, ":") {
			// A short Service name: its .svc form is the usual cover.
			adv += fmt.Sprintf("; or call it %s.%s.svc, which .svc covers", e, orDefault(s.rc.namespace(), "<namespace>"))
		} else if _, err := netip.ParseAddr(e); err == nil {
			var cidr []string
			for _, c := range s.clients {
				if c.Caps.CIDR4 {
					cidr = append(cidr, c.Name)
				}
			}
			adv += "; for addresses, the Service and Pod CIDRs cover them all, but only in clients that read CIDR entries"
			if len(cidr) > 0 {
				adv += " (here: " + joinAnd(cidr) + ")"
			}
		}
	}
	return adv + "."
}

// psType is the error type of a proxy's Proxy-Status, or its X-Squid-Error.
func psType(a *answer) string {
	if pe, ok := proxyError(proxystatus.Parse(a.header.Values("Proxy-Status"))); ok {
		return pe.Params["error"]
	}
	return a.header.Get("X-Squid-Error")
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// runtimesEchoCheck predicts, per runtime, whether requests to the echo
// URL (standing for every outside destination) use the proxy.
func (s *state) runtimesEchoCheck() Check {
	tgt := ""
	if s.echo != nil {
		tgt = s.echo.String()
	}
	return Check{Name: "runtimes", Target: tgt, Run: func(context.Context) Result {
		var r Result
		if s.echo == nil {
			r.Status = Warn
			r.Summary = "no --echo URL: what the runtimes do with outside destinations is not checked"
			r.Advice = "Run `egret echo --listen :8080` outside the cluster and pass its URL with --echo."
			return r
		}
		u := s.echo.String()
		rs, err := s.explain(u)
		if err != nil {
			return Result{Status: Fail, Summary: err.Error()}
		}
		r.Details = resultLines(u, rs)
		g := group(rs)
		if !s.anyProxySet() {
			r.Status = Warn
			r.Summary = fmt.Sprintf("no proxy variable is set: %s go direct to %s", joinAnd(s.clientNames()), s.echo.Host)
			r.Advice = "Expected only with transparent interception (egret iptables) or when this pod may reach the outside directly."
			return r
		}
		var probs, advice []string
		for _, fr := range g.fail {
			probs = append(probs, fmt.Sprintf("%s fails: %s", fr.Client, fr.Reason))
			advice = append(advice, "call it by name (not by IPv6 literal), or unset NO_PROXY for "+fr.Client)
		}
		for _, d := range g.direct {
			probs = append(probs, fmt.Sprintf("%s would go direct, bypassing the proxy: %s", d.Client, d.Reason))
			advice = append(advice, directAdvice(d, s.echo, s.env))
		}
		if len(probs) == 0 {
			r.Status = Pass
			proxies := map[string]bool{}
			for _, p := range g.proxy {
				proxies[p.Proxy] = true
			}
			r.Summary = fmt.Sprintf("%s send %s through the proxy (%s)", joinAnd(s.clientNames()), s.echo.Host, strings.Join(sortedKeys(proxies), ", "))
			return r
		}
		r.Status = Fail
		r.Summary = strings.Join(probs, "; ")
		r.Advice = strings.ToUpper(advice[0][:1]) + strings.Join(dedupe(advice), "; ")[1:] + "."
		return r
	}}
}

// directAdvice says how to make client r use the proxy for u, given the
// environment env the prediction was made with.
func directAdvice(r noproxy.Result, u *url.URL, env noproxy.Env) string {
	if isLoopback(u.Hostname()) {
		// Every runtime keeps loopback to itself: no variable changes that.
		return r.Client + " never sends localhost or a loopback address to a proxy: run `egret echo --listen :8080` outside this pod and pass its address with --echo"
	}
	switch {
	case r.Client == "java":
		return "add -D" + u.Scheme + ".proxyHost and -D" + u.Scheme + ".proxyPort (both http and https) to JAVA_TOOL_OPTIONS: `" + javaRenderCommand(env) + "` prints them"
	case strings.HasPrefix(r.Client, "node") || strings.HasPrefix(r.Client, "undici"):
		if strings.Contains(r.Reason, "NODE_USE_ENV_PROXY") {
			return "set NODE_USE_ENV_PROXY=1 (Node.js >= 24.5 or 22.21) so Node.js reads the proxy variables"
		}
	}
	if m := backticked.FindStringSubmatch(r.Reason); m != nil && strings.Contains(r.Reason, "matched") {
		return "remove or narrow the NO_PROXY entry `" + m[1] + "`: it sends " + u.Hostname() + " direct"
	}
	up := strings.ToUpper(u.Scheme) + "_PROXY"
	lo := strings.ToLower(up)
	switch {
	case env[up] == "" && env[lo] == "":
		return "set both " + up + " and " + lo + " to the proxy (" + r.Client + " reads neither)"
	case env[up] == "" || env[lo] == "":
		return "set both " + up + " and " + lo + " to the proxy (" + r.Client + " reads the one that is missing)"
	}
	return r.Client + " goes direct although " + up + " and " + lo + " are set: " + r.Reason
}

// isLoopback reports localhost and loopback addresses.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// javaRenderCommand is the `egret noproxy render --for java` command for
// this environment: its NO_PROXY and its proxy, without credentials (Java
// reads none from properties, and advice is never a place for a password).
func javaRenderCommand(env noproxy.Env) string {
	np, ok := env["NO_PROXY"]
	if !ok {
		np = env["no_proxy"]
	}
	cmd := "egret noproxy render " + shellQuote(np) + " --for java"
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		v := strings.TrimSpace(env[k])
		if v == "" {
			continue
		}
		if !strings.Contains(v, "://") {
			v = "http://" + v
		}
		if pu, err := url.Parse(v); err == nil && pu.Host != "" {
			return cmd + " --proxy " + shellQuote(pu.Scheme+"://"+pu.Host)
		}
	}
	return cmd + " --proxy http://PROXY:PORT"
}

// shellQuote single-quotes s unless it is made of safe characters only.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:/-_[]") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
