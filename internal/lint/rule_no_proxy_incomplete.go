package lint

import (
	"strings"

	"egret.io/egret/internal/noproxy"
)

const idNoProxyIncomplete = "no-proxy-incomplete"

var ruleNoProxyIncomplete = Rule{
	ID:       idNoProxyIncomplete,
	Severity: Error,
	Summary:  "NO_PROXY misses cluster names, the API server, the metadata address, the cluster CIDRs or loopback",
	Help: "NO_PROXY must cover everything the pod reaches inside the cluster: `.svc` and `.cluster.local` " +
		"(Service names), the API server (`kubernetes`, `kubernetes.default`, `kubernetes.default.svc` and its " +
		"address, or `$(KUBERNETES_SERVICE_HOST)`), the cloud metadata address `169.254.169.254`, the Service and " +
		"Pod CIDRs for calls by IP (`--cluster-cidrs`), and loopback (`localhost,127.0.0.1,::1`, plus `[::1]` for " +
		"Python and Node: only Go bypasses loopback on its own). What counts as covered depends on the runtimes " +
		"in the image (`egret noproxy lint VALUE --clients CLIENT,...` shows the same verdict). A missing entry sends that traffic to " +
		"the proxy, which cannot reach it and answers 502/503.",
	pod: checkNoProxyIncomplete,
}

func checkNoProxyIncomplete(p *pod) {
	for _, c := range p.clients() {
		for _, v := range p.noProxyToCheck(c) {
			var whats, adds []string
			seen := map[string]bool{}
			for _, f := range p.noProxyLint(c, v) {
				if f.Rule != noproxy.RuleMissingEssential {
					continue
				}
				whats = append(whats, strings.TrimSuffix(f.Message, "."))
				for _, e := range f.Add {
					if !seen[e] {
						seen[e] = true
						adds = append(adds, e)
					}
				}
			}
			if len(whats) == 0 {
				continue
			}
			fix := "add " + strings.Join(adds, ",")
			if len(adds) == 0 {
				fix = "call those destinations by a name NO_PROXY covers"
			}
			p.report(idNoProxyIncomplete, Error, c, v.field, "%s is incomplete for this image's runtimes: %s; %s",
				v.name, strings.Join(whats, "; "), fix)
		}
	}
}

// noProxyToCheck returns the NO_PROXY variables of a proxy client container
// with a known value (both cases when they differ), or nil when the
// container sets no proxy or reads no NO_PROXY.
func (p *pod) noProxyToCheck(c *container) []*envVar {
	if len(setProxyVars(c.env)) == 0 || len(noProxyClients(c)) == 0 {
		return nil
	}
	return noProxyVars(c)
}

// noProxyLint returns (and caches) noproxy's findings for variable v of c.
func (p *pod) noProxyLint(c *container, v *envVar) []noproxy.Finding {
	if p.nplint == nil {
		p.nplint = map[*envVar][]noproxy.Finding{}
	}
	if fs, ok := p.nplint[v]; ok {
		return fs
	}
	fs := lintNoProxy(v.value, p.in.Cluster, noProxyClients(c))
	p.nplint[v] = fs
	return fs
}

// noProxyVars returns the NO_PROXY variables with a known, non-empty value:
// both cases when they differ, one when they agree.
func noProxyVars(c *container) []*envVar {
	var out []*envVar
	for _, n := range []string{noProxy.upper, noProxy.lower} {
		v := c.env.get(n)
		if v == nil || !v.known || strings.TrimSpace(v.value) == "" {
			continue
		}
		if len(out) == 1 && noproxy.Normalize(out[0].value) == noproxy.Normalize(v.value) {
			continue
		}
		out = append(out, v)
	}
	return out
}
