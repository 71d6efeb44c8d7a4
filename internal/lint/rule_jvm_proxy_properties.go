package lint

import (
	"fmt"
	"strings"
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
// variables (host and port only; never credentials).
func javaSuggestion(env *environment) string {
	pick := func(prs ...varPair) proxyURL {
		for _, pr := range prs {
			for _, n := range []string{pr.upper, pr.lower} {
				if v := env.get(n); v != nil && v.known && strings.TrimSpace(v.value) != "" {
					return parseProxyURL(v.value)
				}
			}
		}
		return proxyURL{}
	}
	var parts []string
	add := func(prefix string, u proxyURL) {
		if u.host == "" {
			return
		}
		port := u.port
		if port == "" {
			port = "80"
			if u.scheme == "https" {
				port = "443"
			}
		}
		parts = append(parts, fmt.Sprintf("-D%s.proxyHost=%s -D%s.proxyPort=%s", prefix, u.host, prefix, port))
	}
	add("http", pick(httpProxy, allProxy))
	add("https", pick(httpsProxy, allProxy, httpProxy))
	if np := noProxyValue(env); np != "" {
		if h := nonProxyHostsFor(np); h != "" {
			parts = append(parts, "-Dhttp.nonProxyHosts="+h)
		}
	}
	if len(parts) == 0 {
		return "JAVA_TOOL_OPTIONS with -Dhttp.proxyHost, -Dhttp.proxyPort, -Dhttps.proxyHost, -Dhttps.proxyPort and -Dhttp.nonProxyHosts"
	}
	return "JAVA_TOOL_OPTIONS=\"" + strings.Join(parts, " ") + "\""
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
