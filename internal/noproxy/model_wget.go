package noproxy

import (
	"fmt"
	"strings"
)

// decideWget is GNU Wget's getproxy + sufmatch, with no wgetrc.
func decideWget(env Env, t *target) verdict {
	var notes []string
	name := t.scheme + "_proxy"
	if env[upper(name)] != "" && env[name] == "" {
		notes = append(notes, upper(name)+" ignored: wget reads only lower-case "+name)
	}
	if env["NO_PROXY"] != "" && env["no_proxy"] == "" {
		notes = append(notes, "NO_PROXY ignored: wget reads only lower-case no_proxy")
	}
	val := env[name]
	if val == "" {
		return direct(unsetReason(name), notes...)
	}
	if np := env["no_proxy"]; np != "" {
		// wget compares the host as it sends it: a name in punycode, an IP
		// literal as written.
		host := t.hostname
		if t.ip.IsValid() {
			host = lower(t.host)
		}
		if hit, ok := wgetNoProxy(np, host); ok {
			return direct(fmt.Sprintf("matched entry %s in no_proxy", q(hit)), notes...)
		}
	}
	p := val
	if !hasScheme(p) {
		p = "http://" + p
	}
	if s := schemeOf(p); s != "http" && s != "https" {
		return fail(fmt.Sprintf("%s: wget accepts only http:// proxies", name), notes...)
	}
	if _, err := proxyWithDefaultScheme(p); err != nil {
		return fail(fmt.Sprintf("%s: %v", name, err), notes...)
	}
	return verdict{d: DecisionProxy, proxy: p, reason: fmt.Sprintf("proxy from %s; no no_proxy entry matches %s", name, t.hostname), notes: notes, np: env["no_proxy"]}
}

// wgetNoProxy is sepstring (split on ',', blanks after a comma skipped)
// followed by sufmatch.
func wgetNoProxy(np, host string) (string, bool) {
	var list []string
	start := 0
	for i := 0; i < len(np); i++ {
		if np[i] == ',' {
			list = append(list, np[start:i])
			j := i + 1
			for j < len(np) && isCSpace(np[j]) {
				j++
			}
			start = j
			i = j - 1
		}
	}
	list = append(list, np[start:])
	for _, e := range list {
		if len(host) < len(e) {
			continue
		}
		if !strings.EqualFold(host[len(host)-len(e):], e) {
			continue
		}
		k := len(host) - len(e) - 1
		if k == -1 || host[k] == '.' || (len(e) > 0 && e[0] == '.') {
			return e, true
		}
	}
	return "", false
}

func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
