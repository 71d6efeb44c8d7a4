package lint

import (
	"strings"

	"egret.io/egret/internal/noproxy"
)

const idNoProxyIgnored = "no-proxy-ignored-entry"

var ruleNoProxyIgnored = Rule{
	ID:       idNoProxyIgnored,
	Severity: Warning,
	Summary:  "a NO_PROXY entry is ignored or misread by a runtime in the image",
	Help: "Runtimes read NO_PROXY differently (`egret noproxy explain http://HOST/ --env NO_PROXY=VALUE` shows each one): Python's urllib, " +
		"Node.js and .NET ignore CIDR entries, so a call to a ClusterIP by address goes to the proxy; a bare " +
		"`example.com` does not cover subdomains in Node.js; `::1` needs `[::1]` beside it for Python and Node; " +
		"blanks or `;` between entries break most clients. Use entries the image's runtime understands: names and " +
		"suffixes (`.svc`), exact addresses in both IPv6 forms, commas only, or route by name instead of by IP.",
	pod: checkNoProxyIgnored,
}

func checkNoProxyIgnored(p *pod) {
	for _, c := range p.clients() {
		vars := p.noProxyToCheck(c)
		if len(vars) == 0 {
			continue
		}
		// Entries noproxy recommends (for any runtime) are judged on the whole value by
		// no-proxy-incomplete, not one by one here.
		recommended := map[string]bool{}
		for _, e := range essentialEntries(p.in.Cluster, nil) {
			recommended[strings.ToLower(e)] = true
		}
		for _, v := range vars {
			for _, f := range p.noProxyLint(c, v) {
				switch f.Rule {
				case noproxy.RuleSeparator, noproxy.RuleCIDROnly:
				case noproxy.RuleUnreadableEntry, noproxy.RuleEntryMisread:
					if f.Severity < noproxy.SeverityWarning || recommended[strings.ToLower(f.Entry)] {
						continue
					}
				default:
					continue
				}
				msg := v.name + ": " + strings.TrimSuffix(f.Message, ".")
				if f.Fix != "" {
					msg += "; " + f.Fix
				}
				p.report(idNoProxyIgnored, f.Severity, c, v.field, "%s", msg)
			}
		}
	}
}
