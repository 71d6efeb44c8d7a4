package noproxy

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// whatwgHost is url.host in the WHATWG URL standard without the port:
// lower case, IDN → punycode, IPv4/IPv6 canonical, IPv6 in brackets.
func whatwgHost(t *target) string { return t.bracketed() }

// nodeEnabled reads NODE_USE_ENV_PROXY. Unset means "assumed on" (the model
// describes Node with the feature enabled); any other value than "1" is off.
func nodeEnabled(env Env) (on bool, note string) {
	v, set := env["NODE_USE_ENV_PROXY"]
	switch {
	case !set:
		return true, "assumes NODE_USE_ENV_PROXY=1 or --use-env-proxy (without it Node ignores these variables)"
	case v == "1":
		return true, ""
	default:
		return false, ""
	}
}

// decideNodeCore is Node's built-in ProxyConfig (lib/internal/http.js) as
// released in Node 24.22 and 26.12.
func decideNodeCore(env Env, t *target) verdict {
	on, note := nodeEnabled(env)
	var notes []string
	if note != "" {
		notes = append(notes, note)
	}
	if !on {
		return direct("NODE_USE_ENV_PROXY is not \"1\": Node's http/https ignore proxy variables")
	}
	// At startup Node also builds fetch's EnvHttpProxyAgent (undici rules:
	// lower-case ?? upper-case); a value that is not a URL makes it throw and
	// the process exit before any request.
	for _, pair := range [][2]string{{"http_proxy", "HTTP_PROXY"}, {"https_proxy", "HTTPS_PROXY"}} {
		if v, n, _ := env.firstSet(pair[0], pair[1]); v != "" && !reWHATWGScheme.MatchString(v) {
			return fail(fmt.Sprintf("%s is not a URL: with NODE_USE_ENV_PROXY=1 Node exits at startup (ERR_INVALID_URL)", n), notes...)
		}
	}
	var val, name string
	if t.scheme == "https" {
		val, name = env.nonEmpty("https_proxy", "HTTPS_PROXY")
	} else {
		val, name = env.nonEmpty("http_proxy", "HTTP_PROXY")
	}
	if val == "" {
		return direct(unsetReason(t.scheme+"_proxy", upper(t.scheme)+"_PROXY"), notes...)
	}
	if strings.ContainsAny(val, "\r\n") {
		return fail(name+": invalid proxy URL (line break)", notes...)
	}
	if !strings.HasPrefix(val, "http://") && !strings.HasPrefix(val, "https://") {
		return direct(name+" ignored: Node uses only values starting with http:// or https://", notes...)
	}
	if u, err := url.Parse(val); err != nil || u.Hostname() == "" {
		return fail(name+": invalid proxy URL", notes...)
	}
	np, npName := env.nonEmpty("no_proxy", "NO_PROXY")
	host := t.hostname
	hwp := host + ":" + strconv.Itoa(int(t.port))
	if np != "" {
		for _, raw := range strings.Split(np, ",") {
			e := lower(strings.TrimSpace(raw))
			hit := func() verdict {
				return direct(fmt.Sprintf("matched entry %s in %s", q(strings.TrimSpace(raw)), npName), notes...)
			}
			if e == "*" || e == host || e == hwp {
				return hit()
			}
			if strings.HasPrefix(e, ".") {
				suffix := e[1:]
				if host == suffix || (strings.HasSuffix(host, suffix) && len(host) > len(suffix) && host[len(host)-len(suffix)-1] == '.') {
					return hit()
				}
			}
			if strings.HasPrefix(e, "*.") && strings.HasSuffix(host, e[1:]) {
				return hit()
			}
			if strings.Contains(e, "-") && isIPv4(host) {
				lo, hi, _ := strings.Cut(e, "-")
				if hi2, _, _ := strings.Cut(hi, "-"); true {
					hi = hi2
				}
				a, err1 := netip.ParseAddr(strings.TrimSpace(lo))
				b, err2 := netip.ParseAddr(strings.TrimSpace(hi))
				h, _ := netip.ParseAddr(host)
				if err1 == nil && err2 == nil && a.Is4() && b.Is4() && a.Compare(h) <= 0 && h.Compare(b) <= 0 {
					return hit()
				}
			}
		}
	}
	return verdict{d: DecisionProxy, proxy: val, reason: fmt.Sprintf("proxy from %s; no %s entry matches %s", name, orNoProxy(npName), host), notes: notes, np: np}
}

