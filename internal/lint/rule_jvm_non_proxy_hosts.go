package lint

import (
	"net/netip"
	"strings"
)

const idJVMNonProxyHosts = "jvm-non-proxy-hosts"

var ruleJVMNonProxyHosts = Rule{
	ID:       idJVMNonProxyHosts,
	Severity: Error,
	Summary:  "-Dhttp.nonProxyHosts uses commas, blanks or CIDRs, or misses the cluster names",
	Help: "`http.nonProxyHosts` is not NO_PROXY: entries are separated by `|` (a comma makes one long entry " +
		"that matches nothing), blanks are not trimmed, CIDRs are not understood (use `10.*` for 10.0.0.0/8), and " +
		"`*` is a wildcard only at the start or end of an entry (`*.svc`). Without `*.svc` and `*.cluster.local`, " +
		"every in-cluster call from the JVM goes to the proxy, which cannot reach it.",
	pod: checkJVMNonProxyHosts,
}

func checkJVMNonProxyHosts(p *pod) {
	for _, c := range p.clients() {
		js := jvmSettingsOf(c)
		field := func(prop string) string {
			if v := js.sources[prop]; v != nil {
				return v.field
			}
			return c.field
		}
		_, proxied := js.props["http.proxyHost"]
		_, proxiedS := js.props["https.proxyHost"]
		val, ok := js.props["http.nonProxyHosts"]
		if !ok {
			if (proxied || proxiedS) && !js.unknown {
				p.report(idJVMNonProxyHosts, Error, c, field("http.proxyHost"),
					"-Dhttp.proxyHost is set without -Dhttp.nonProxyHosts, so in-cluster calls from the JVM go to the proxy: add -Dhttp.nonProxyHosts=%s",
					jvmEssentials(p.in.Cluster))
			}
			continue
		}
		var problems []string
		if strings.Contains(val, ",") {
			problems = append(problems, "commas (entries are separated by |)")
		}
		if strings.ContainsAny(val, " \t") {
			problems = append(problems, "blanks (entries are not trimmed)")
		}
		for _, e := range strings.FieldsFunc(val, func(r rune) bool { return r == '|' || r == ',' || r == ' ' }) {
			if _, err := netip.ParsePrefix(e); err == nil {
				problems = append(problems, "CIDR "+e+" (not understood; use a wildcard such as 10.*)")
			}
		}
		if len(problems) > 0 {
			p.report(idJVMNonProxyHosts, Error, c, field("http.nonProxyHosts"),
				"-Dhttp.nonProxyHosts has %s: write it as %s", strings.Join(problems, ", "), nonProxyHostsFor(val))
			continue
		}
		if missing := jvmMissing(val, p.in.Cluster); len(missing) > 0 && (proxied || proxiedS) {
			p.report(idJVMNonProxyHosts, Error, c, field("http.nonProxyHosts"),
				"-Dhttp.nonProxyHosts does not cover %s, so those calls from the JVM go to the proxy: add %s",
				strings.Join(missing, ", "), strings.Join(missing, "|"))
		}
	}
}

// jvmEssentials is the nonProxyHosts value every pod needs.
func jvmEssentials(cl Cluster) string {
	return strings.Join(jvmMissing("", cl), "|")
}

// jvmMissing returns the cluster entries a nonProxyHosts value lacks. The
// JVM appends its own defaults (localhost|127.*|[::1]|0.0.0.0|[::0]) to a
// value that is set, so loopback is not required.
func jvmMissing(val string, cl Cluster) []string {
	have := map[string]bool{}
	for _, e := range strings.Split(strings.ToLower(val), "|") {
		have[e] = true
	}
	want := []string{"*.svc", "*." + cl.domain()}
	var out []string
	for _, w := range want {
		if !have[w] && !have["*"] {
			out = append(out, w)
		}
	}
	return out
}
