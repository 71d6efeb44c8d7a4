package lint

import (
	"net/netip"
	"regexp"
	"strings"
)

const idShortNameViaProxy = "short-name-via-proxy"

var ruleShortNameViaProxy = Rule{
	ID:       idShortNameViaProxy,
	Severity: Warning,
	Summary:  "a URL in the environment names a short Service name while a proxy is set",
	Help: "`http://payments:8080` or `http://payments.shop` is resolved by the pod's resolver through its search " +
		"path, but with HTTP_PROXY/HTTPS_PROXY set the client hands the name to the proxy, which resolves it in its " +
		"own namespace or not at all (a gateway answers 502); no cluster NO_PROXY entry covers a short name. Use the " +
		"fully qualified name (`payments.shop.svc.cluster.local`, which NO_PROXY's `.svc` entries send direct), add " +
		"the short name to the pod's NO_PROXY, or use the sidecar (a proxy on localhost resolves as the pod does and is not flagged).",
	pod: checkShortNameViaProxy,
}

// urlHost finds the host of every http(s)/grpc URL in a value.
var urlHost = regexp.MustCompile(`(?i)\b(?:https?|grpcs?|wss?)://(?:[^@/\s,;"']*@)?([a-z0-9][a-z0-9.-]*)`)

func checkShortNameViaProxy(p *pod) {
	domain := p.in.Cluster.domain()
	for _, c := range p.clients() {
		proxies := setProxyVars(c.env)
		if len(proxies) == 0 {
			continue
		}
		// The proxies themselves (and variables holding their URL) are
		// resolved by the client, in the pod: short names work there.
		isProxyVar, proxyValue := map[string]bool{}, map[string]bool{}
		remote := false
		for _, v := range proxies {
			isProxyVar[v.name] = true
			proxyValue[strings.TrimSpace(v.value)] = true
			// A proxy in the pod (egret's sidecar on localhost) resolves
			// with the pod's own resolver: short names work there.
			if h := strings.Trim(parseProxyURL(v.value).host, "[]"); v.known && !isLoopback(h) {
				remote = true
			}
		}
		if !remote {
			continue
		}
		np := strings.ToLower(c.env.valueOf("NO_PROXY") + "," + c.env.valueOf("no_proxy"))
		for _, name := range c.env.order {
			v := c.env.get(name)
			if v == nil || !v.known || isProxyVar[name] || proxyValue[strings.TrimSpace(v.value)] || strings.EqualFold(name, "NO_PROXY") {
				continue
			}
			for _, m := range urlHost.FindAllStringSubmatch(v.value, -1) {
				host := strings.ToLower(strings.TrimSuffix(m[1], "."))
				svc, ns, ok := shortName(host, p.ns)
				if !ok || covered(np, host) {
					continue
				}
				p.report(idShortNameViaProxy, Warning, c, v.field,
					"%s names %s, a short name, while %s is set: the client sends it to the proxy, which cannot resolve it as this pod does; use %s.%s.svc.%s (covered by NO_PROXY's .svc) or add %s to NO_PROXY",
					name, host, proxies[0].name, svc, ns, domain, host)
			}
		}
	}
}

// shortName reports whether host is a name only the pod's search path
// completes: one label (a Service of the pod's namespace) or name.namespace.
func shortName(host, podNS string) (svc, ns string, ok bool) {
	if _, err := netip.ParseAddr(host); err == nil || host == "localhost" || host == "" {
		return "", "", false
	}
	labels := strings.Split(host, ".")
	switch {
	case len(labels) == 1:
		return host, podNS, true
	case len(labels) == 2 && (labels[1] == podNS || knownNamespaces[labels[1]]):
		return labels[0], labels[1], true
	}
	return "", "", false
}

// knownNamespaces are namespaces whose `name.namespace` form is common.
var knownNamespaces = map[string]bool{"default": true, "kube-system": true, "monitoring": true, "egret-system": true}

// covered reports whether the NO_PROXY list has host itself (the only
// entry every runtime matches for a short name).
func covered(list, host string) bool {
	for _, e := range strings.Split(list, ",") {
		if strings.TrimSpace(e) == host || strings.TrimSpace(e) == "*" {
			return true
		}
	}
	return false
}

// valueOf returns a known variable's value, or "".
func (e *environment) valueOf(name string) string {
	if v := e.get(name); v != nil && v.known {
		return v.value
	}
	return ""
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
