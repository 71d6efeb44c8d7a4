package lint

import (
	"strings"

	"egret.io/egret/internal/noproxy"
)

const idNoProxyTooBroad = "no-proxy-too-broad"

var ruleNoProxyTooBroad = Rule{
	ID:       idNoProxyTooBroad,
	Severity: Error,
	Summary:  "a NO_PROXY entry sends far more than the cluster direct",
	Help: "`*` (or a whole public top-level domain such as `.com`) in NO_PROXY sends every matching " +
		"destination direct, around the proxy and its allow-list, audit and fixed egress address. List the " +
		"internal destinations instead.",
	pod: checkNoProxyTooBroad,
}

func checkNoProxyTooBroad(p *pod) {
	for _, c := range p.clients() {
		for _, v := range p.noProxyToCheck(c) {
			for _, f := range p.noProxyLint(c, v) {
				if f.Rule != noproxy.RuleTooBroad {
					continue
				}
				msg := v.name + ": " + strings.TrimSuffix(f.Message, ".")
				if f.Fix != "" {
					msg += "; " + f.Fix
				}
				p.report(idNoProxyTooBroad, f.Severity, c, v.field, "%s", msg)
			}
		}
	}
}
