package lint

const idURLScheme = "proxy-url-scheme"

var ruleURLScheme = Rule{
	ID:       idURLScheme,
	Severity: Warning,
	Summary:  "a proxy URL has no scheme or an unusual one",
	Help: "Write proxy URLs as `http://host:port`. Without a scheme, Go, curl, wget, Python and .NET assume " +
		"`http://`, but Node.js ignores the variable, undici throws and Ruby fails. `https://` means TLS to the " +
		"proxy itself, which many clients and proxies do not support.",
	pod: checkURLScheme,
}

func checkURLScheme(p *pod) {
	for _, c := range p.clients() {
		for _, v := range setProxyVars(c.env) {
			if !v.known {
				continue
			}
			u := parseProxyURL(v.value)
			switch u.scheme {
			case "http", "https", "socks5", "socks5h", "socks4", "socks4a", "socks":
			case "":
				p.report(idURLScheme, Warning, c, v.field, "%s has no scheme: prefix it with http:// (Node.js ignores it, undici and Ruby fail)", v.name)
			default:
				p.report(idURLScheme, Warning, c, v.field, "%s has the scheme %q, which clients do not understand: use http://", v.name, u.scheme)
			}
		}
	}
}