// undiciModel is undici's EnvHttpProxyAgent at one range of versions.
type undiciModel struct {
	name     string
	stripDot bool // >= 7.22: entries lose a leading "." / "*.", label-boundary suffix match
	bareV6   bool // >= 8.10: bare and bracketed IPv6 entries, host without brackets
}

var (
	reWHATWGScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	reHostPort     = regexp.MustCompile(`^(.+):(\d+)$`)
	reV6HostPort   = regexp.MustCompile(`^\[(.+)\]:(\d+)$`)
	reBracketed    = regexp.MustCompile(`^\[(.+)\]$`)
	reStarDot      = regexp.MustCompile(`^\*?\.`)
	reNodeSplit    = regexp.MustCompile(`[,\s]`)
)

// jsPort is Number.parseInt on a digit string (no overflow in practice).
func jsPort(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n > 1<<30 {
		return -1
	}
	return n
}

// undiciProxyURL is what new ProxyAgent({uri}) accepts.
func undiciProxyURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || !hasScheme(v) || u.Host == "" {
		return fmt.Errorf("invalid proxy URL %q: undici needs scheme://host:port", redact(v))
	}
	return nil
}

func (m undiciModel) decide(env Env, t *target) verdict {
	var notes []string
	httpV, httpN, httpSet := env.firstSet("http_proxy", "HTTP_PROXY")
	if httpSet && httpV == "" && env["HTTP_PROXY"] != "" && httpN == "http_proxy" {
		notes = append(notes, "HTTP_PROXY ignored: http_proxy is set to \"\", which wins")
	}
	httpsV, httpsN, httpsSet := env.firstSet("https_proxy", "HTTPS_PROXY")
	if httpsSet && httpsV == "" && env["HTTPS_PROXY"] != "" && httpsN == "https_proxy" {
		notes = append(notes, "HTTPS_PROXY ignored: https_proxy is set to \"\", which wins")
	}
	// The constructor builds both agents: a bad value throws for every request.
	if httpV != "" {
		if err := undiciProxyURL(httpV); err != nil {
			return fail(httpN+": "+err.Error()+" (the agent constructor throws)", notes...)
		}
	}
	if httpsV != "" {
		if err := undiciProxyURL(httpsV); err != nil {
			return fail(httpsN+": "+err.Error()+" (the agent constructor throws)", notes...)
		}
	}
	np, npName, _ := env.firstSet("no_proxy", "NO_PROXY")
	host := lower(whatwgHost(t))
	if m.bareV6 {
		host = reBracketed.ReplaceAllString(host, "$1")
	}
	if hit, ok := m.bypass(np, host, int(t.port)); ok {
		return direct(fmt.Sprintf("matched entry %s in %s", q(hit), npName), notes...)
	}
	val, name := httpV, httpN
	if t.scheme == "https" {
		if httpsV != "" {
			val, name = httpsV, httpsN
		} else if httpV != "" {
			notes = append(notes, "no https_proxy/HTTPS_PROXY: undici sends https through the http proxy")
		}
	}
	if val == "" {
		return direct(unsetReason("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"), notes...)
	}
	return verdict{d: DecisionProxy, proxy: val, reason: fmt.Sprintf("proxy from %s; no %s entry matches %s", name, orNoProxy(npName), host), notes: notes, np: np}
}

