package lint

const idJVMHTTPSNonProxy = "jvm-https-non-proxy-hosts"

var ruleJVMHTTPSNonProxy = Rule{
	ID:       idJVMHTTPSNonProxy,
	Severity: Warning,
	Summary:  "-Dhttps.nonProxyHosts is set; the JVM ignores it",
	Help: "There is no `https.nonProxyHosts` property: the JVM uses `http.nonProxyHosts` for HTTPS too. " +
		"Move the entries to `-Dhttp.nonProxyHosts` (joined with `|`).",
	pod: checkJVMHTTPSNonProxy,
}

func checkJVMHTTPSNonProxy(p *pod) {
	for _, c := range p.clients() {
		js := jvmSettingsOf(c)
		if _, ok := js.props["https.nonProxyHosts"]; !ok {
			continue
		}
		field := c.field
		if v := js.sources["https.nonProxyHosts"]; v != nil {
			field = v.field
		}
		msg := "-Dhttps.nonProxyHosts is ignored by the JVM (http.nonProxyHosts applies to HTTPS too): "
		if _, ok := js.props["http.nonProxyHosts"]; ok {
			msg += "merge its entries into -Dhttp.nonProxyHosts and remove it"
		} else {
			msg += "rename it to -Dhttp.nonProxyHosts"
		}
		p.report(idJVMHTTPSNonProxy, Warning, c, field, "%s", msg)
	}
}
