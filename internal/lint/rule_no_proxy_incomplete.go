package lint

import "strings"

const idNoProxyIncomplete = "no-proxy-incomplete"

var ruleNoProxyIncomplete = Rule{
	ID:       idNoProxyIncomplete,
	Severity: Error,
	Summary:  "NO_PROXY misses cluster names, the API server, the cluster CIDRs or loopback",
	Help: "NO_PROXY must cover everything the pod reaches inside the cluster: `.svc` and `.cluster.local` " +
		"(Service names), the API server (`kubernetes.default.svc` and its address, or `$(KUBERNETES_SERVICE_HOST)`), " +
		"the Service and Pod CIDRs for calls by IP (`--cluster-cidrs`; only Go, curl, requests, reqwest and Ruby " +
		"understand CIDRs), and loopback (`localhost,127.0.0.1,::1`: only Go bypasses loopback on its own). A " +
		"missing entry sends that traffic to the proxy, which cannot reach it and answers 502/503.",
	pod: checkNoProxyIncomplete,
}

func checkNoProxyIncomplete(p *pod) {
	for _, c := range p.clients() {
		if len(setProxyVars(c.env)) == 0 {
			continue
		}
		for _, v := range noProxyVars(c) {
			ms := missingEssentials(v.value, p.in.Cluster)
			if len(ms) == 0 {
				continue
			}
			var whats, adds []string
			sev := Info
			for _, m := range ms {
				whats, adds = append(whats, m.what), append(adds, m.add)
				sev = max(sev, m.severity)
			}
			p.report(idNoProxyIncomplete, sev, c, v.field, "%s does not cover %s, so those calls go to the proxy: add %s",
				v.name, strings.Join(whats, ", "), strings.Join(adds, ","))
		}
	}
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
		if len(out) == 1 && strings.TrimSpace(out[0].value) == strings.TrimSpace(v.value) {
			continue
		}
		out = append(out, v)
	}
	return out
}

// noProxyVar returns the NO_PROXY variable the container's clients read
// (the lower case wins for most of them), when its value is known.
func noProxyVar(c *container) *envVar {
	for _, n := range []string{noProxy.lower, noProxy.upper} {
		if v := c.env.get(n); v != nil {
			if !v.known || strings.TrimSpace(v.value) == "" {
				return nil
			}
			return v
		}
	}
	return nil
}
