package lint

import (
	"net/netip"
	"strings"
)

const idCredentialsCleartext = "proxy-credentials-cleartext"

var ruleCredentialsCleartext = Rule{
	ID:       idCredentialsCleartext,
	Severity: Warning,
	Summary:  "a proxy user name and password go over plain http:// to a proxy on another host",
	Help: "With `http://user:password@proxy:3128` every client sends the credentials in a `Proxy-Authorization` " +
		"header (Basic: base64, not encryption) over an unencrypted connection: anyone on the network path to the " +
		"proxy can read them. Use `https://` if the proxy accepts TLS, or let egret's sidecar or gateway hold the " +
		"credentials (the pod then talks to it without any). A proxy on loopback (a sidecar in the pod) is not " +
		"reported.",
	pod: checkCredentialsCleartext,
}

func checkCredentialsCleartext(p *pod) {
	for _, c := range p.clients() {
		for _, v := range setProxyVars(c.env) {
			if v.known && cleartextCredentials(v.value) && !copiesURLVar(v) {
				p.report(idCredentialsCleartext, Warning, c, v.field,
					"%s sends the proxy user name and password in clear text (http:// to %s): use https:// to the proxy, or keep the credentials in egret's sidecar or gateway", v.name, parseProxyURL(v.value).host)
			}
		}
	}
}

// cleartextCredentials reports a proxy URL with a password, sent over plain
// HTTP (http:// or no scheme, which clients read as http://) to a host that
// is not loopback.
func cleartextCredentials(raw string) bool {
	u := parseProxyURL(raw)
	if !u.password || (u.scheme != "" && u.scheme != "http") {
		return false
	}
	return !isLoopbackHost(u.host)
}

// isLoopbackHost reports localhost (and its subdomains) and loopback
// addresses.
func isLoopbackHost(h string) bool {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// copiesURLVar reports a variable whose value is exactly $(NAME) of another
// proxy URL variable (https_proxy: $(HTTPS_PROXY)): that one is reported.
func copiesURLVar(v *envVar) bool {
	r := strings.TrimSpace(v.raw)
	if v.origin != fromValue || !strings.HasPrefix(r, "$(") || !strings.HasSuffix(r, ")") {
		return false
	}
	name := r[2 : len(r)-1]
	return name != v.name && isURLVar(name) && !strings.ContainsAny(name, "$()")
}
