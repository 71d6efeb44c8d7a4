package lint

import (
	"net"
	"strings"

	"egret.io/egret/internal/trust"
)

const idTLSCAMissing = "tls-ca-missing"

var ruleTLSCAMissing = Rule{
	ID:       idTLSCAMissing,
	Severity: Error,
	Summary:  "a container uses a TLS-intercepting proxy but a runtime in it gets no CA bundle",
	Help: "A proxy that inspects TLS presents certificates signed by its own CA; every runtime must trust that CA, and " +
		"each reads it from its own place: SSL_CERT_FILE (Go, OpenSSL, Python ssl, Ruby, .NET), REQUESTS_CA_BUNDLE " +
		"(requests), CURL_CA_BUNDLE (curl), NODE_EXTRA_CA_CERTS (Node.js), GIT_SSL_CAINFO, AWS_CA_BUNDLE, and " +
		"-Djavax.net.ssl.trustStore in JAVA_TOOL_OPTIONS (the JVM). Give each the system roots plus the corporate " +
		"CA — egret's webhook does (`--ca-configmap`, docs/trust.md) — or build the CA into the image's trust store " +
		"and ignore this rule for the pod.",
	pod: checkTLSCAMissing,
}

// interceptingProxy returns the intercepting proxy a container's https
// traffic uses ("" when none): its HTTPS_PROXY/https_proxy, or the JVM's
// -Dhttps.proxyHost.
func interceptingProxy(c *container, list []string) string {
	match := func(host, port string) string {
		for _, raw := range list {
			want := parseProxyURL(raw)
			if want.host == host && (want.port == "" || want.port == port) {
				return net.JoinHostPort(host, port)
			}
		}
		return ""
	}
	for _, n := range []string{httpsProxy.upper, httpsProxy.lower} {
		if v := c.env.get(n); v != nil && v.known && strings.TrimSpace(v.value) != "" {
			u := parseProxyURL(v.value)
			if m := match(u.host, portOr(u)); m != "" {
				return m
			}
		}
	}
	if c.runtimes.has(rtJVM) {
		js := jvmSettingsOf(c)
		if h := strings.ToLower(js.props["https.proxyHost"]); h != "" {
			port := js.props["https.proxyPort"]
			if port == "" {
				port = "443"
			}
			return match(h, port)
		}
	}
	return ""
}

// caRuntimes are the trust models of the runtimes found in a container;
// every container counts as Go/OpenSSL (SSL_CERT_FILE), whatever else runs.
func caRuntimes(c *container) []string {
	out := []string{"go"}
	if c.runtimes.has(rtPython) {
		out = append(out, "python-requests", "python-ssl")
	}
	if c.runtimes.has(rtNode) {
		out = append(out, "node")
	}
	if c.runtimes.has(rtJVM) {
		out = append(out, "java")
	}
	if c.runtimes.has(rtCurl) {
		out = append(out, "curl")
	}
	return out
}

// trustEnv is the container's known environment for trust.Resolve, and
// whether some variable a runtime reads cannot be seen.
func trustEnv(c *container) (trust.Env, bool) {
	e := trust.Env{}
	unknown := c.env.opaque
	for _, n := range c.env.order {
		v := c.env.get(n)
		if !v.known {
			unknown = true
			continue
		}
		e[n] = v.value
	}
	return e, unknown
}

func checkTLSCAMissing(p *pod) {
	list := p.in.Cluster.InterceptingProxies
	if len(list) == 0 {
		return
	}
	for _, c := range p.clients() {
		proxy := interceptingProxy(c, list)
		if proxy == "" {
			continue
		}
		env, unknown := trustEnv(c)
		if unknown {
			continue
		}
		cmd := append(append([]string{}, c.c.Command...), c.c.Args...)
		var missing, fix []string
		for _, name := range caRuntimes(c) {
			r, _ := trust.RuntimeByName(name)
			if ch := trust.Resolve(r, env, cmd...); !ch.Custom() {
				missing = append(missing, name)
				fix = append(fix, r.Settings[0].String())
			}
		}
		if len(missing) == 0 {
			continue
		}
		p.report(idTLSCAMissing, Error, c, "",
			"the proxy %s intercepts TLS, but no CA bundle reaches %s in this container: set %s to the system roots plus the corporate CA (egret's webhook injects them with --ca-configmap)",
			proxy, runtimeList(missing), strings.Join(dedupeStrings(fix), ", "))
	}
}

// caRuntimeNames name caRuntimes' trust models in a finding. "go" stands
// for every client that reads SSL_CERT_FILE: in an image lint cannot tell
// the runtimes of, it is the one model assumed, not a claim that Go runs.
var caRuntimeNames = map[string]string{
	"go":              "the clients that read SSL_CERT_FILE (Go, OpenSSL, Ruby, .NET)",
	"python-requests": "Python requests",
	"python-ssl":      "Python's ssl",
	"node":            "Node.js",
	"java":            "the JVM",
	"curl":            "curl",
}

// runtimeList names the runtimes: "a, b and c".
func runtimeList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n
		if s, ok := caRuntimeNames[n]; ok {
			out[i] = s
		}
	}
	if len(out) < 2 {
		return strings.Join(out, "")
	}
	return strings.Join(out[:len(out)-1], ", ") + " and " + out[len(out)-1]
}

func dedupeStrings(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
