package lint

import "strings"

const idCaseMismatch = "proxy-var-case-mismatch"

var ruleCaseMismatch = Rule{
	ID:       idCaseMismatch,
	Severity: Error,
	Summary:  "the upper- and lower-case forms of a proxy variable disagree",
	Help: "When `HTTP_PROXY` and `http_proxy` (or `NO_PROXY` and `no_proxy`) differ, each client picks a " +
		"different one: Go, reqwest and global-agent use the upper case, curl, wget, Python, Ruby, Node and .NET " +
		"the lower case. The same request then goes direct from one process and through the proxy from another. " +
		"Give both the same value. A lower-case variable set to \"\" also shadows the upper-case one in Python, " +
		"Ruby, undici and .NET.",
	pod: checkCaseMismatch,
}

func checkCaseMismatch(p *pod) {
	for _, c := range p.clients() {
		for _, pr := range []varPair{httpProxy, httpsProxy, allProxy, noProxy} {
			up, lo := c.env.get(pr.upper), c.env.get(pr.lower)
			if up == nil || lo == nil || !up.known || !lo.known {
				continue
			}
			a, b := strings.TrimSpace(up.value), strings.TrimSpace(lo.value)
			if a == b {
				continue
			}
			switch {
			case b == "":
				p.report(idCaseMismatch, Error, c, lo.field, "%s is empty while %s is set: Python, Ruby, undici and .NET then use no value at all; give both the same value", pr.lower, pr.upper)
			case a == "":
				p.report(idCaseMismatch, Error, c, up.field, "%s is empty while %s is set: Go and reqwest then use no value at all; give both the same value", pr.upper, pr.lower)
			case pr == noProxy:
				p.report(idCaseMismatch, Error, c, lo.field, "%s and %s differ: Go uses %s, curl, Python and Node use %s; give both the same value", pr.upper, pr.lower, pr.upper, pr.lower)
			default:
				p.report(idCaseMismatch, Error, c, lo.field, "%s (%s) and %s (%s) differ: Go uses the upper case, curl, Python and Node the lower case; give both the same value",
					pr.upper, redact(a), pr.lower, redact(b))
			}
		}
	}
}
