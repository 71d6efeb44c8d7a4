package lint

const idURLUnencoded = "proxy-url-unencoded"

var ruleURLUnencoded = Rule{
	ID:       idURLUnencoded,
	Severity: Error,
	Summary:  "special characters in the user name or password of a proxy URL are not percent-encoded",
	Help: "In `http://user:password@proxy:3128` the user information may hold only letters, digits and " +
		"`-._~!$&'()*+,;=:`. Any other character must be percent-encoded: `@` as `%40`, `/` as `%2F`, `#` as " +
		"`%23`, `%` as `%25`, `?` as `%3F`, a space as `%20`. Unencoded, clients cut the URL in different places " +
		"(Go rejects it, curl and Python send a wrong user or host) and the proxy answers 407 or the request never leaves.",
	pod: checkURLUnencoded,
}

func checkURLUnencoded(p *pod) {
	for _, c := range p.containers {
		for _, name := range c.env.order {
			v := c.env.get(name)
			if !v.known || !isURLVar(name) {
				continue
			}
			val := v.value
			if v.origin == fromValue {
				val = v.raw // a problem in an expanded $(VAR) is reported on VAR
			}
			if u := parseProxyURL(val); u.userinfo && u.badUserinfo {
				src := ""
				if v.source != "" {
					src = " (from " + v.source + ")"
				}
				p.report(idURLUnencoded, Error, c, v.field,
					"the user information in %s%s has characters that must be percent-encoded: write @ as %%40, / as %%2F, # as %%23, %% as %%25, ? as %%3F, space as %%20", name, src)
			}
		}
	}
}
