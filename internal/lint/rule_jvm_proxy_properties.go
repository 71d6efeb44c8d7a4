package lint

import (
	"strings"

	"egret.io/egret/internal/noproxy"
)

const idJVMProxyProps = "jvm-proxy-properties"

var ruleJVMProxyProps = Rule{
	ID:       idJVMProxyProps,
	Severity: Error,
	Summary:  "a JVM container has proxy variables but no -Dhttp.proxyHost / -Dhttps.proxyHost",
	Help: "The JVM ignores HTTP_PROXY, HTTPS_PROXY and NO_PROXY. It reads the system properties " +
		"`http.proxyHost`/`http.proxyPort`, `https.proxyHost`/`https.proxyPort` and `http.nonProxyHosts` " +
		"(`|`-separated, used for HTTPS too). Pass them in `JAVA_TOOL_OPTIONS`, which every JVM reads, e.g. " +
		"`-Dhttp.proxyHost=proxy -Dhttp.proxyPort=3128 -Dhttps.proxyHost=proxy -Dhttps.proxyPort=3128 " +
		"-Dhttp.nonProxyHosts=localhost|127.*|*.svc|*.cluster.local`.",
	pod: checkJVMProxyProps,
}

func checkJVMProxyProps(p *pod) {
	for _, c := range p.clients() {
		if !c.runtimes.has(rtJVM) {
			continue
		}
		vars := setProxyVars(c.env)
		if len(vars) == 0 {
			continue
		}
		js := jvmSettingsOf(c)
		if js.unknown {
			continue
		}
		_, hasHTTP := js.props["http.proxyHost"]
		_, hasHTTPS := js.props["https.proxyHost"]
		wantHTTP := c.env.has(httpProxy.upper) || c.env.has(httpProxy.lower)
		wantHTTPS := c.env.has(httpsProxy.upper) || c.env.has(httpsProxy.lower)
		switch {
		case !hasHTTP && !hasHTTPS:
			p.report(idJVMProxyProps, Error, c, vars[0].field,
				"the JVM ignores %s: add %s", names(vars), javaSuggestion(c.env))
		case wantHTTPS && !hasHTTPS:
			p.report(idJVMProxyProps, Error, c, vars[0].field,
				"-Dhttp.proxyHost is set but -Dhttps.proxyHost is not, so HTTPS from the JVM goes direct: add -Dhttps.proxyHost and -Dhttps.proxyPort")
		case wantHTTP && !hasHTTP:
			p.report(idJVMProxyProps, Error, c, vars[0].field,
				"-Dhttps.proxyHost is set but -Dhttp.proxyHost is not, so plain HTTP from the JVM goes direct: add -Dhttp.proxyHost and -Dhttp.proxyPort")
		}
	}
}

// javaSuggestion builds the JAVA_TOOL_OPTIONS value matching env's proxy
// variables with noproxy's translation (host and port only, never
// credentials; NO_PROXY in http.nonProxyHosts form).
func javaSuggestion(env *environment) string {
	proxy := ""
	for _, n := range []string{httpsProxy.upper, httpsProxy.lower, httpProxy.upper, httpProxy.lower, allProxy.upper, allProxy.lower} {
		if v := env.get(n); v != nil && v.known && strings.TrimSpace(v.value) != "" {
			proxy = strings.TrimSpace(v.value)
			break
		}
	}
	opts, _, err := noproxy.JavaToolOptions(proxy, noProxyValue(env))
	if err != nil || opts == "" {
		return "JAVA_TOOL_OPTIONS with -Dhttp.proxyHost, -Dhttp.proxyPort, -Dhttps.proxyHost, -Dhttps.proxyPort and -Dhttp.nonProxyHosts"
	}
	return "JAVA_TOOL_OPTIONS=\"" + opts + "\""
}

// noProxyValue returns the known NO_PROXY value a client would see (the
// lower case wins for most clients), or "".
func noProxyValue(env *environment) string {
	for _, n := range []string{noProxy.lower, noProxy.upper} {
		if v := env.get(n); v != nil && v.known && strings.TrimSpace(v.value) != "" {
			return v.value
		}
	}
	return ""
}
