package lint

import "strings"

const idNoProxyIgnored = "no-proxy-ignored-entry"

var ruleNoProxyIgnored = Rule{
	ID:       idNoProxyIgnored,
	Severity: Warning,
	Summary:  "a NO_PROXY entry is ignored or misread by a runtime in the image",
	Help: "Runtimes read NO_PROXY differently (`egret noproxy explain` shows each one): Python, Node.js and " +
		".NET ignore CIDR entries, so a call to a ClusterIP by address goes to the proxy; Node core and " +
		"global-agent read `.example.com` as a raw suffix; `*.example.com`, ports and bracketed IPv6 work only in " +
		"some clients. Use entries the image's runtime understands: names and suffixes (`.svc`), exact " +
		"addresses, or route by name instead of by IP.",
	pod: checkNoProxyIgnored,
}

func checkNoProxyIgnored(p *pod) {
	for _, c := range p.clients() {
		v := noProxyVar(c)
		if v == nil || len(setProxyVars(c.env)) == 0 {
			continue
		}
		clients := clientsFor(c)
		if len(clients) == 0 {
			continue
		}
		for _, e := range ignoredEntries(v.value, clients) {
			p.report(idNoProxyIgnored, Warning, c, v.field, "%s entry %q is %s by %s in this image: %s", v.name, e.entry, e.how, strings.Join(e.clients, ", "), e.fix)
		}
	}
}
