package lint

import "strings"

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
			// Judge the value the process gets, after $(VAR) expansion.
			bad := badUserinfoBytes(v.value)
			if len(bad) == 0 {
				continue
			}
			// Name the variables the offending characters come from; text
			// written in another URL variable is reported on that one.
			var from []string
			seen := map[string]bool{}
			own := false
			for _, i := range bad {
				src, literal := v.sourceOf(i)
				switch {
				case literal && (src == v || !isURLVar(src.name)):
					own = true
				case !literal:
					d := src.name
					if src.source != "" {
						d += " (" + src.source + ")"
					}
					if src == v {
						d = src.source
					}
					if !seen[d] {
						seen[d] = true
						from = append(from, d)
					}
				}
			}
			if !own && len(from) == 0 {
				continue
			}
			src := ""
			switch {
			case len(from) == 1 && v.origin != fromValue:
				src = " (from " + v.source + ")"
			case len(from) > 0:
				src = " (the characters come from " + strings.Join(from, ", ") + ")"
			}
			p.report(idURLUnencoded, Error, c, v.field,
				"the user information in %s%s has characters that must be percent-encoded: write @ as %%40, / as %%2F, # as %%23, %% as %%25, ? as %%3F, space as %%20", name, src)
		}
	}
}

// badUserinfoBytes returns the positions in raw of the user-information
// characters that must be percent-encoded (see validUserinfo). An '@' in
// the user information is one: parseProxyURL cuts at the last '@'.
func badUserinfoBytes(raw string) []int {
	start, end, _, ok := userinfoSpan(raw)
	if !ok {
		return nil
	}
	var out []int
	s := raw[start:end]
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:", c) >= 0:
		case c == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]):
			i += 2
		default:
			out = append(out, start+i)
		}
	}
	return out
}