func (m undiciModel) bypass(np, host string, port int) (string, bool) {
	type entry struct {
		raw, host string
		port      int
	}
	var entries []entry
	for _, raw := range reNodeSplit.Split(np, -1) {
		if raw == "" {
			continue
		}
		h, p := raw, 0
		if m.bareV6 {
			if mm := reV6HostPort.FindStringSubmatch(raw); mm != nil {
				h, p = mm[1], jsPort(mm[2])
			} else {
				ub := reBracketed.ReplaceAllString(raw, "$1")
				h = ub
				if strings.Count(ub, ":") == 1 {
					if mm := reHostPort.FindStringSubmatch(ub); mm != nil {
						h, p = mm[1], jsPort(mm[2])
					}
				}
			}
		} else if mm := reHostPort.FindStringSubmatch(raw); mm != nil {
			h, p = mm[1], jsPort(mm[2])
		}
		if m.stripDot {
			h = reStarDot.ReplaceAllString(h, "")
		}
		entries = append(entries, entry{raw, lower(h), p})
	}
	if len(entries) == 0 {
		return "", false
	}
	if np == "*" {
		return "*", true
	}
	for _, e := range entries {
		if e.port != 0 && e.port != port {
			continue
		}
		if m.stripDot {
			if host == e.host || (len(host) > len(e.host) && host[len(host)-len(e.host)-1] == '.' && strings.HasSuffix(host, e.host)) {
				return e.raw, true
			}
			continue
		}
		if e.host == "" || (e.host[0] != '.' && e.host[0] != '*') {
			if host == e.host {
				return e.raw, true
			}
		} else if strings.HasSuffix(host, strings.TrimPrefix(e.host, "*")) {
			return e.raw, true
		}
	}
	return "", false
}

// pfeModel is proxy-from-env's getProxyForUrl (axios uses 1.x).
type pfeModel struct {
	name string
	v1   bool // 1.x: npm_config_* first, url.parse (no IPv6/IPv4 normalization)
}

// pfeEnv is getEnv: lower || UPPER || "".
func pfeEnv(env Env, key string) (string, string) {
	return env.nonEmpty(lower(key), upper(key))
}

func (m pfeModel) decide(env Env, t *target) verdict {
	host := whatwgHost(t)
	if m.v1 {
		// url.parse keeps the host as written (lower-cased).
		host = lower(t.host)
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
	}
	np, npName := "", ""
	if m.v1 {
		np, npName = pfeEnv(env, "npm_config_no_proxy")
	}
	if np == "" {
		np, npName = pfeEnv(env, "no_proxy")
	}
	np = lower(np)
	if np != "" {
		if np == "*" {
			return direct(fmt.Sprintf("matched entry %s in %s", q("*"), npName))
		}
		for _, raw := range reNodeSplit.Split(np, -1) {
			if raw == "" {
				continue
			}
			h, p := raw, 0
			if mm := reHostPort.FindStringSubmatch(raw); mm != nil {
				h, p = mm[1], jsPort(mm[2])
			}
			if p != 0 && p != int(t.port) {
				continue
			}
			if h[0] != '.' && h[0] != '*' {
				if host == h {
					return direct(fmt.Sprintf("matched entry %s in %s", q(raw), npName))
				}
				continue
			}
			if strings.HasSuffix(host, strings.TrimPrefix(h, "*")) {
				return direct(fmt.Sprintf("matched entry %s in %s", q(raw), npName))
			}
		}
	}
	var val, name string
	if m.v1 {
		val, name = pfeEnv(env, "npm_config_"+t.scheme+"_proxy")
	}
	if val == "" {
		val, name = pfeEnv(env, t.scheme+"_proxy")
	}
	if val == "" && m.v1 {
		val, name = pfeEnv(env, "npm_config_proxy")
	}
	if val == "" {
		val, name = pfeEnv(env, "all_proxy")
	}
	if val == "" {
		return direct(unsetReason(t.scheme+"_proxy", upper(t.scheme)+"_PROXY", "all_proxy", "ALL_PROXY"))
	}
	if !strings.Contains(val, "://") {
		val = t.scheme + "://" + val
	}
	return verdict{d: DecisionProxy, proxy: val, reason: fmt.Sprintf("proxy from %s; no %s entry matches %s", name, orNoProxy(npName), host), np: np}
}

var reGARule = regexp.MustCompile(`^(.+?)(?::(\d+))?$`)

