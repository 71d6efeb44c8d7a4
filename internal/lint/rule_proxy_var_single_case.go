package lint

const idSingleCase = "proxy-var-single-case"

var ruleSingleCase = Rule{
	ID:       idSingleCase,
	Severity: Warning,
	Summary:  "a proxy variable is set in one case only",
	Help: "Clients disagree on which case they read: curl and wget read only `http_proxy`, wget only " +
		"`no_proxy`, Go prefers the upper case, Python and Ruby the lower case. Set `HTTP_PROXY`/`http_proxy`, " +
		"`HTTPS_PROXY`/`https_proxy` and `NO_PROXY`/`no_proxy` in both cases, to the same value.",
	pod: checkSingleCase,
}

func checkSingleCase(p *pod) {
	for _, c := range p.clients() {
		if len(setProxyVars(c.env)) == 0 {
			continue
		}
		for _, pr := range []varPair{httpProxy, httpsProxy, noProxy} {
			up, lo := c.env.get(pr.upper), c.env.get(pr.lower)
			switch {
			case up != nil && !c.env.mayHave(pr.lower):
				if pr == httpProxy && c.runtimes.has(rtCurl) {
					continue // reported by curl-uppercase-http-proxy
				}
				p.report(idSingleCase, Warning, c, up.field, "%s is set but %s is not: set %s to the same value (curl, wget, Python and Ruby read the lower case)", pr.upper, pr.lower, pr.lower)
			case lo != nil && !c.env.mayHave(pr.upper):
				p.report(idSingleCase, Warning, c, lo.field, "%s is set but %s is not: set %s to the same value (Go, and so most operators and CLIs, prefer the upper case)", pr.lower, pr.upper, pr.upper)
			}
		}
	}
}
