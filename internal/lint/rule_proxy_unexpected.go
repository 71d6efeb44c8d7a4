package lint

import "strings"

const idProxyUnexpected = "proxy-unexpected"

var ruleProxyUnexpected = Rule{
	ID:       idProxyUnexpected,
	Severity: Warning,
	Summary:  "a proxy variable names another proxy than the one the cluster expects",
	Help: "When the cluster's proxy is known (`egret lint --expect-proxy URL FILE`, or the webhook's policy), a pod " +
		"that names another host or port bypasses the sidecar or gateway and its policy, logs and credentials. " +
		"Point the variables at the expected proxy.",
	pod: checkProxyUnexpected,
}

func checkProxyUnexpected(p *pod) {
	want := strings.TrimSpace(p.in.Cluster.Proxy)
	if want == "" {
		return
	}
	w := parseProxyURL(want)
	for _, c := range p.clients() {
		for _, v := range setProxyVars(c.env) {
			if !v.known {
				continue
			}
			got := parseProxyURL(v.value)
			if got.host == w.host && portOr(got) == portOr(w) {
				continue
			}
			p.report(idProxyUnexpected, Warning, c, v.field, "%s points at %s, not at the expected proxy %s", v.name, redact(v.value), redact(want))
		}
	}
}

// portOr returns the URL's port or the scheme's default.
func portOr(u proxyURL) string {
	switch {
	case u.port != "":
		return u.port
	case u.scheme == "https":
		return "443"
	case strings.HasPrefix(u.scheme, "socks"):
		return "1080"
	}
	return "80"
}
