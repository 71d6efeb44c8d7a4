package lint

const idNoProxyMissing = "no-proxy-missing"

var ruleNoProxyMissing = Rule{
	ID:       idNoProxyMissing,
	Severity: Error,
	Summary:  "proxy variables are set without NO_PROXY",
	Help: "With HTTP_PROXY/HTTPS_PROXY and no NO_PROXY, every call goes to the proxy, including calls to " +
		"Services (`*.svc`), the API server and the cloud metadata address, which an outside proxy cannot reach " +
		"(it answers 502/503 and the healthy callee gets blamed). Set NO_PROXY and no_proxy to at least " +
		"`localhost,127.0.0.1,::1,.svc,.cluster.local,kubernetes.default.svc`, plus the Service and Pod CIDRs " +
		"and the API server address (`egret noproxy discover` prints the one egret computes for your cluster).",
	pod: checkNoProxyMissing,
}

func checkNoProxyMissing(p *pod) {
	for _, c := range p.clients() {
		vars := setProxyVars(c.env)
		if len(vars) == 0 || c.env.mayHave(noProxy.upper) || c.env.mayHave(noProxy.lower) {
			continue
		}
		p.report(idNoProxyMissing, Error, c, vars[0].field,
			"%s %s set without NO_PROXY, so in-cluster calls (Services, the API server, metadata) go to the proxy: set NO_PROXY and no_proxy to %s",
			names(vars), isAre(vars), suggestedNoProxy(p.in.Cluster, noProxyClients(c)))
	}
}
