package lint

import (
	"sort"
	"strings"
)

const idConfigFileProxy = "config-file-proxy-mismatch"

var ruleConfigFileProxy = Rule{
	ID:       idConfigFileProxy,
	Severity: Warning,
	Summary:  "a mounted tool configuration file (settings.xml, .npmrc, pip.conf, apt.conf, gitconfig, agent YAML) names another proxy than the environment, or one the environment does not",
	Help: "Tools read their own configuration before (or instead of) the proxy variables: Maven only settings.xml, npm " +
		"its .npmrc, pip its pip.conf, apt its Acquire::http::Proxy, git its http.proxy, agents their proxy_url. A file " +
		"that names another proxy than HTTP_PROXY/HTTPS_PROXY sends that tool elsewhere — often an old proxy nobody " +
		"remembers — and a file with a proxy in a pod without proxy variables hides the proxy from every check. Give " +
		"the file the same proxy as the variables (or remove it and let the tool read the variables).",
	pod: checkConfigFileProxy,
}

func checkConfigFileProxy(p *pod) {
	for _, c := range p.clients() {
		for _, m := range p.mountedConfigs(c) {
			if m.err != nil || m.cfg.tool == "containerd" {
				continue
			}
			eps, opaque := envProxyEndpoints(c.env)
			for _, what := range sortedKeys(m.cfg.proxies) {
				v := m.cfg.proxies[what]
				serves := map[string]string{"http": "http:// requests", "https": "https:// requests", "all": "its requests"}[what]
				switch {
				case v == "" && len(eps) > 0:
					p.report(idConfigFileProxy, Warning, c, m.field, "%s makes %s send %s direct, although the environment names a proxy (%s): remove the setting or give it the same proxy",
						m.where(), m.cfg.tool, serves, endpointList(eps))
				case v == "":
				case len(eps) == 0 && !opaque:
					p.report(idConfigFileProxy, Warning, c, m.field, "%s sends %s's %s through %s, but the container's environment names no proxy: the proxy is hidden from every check (egret lint, doctor); set the variables to it or remove it from the file",
						m.where(), m.cfg.tool, serves, redact(v))
				case len(eps) > 0 && eps[proxyEndpoint(v)] == nil:
					p.report(idConfigFileProxy, Warning, c, m.field, "%s sends %s's %s through %s, but the environment's proxy is %s: give the file the same proxy as the variables",
						m.where(), m.cfg.tool, serves, redact(v), endpointList(eps))
				}
			}
		}
	}
}

// endpointList writes "gw:3128 (HTTP_PROXY, http_proxy)".
func endpointList(eps map[string][]string) string {
	keys := make([]string, 0, len(eps))
	for k := range eps {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		out = append(out, k+" ("+strings.Join(eps[k], ", ")+")")
	}
	return strings.Join(out, "; ")
}
