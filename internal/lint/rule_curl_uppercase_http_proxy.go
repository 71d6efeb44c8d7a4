package lint

const idCurlUpper = "curl-uppercase-http-proxy"

var ruleCurlUpper = Rule{
	ID:       idCurlUpper,
	Severity: Error,
	Summary:  "a curl-based container has HTTP_PROXY but no http_proxy",
	Help: "curl never reads the upper-case `HTTP_PROXY` (a safety measure for CGI programs, where an " +
		"HTTP_PROXY variable can come from a request header). With only `HTTP_PROXY`, every `http://` request " +
		"from curl goes direct. Set `http_proxy` to the same value.",
	pod: checkCurlUpper,
}

func checkCurlUpper(p *pod) {
	for _, c := range p.clients() {
		if !c.runtimes.has(rtCurl) {
			continue
		}
		up := c.env.get(httpProxy.upper)
		if up == nil || (up.known && up.value == "") || c.env.mayHave(httpProxy.lower) {
			continue
		}
		p.report(idCurlUpper, Error, c, up.field, "curl ignores the upper-case HTTP_PROXY, so http:// requests from curl go direct: set http_proxy to the same value")
	}
}
