package noproxy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// javaDefaultNonProxyHosts is what DefaultProxySelector uses when
// http.nonProxyHosts is unset, and appends when it is set and not empty.
const javaDefaultNonProxyHosts = "localhost|127.*|[::1]|0.0.0.0|[::0]"

// SplitJavaOptions splits a JAVA_TOOL_OPTIONS / JDK_JAVA_OPTIONS value into
// arguments: blanks separate them, single or double quotes group.
func SplitJavaOptions(s string) []string {
	var out []string
	var cur strings.Builder
	in := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// JavaProperties returns the -D system properties a JVM started in env gets
// from JAVA_TOOL_OPTIONS and then JDK_JAVA_OPTIONS (a later one wins).
func JavaProperties(env Env) map[string]string {
	props := map[string]string{}
	for _, name := range []string{"JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"} {
		for _, arg := range SplitJavaOptions(env[name]) {
			if !strings.HasPrefix(arg, "-D") {
				continue
			}
			k, v, _ := strings.Cut(arg[2:], "=")
			if k != "" {
				props[k] = v
			}
		}
	}
	return props
}

// javaNonProxyRegexp is DefaultProxySelector.toPattern; nil means no bypass.
func javaNonProxyRegexp(mask string) *regexp.Regexp {
	var parts []string
	for _, d := range strings.Split(mask, "|") {
		if d == "" {
			continue
		}
		d = strings.ToLower(d)
		var re string
		switch {
		case d == "*":
			re = ".*"
		case strings.HasPrefix(d, "*") && strings.HasSuffix(d, "*"):
			re = ".*" + regexp.QuoteMeta(d[1:len(d)-1]) + ".*"
		case strings.HasPrefix(d, "*"):
			re = ".*" + regexp.QuoteMeta(d[1:])
		case strings.HasSuffix(d, "*"):
			re = regexp.QuoteMeta(d[:len(d)-1]) + ".*"
		default:
			re = regexp.QuoteMeta(d)
		}
		parts = append(parts, re)
	}
	if len(parts) == 0 {
		return nil
	}
	re, err := regexp.Compile(`(?s)^(?:` + strings.Join(parts, "|") + `)$`)
	if err != nil {
		return nil
	}
	return re
}

// decideJava is DefaultProxySelector.select with the -D properties.
func decideJava(env Env, t *target) verdict {
	props := JavaProperties(env)
	var notes []string
	for _, n := range []string{"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"} {
		if env[n] != "" {
			notes = append(notes, "Java ignores "+n+" and the other *_proxy variables")
			break
		}
	}
	if props["java.net.useSystemProxies"] == "true" {
		notes = append(notes, "java.net.useSystemProxies=true: desktop (GNOME) settings would apply when no -D proxy is set; not modelled")
	}
	prefixes := []string{t.scheme + ".proxy", "proxy", "socksProxy"}
	host, j := "", -1
	for i, p := range prefixes {
		if v := props[p+"Host"]; v != "" {
			host, j = v, i
			break
		}
	}
	if j < 0 {
		return direct(fmt.Sprintf("no -D%sHost, -DproxyHost or -DsocksProxyHost in JAVA_TOOL_OPTIONS/JDK_JAVA_OPTIONS", t.scheme+".proxy"), notes...)
	}
	np, set := props["http.nonProxyHosts"]
	src := "-Dhttp.nonProxyHosts"
	switch {
	case !set:
		np, src = javaDefaultNonProxyHosts, "the default nonProxyHosts"
	case np != "":
		np += "|" + javaDefaultNonProxyHosts
	}
	urlhost := strings.ToLower(t.host)
	if strings.Contains(urlhost, ":") {
		urlhost = "[" + urlhost + "]"
	}
	if re := javaNonProxyRegexp(np); re != nil && re.MatchString(urlhost) {
		hit := ""
		for _, d := range strings.Split(np, "|") {
			if d != "" {
				if r := javaNonProxyRegexp(d); r != nil && r.MatchString(urlhost) {
					hit = d
					break
				}
			}
		}
		return direct(fmt.Sprintf("matched %s in %s", q(hit), src), notes...)
	}
	port := 0
	if n, err := strconv.Atoi(props[prefixes[j]+"Port"]); err == nil {
		port = n
	}
	if port == 0 && j < len(prefixes)-1 {
		for k := 0; k < len(prefixes)-1; k++ {
			if k != j && port == 0 {
				if n, err := strconv.Atoi(props[prefixes[k]+"Port"]); err == nil {
					port = n
				}
			}
		}
	}
	scheme := "http"
	if port == 0 {
		switch {
		case j == len(prefixes)-1:
			port = 1080
		default:
			port = int(defaultPort(t.scheme))
		}
	}
	if j == len(prefixes)-1 {
		scheme = "socks5"
	}
	hp := host
	if strings.Contains(hp, ":") && !strings.HasPrefix(hp, "[") {
		hp = "[" + hp + "]"
	}
	proxy := fmt.Sprintf("%s://%s:%d", scheme, hp, port)
	return viaProxy(proxy, fmt.Sprintf("proxy from -D%sHost; %s does not match %s", prefixes[j], src, urlhost), notes...)
}
