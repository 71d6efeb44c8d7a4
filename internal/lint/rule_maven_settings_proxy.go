package lint

const idMavenSettingsProxy = "maven-settings-proxy-missing"

var ruleMavenSettingsProxy = Rule{
	ID:       idMavenSettingsProxy,
	Severity: Error,
	Summary:  "a container with proxy variables mounts a Maven settings.xml without an active proxy",
	Help: "Maven never reads HTTP_PROXY/HTTPS_PROXY (nor, for its own downloads, JAVA_TOOL_OPTIONS' -Dhttps.proxyHost " +
		"reliably across wagon/transport versions): its proxies come only from settings.xml. A settings.xml mounted " +
		"without an active <proxy> makes every build go direct, which a locked-down network refuses (timeouts to Maven " +
		"Central). Add <proxies> with the environment's proxy and nonProxyHosts.",
	pod: checkMavenSettingsProxy,
}

func checkMavenSettingsProxy(p *pod) {
	for _, c := range p.clients() {
		eps, _ := envProxyEndpoints(c.env)
		if len(eps) == 0 {
			continue
		}
		for _, m := range p.mountedConfigs(c) {
			if m.err != nil || m.cfg.tool != "Maven" || m.cfg.sets() {
				continue
			}
			p.report(idMavenSettingsProxy, Error, c, m.field, "%s has no active <proxy>, and Maven ignores the proxy variables (%s): Maven goes direct; add a <proxy> for %s with nonProxyHosts from NO_PROXY",
				m.where(), endpointList(eps), endpointList(eps))
		}
	}
}