// decideGlobalAgent is global-agent's createGlobalProxyAgent + Agent.addRequest.
func decideGlobalAgent(env Env, t *target) verdict {
	var notes []string
	ns, set := env["GLOBAL_AGENT_ENVIRONMENT_VARIABLE_NAMESPACE"]
	if !set {
		_, a := env["GLOBAL_AGENT_HTTP_PROXY"]
		_, b := env["GLOBAL_AGENT_HTTPS_PROXY"]
		if a || b {
			ns = "GLOBAL_AGENT_"
		} else {
			notes = append(notes, "assumes GLOBAL_AGENT_ENVIRONMENT_VARIABLE_NAMESPACE=\"\" (global-agent then reads upper-case HTTP_PROXY, HTTPS_PROXY, NO_PROXY only)")
		}
	}
	httpV, httpSet := env[ns+"HTTP_PROXY"]
	httpsV, httpsSet := env[ns+"HTTPS_PROXY"]
	val, name := httpV, ns+"HTTP_PROXY"
	if t.scheme == "https" && httpsSet {
		val, name = httpsV, ns+"HTTPS_PROXY"
	}
	if ns == "" && env["http_proxy"] != "" && !httpSet {
		notes = append(notes, "http_proxy ignored: global-agent reads only upper-case names")
	}
	if val == "" {
		if !httpSet && !(t.scheme == "https" && httpsSet) {
			return direct(unsetReason(name), notes...)
		}
		return direct(name+" is empty: no proxy", notes...)
	}
	np := env[ns+"NO_PROXY"]
	if np != "" {
		// The request URL is rebuilt as protocol//hostname[:port]path; an
		// IPv6 hostname has no brackets there, so new URL() throws.
		if t.v6 {
			return fail("global-agent throws on IPv6 targets when NO_PROXY is set (it builds the URL without brackets)", notes...)
		}
		port := ""
		if t.port != 80 && t.port != 443 {
			port = strconv.Itoa(int(t.port))
			if t.port == defaultPort(t.scheme) {
				port = ""
			}
		}
		for _, rule := range regexp.MustCompile(`[\s,]+`).Split(np, -1) {
			if rule == "" {
				continue
			}
			r := rule
			if strings.HasPrefix(r, ".") {
				r = "*" + r[1:]
			}
			mm := reGARule.FindStringSubmatch(r)
			if mm == nil || mm[1] == "" {
				return fail(fmt.Sprintf("global-agent throws on NO_PROXY entry %s", q(rule)), notes...)
			}
			if globMatch(t.hostname, mm[1]) && (mm[2] == "" || (port != "" && port == mm[2])) {
				return direct(fmt.Sprintf("matched entry %s in %sNO_PROXY", q(rule), ns), notes...)
			}
		}
	}
	u, err := url.Parse(val)
	if err != nil || !strings.HasPrefix(lower(val), "http://") || u.Host == "" {
		return fail(fmt.Sprintf("%s: global-agent accepts only http:// proxy URLs (it throws)", name), notes...)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fail(fmt.Sprintf("%s: global-agent rejects a proxy URL with a query or fragment", name), notes...)
	}
	if t.scheme == "https" && !httpsSet {
		notes = append(notes, "no "+ns+"HTTPS_PROXY: global-agent sends https through "+ns+"HTTP_PROXY")
	}
	return verdict{d: DecisionProxy, proxy: val, reason: fmt.Sprintf("proxy from %s; no %sNO_PROXY entry matches %s", name, ns, t.hostname), notes: notes, np: np}
}

// globMatch is the matcher package: case-insensitive, "*" = any run of
// characters, a leading "!" negates.
func globMatch(input, pattern string) bool {
	neg := strings.HasPrefix(pattern, "!")
	if neg {
		pattern = pattern[1:]
	}
	parts := strings.Split(pattern, "*")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	re, err := regexp.Compile(`(?is)^` + strings.Join(parts, `.*`) + `$`)
	if err != nil {
		return false
	}
	return re.MatchString(input) != neg
}
