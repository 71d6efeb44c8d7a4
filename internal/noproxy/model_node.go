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
func whatwgHost(t *target) string {
	if t.v6 {
		return "[" + whatwgIPv6(t.ip) + "]"
	}
	return t.hostname
}

// whatwgIPv6 is the WHATWG URL standard's IPv6 serializer: lower-case hex
// pieces without leading zeros, the first longest run of two or more zero
// pieces written "::", and no dotted IPv4 tail (::ffff:10.1.2.3 is
// ::ffff:a01:203).
func whatwgIPv6(a netip.Addr) string {
	b := a.As16()
	var pieces [8]uint16
	for i := range pieces {
		pieces[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
	}
	start, length := -1, 1
	for i := 0; i < 8; {
		if pieces[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && pieces[j] == 0 {
			j++
		}
		if j-i > length {
			start, length = i, j-i
		}
		i = j
	}
	var sb strings.Builder
	for i := 0; i < 8; i++ {
		if i == start {
			sb.WriteString("::")
			i += length - 1
			continue
		}
		if sb.Len() > 0 && !strings.HasSuffix(sb.String(), ":") {
			sb.WriteByte(':')
		}
		sb.WriteString(strconv.FormatUint(uint64(pieces[i]), 16))
	}
	return sb.String()
}

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
// released in Node 24.22 and 26.12 (the newest node-http row).
func decideNodeCore(env Env, t *target) verdict {
	return nodeModel{labelBoundary: true, socksAtStartup: true}.decide(env, t)
}

// nodeModel is Node's http/https proxy support (NODE_USE_ENV_PROXY=1) at
// one range of releases: lib/internal/http.js ProxyConfig, and the undici
// Node bundles, whose EnvHttpProxyAgent Node builds for fetch at startup.
type nodeModel struct {
	// labelBoundary: a ".x" entry matches x and names ending in ".x";
	// before, any name ending in "x" (".example.com" also covered
	// notexample.com, and "." everything).
	labelBoundary bool
	// socksAtStartup: the bundled undici (>= 7.23) accepts a socks5://
	// value; with an older one the process exits at startup on it.
	socksAtStartup bool
}

// nodeStartupFailure says why Node exits at startup with NODE_USE_ENV_PROXY
// set to env's value: fetch's EnvHttpProxyAgent is built then, and it
// throws on a proxy value it cannot use.
func (m nodeModel) startupFailure(env Env) (string, bool) {
	if on, _ := nodeEnabled(env); !on {
		return "", false
	}
	for _, pair := range [][2]string{{"http_proxy", "HTTP_PROXY"}, {"https_proxy", "HTTPS_PROXY"}} {
		v, n, _ := env.firstSet(pair[0], pair[1])
		if v == "" {
			continue
		}
		if !reWHATWGScheme.MatchString(v) {
			return fmt.Sprintf("%s is not a URL: with NODE_USE_ENV_PROXY=1 Node exits at startup (ERR_INVALID_URL)", n), true
		}
		if s := schemeOf(v); !m.socksAtStartup && (s == "socks5" || s == "socks") {
			return fmt.Sprintf("%s is a %s:// proxy: with NODE_USE_ENV_PROXY=1 this Node's bundled undici (< 7.23) throws at startup", n, s), true
		}
	}
	return "", false
}

func (m nodeModel) decide(env Env, t *target) verdict {
	on, note := nodeEnabled(env)
	var notes []string
	if note != "" {
		notes = append(notes, note)
	}
	if !on {
		return direct("NODE_USE_ENV_PROXY is not \"1\": Node's http/https ignore proxy variables")
	}
	if why, bad := m.startupFailure(env); bad {
		return fail(why, notes...)
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
	// The host as the request options carry it: WHATWG form, IPv6 without
	// brackets.
	host := strings.Trim(whatwgHost(t), "[]")
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
				if !m.labelBoundary && strings.HasSuffix(host, suffix) {
					return hit()
				}
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
	name       string
	upperFirst bool // 6.14.0 only: HTTP_PROXY ?? http_proxy (and NO_PROXY ?? no_proxy)
	stripDot   bool // >= 7.22: entries lose a leading "." / "*.", label-boundary suffix match
	socks      bool // >= 7.23: socks5:// (and socks://) proxy values work
	schemeless bool // 8.0.0-8.0.1: a value without a scheme gets http:// (https:// for HTTPS_PROXY)
	bareV6     bool // >= 8.10: bare and bracketed IPv6 entries, host without brackets
	trailDot   bool // >= 8.10.1: one trailing dot dropped from the host and from entries
	wildcard   bool // >= 8.11: a "*" entry anywhere means all; "*.x" means subdomains only
}

var (
	reWHATWGScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	reHostPort     = regexp.MustCompile(`^(.+):(\d+)$`)
	reV6HostPort   = regexp.MustCompile(`^\[(.+)\]:(\d+)$`)
	reBracketed    = regexp.MustCompile(`^\[(.+)\]$`)
	reStarDot      = regexp.MustCompile(`^\*?\.`)
	reNodeSplit    = regexp.MustCompile(`[,\s]`)
	reSchemeSlash  = regexp.MustCompile(`(?i)^[a-z][a-z0-9+\-.]*://`)
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
	order := func(lo, up string) []string {
		if m.upperFirst {
			return []string{up, lo}
		}
		return []string{lo, up}
	}
	httpV, httpN, httpSet := env.firstSet(order("http_proxy", "HTTP_PROXY")...)
	if httpSet && httpV == "" {
		if other := order("http_proxy", "HTTP_PROXY")[1]; env[other] != "" {
			notes = append(notes, fmt.Sprintf("%s ignored: %s is set to \"\", which wins", other, httpN))
		}
	}
	httpsV, httpsN, httpsSet := env.firstSet(order("https_proxy", "HTTPS_PROXY")...)
	if httpsSet && httpsV == "" {
		if other := order("https_proxy", "HTTPS_PROXY")[1]; env[other] != "" {
			notes = append(notes, fmt.Sprintf("%s ignored: %s is set to \"\", which wins", other, httpsN))
		}
	}
	if m.schemeless {
		if httpV != "" && !reSchemeSlash.MatchString(httpV) {
			httpV = "http://" + httpV
		}
		if httpsV != "" && !reSchemeSlash.MatchString(httpsV) {
			httpsV = "https://" + httpsV
		}
	}
	// The constructor builds both agents: a bad value throws for every request.
	for _, pv := range [][2]string{{httpV, httpN}, {httpsV, httpsN}} {
		if pv[0] == "" {
			continue
		}
		if err := undiciProxyURL(pv[0]); err != nil {
			return fail(pv[1]+": "+err.Error()+" (the agent constructor throws)", notes...)
		}
		if s := schemeOf(pv[0]); !m.socks && (s == "socks5" || s == "socks") {
			return fail(fmt.Sprintf("%s: %s proxies are not supported before undici 7.23 (the agent throws, for every request)", pv[1], s), notes...)
		}
	}
	np, npName, _ := env.firstSet(order("no_proxy", "NO_PROXY")...)
	host := lower(whatwgHost(t))
	if m.bareV6 {
		host = reBracketed.ReplaceAllString(host, "$1")
	}
	if m.trailDot && len(host) > 1 && strings.HasSuffix(host, ".") {
		host = host[:len(host)-1]
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
	switch schemeOf(val) {
	case "http", "https":
	case "socks5", "socks":
	default:
		return fail(fmt.Sprintf("%s: undici supports only http://, https:// and socks5:// proxies (the request throws)", name), notes...)
	}
	return verdict{d: DecisionProxy, proxy: val, reason: fmt.Sprintf("proxy from %s; no %s entry matches %s", name, orNoProxy(npName), host), notes: notes, np: np}
}

func (m undiciModel) bypass(np, host string, port int) (string, bool) {
	type entry struct {
		raw, host string
		port      int
		wildcard  bool
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
		if m.trailDot && len(h) > 1 && strings.HasSuffix(h, ".") {
			h = h[:len(h)-1]
		}
		entries = append(entries, entry{raw, lower(h), p, m.wildcard && strings.HasPrefix(raw, "*")})
	}
	if len(entries) == 0 {
		return "", false
	}
	if !m.wildcard && np == "*" {
		return "*", true
	}
	for _, e := range entries {
		if m.wildcard && e.host == "*" {
			if e.port != 0 && e.port != port {
				continue
			}
			return e.raw, true
		}
		if e.port != 0 && e.port != port {
			continue
		}
		if m.stripDot {
			if (!e.wildcard && host == e.host) || strings.HasSuffix(host, "."+e.host) {
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

// pfeModel is proxy-from-env's getProxyForUrl (axios uses 1.x before 1.14,
// 2.x since).
type pfeModel struct {
	name string
	v1   bool // 1.x: npm_config_* first, url.parse (IP literals as written)
	// whatwg: the URL was already normalized by the caller (axios passes
	// its own WHATWG-parsed URL), so 1.x sees the normalized host too.
	whatwg bool
}

// pfeEnv is getEnv: lower || UPPER || "".
func pfeEnv(env Env, key string) (string, string) {
	return env.nonEmpty(lower(key), upper(key))
}

func (m pfeModel) decide(env Env, t *target) verdict {
	host := whatwgHost(t)
	if m.v1 && !m.whatwg && t.ip.IsValid() {
		// url.parse keeps an IP literal as written (lower-cased); names
		// are lower-cased and converted to punycode, as in WHATWG.
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

var (
	reGARule  = regexp.MustCompile(`^(.+?)(?::(\d+))?$`)
	reGASplit = regexp.MustCompile(`[\s,]+`)
)

// gaModel is global-agent's createGlobalProxyAgent + Agent.addRequest.
type gaModel struct {
	name string
	// v3 (2.2-3.0): values read with ||, so an empty HTTPS_PROXY falls
	// back to HTTP_PROXY; the request URL is read with url.parse (an IPv6
	// host without brackets becomes host "fd00", port "1"); empty NO_PROXY
	// entries (a trailing comma, blanks at the ends) make it throw.
	v3 bool
	// broken (4.0.0-4.1.2): the published package's main file is missing,
	// require('global-agent') fails.
	broken bool
}

func (m gaModel) decide(env Env, t *target) verdict {
	if m.broken {
		return fail("global-agent 4.0.0-4.1.2 as published cannot be loaded: its main file dist/src/index.js is missing (require fails with MODULE_NOT_FOUND)")
	}
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
	if t.scheme == "https" && (httpsSet && (!m.v3 || httpsV != "")) {
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
		// The request URL is rebuilt as protocol//hostname[:port]path, the
		// port left out when it is 80 or 443; an IPv6 hostname has no
		// brackets there.
		hostname, port := t.hostname, ""
		if t.port != 80 && t.port != 443 {
			port = strconv.Itoa(int(t.port))
		}
		if t.v6 {
			if !m.v3 {
				return fail("global-agent throws on IPv6 targets when NO_PROXY is set (it builds the URL without brackets)", notes...)
			}
			// url.parse("http://fd00::1/"): host "fd00", port "1" (Node 26's
			// url.parse throws on it instead).
			h := lower(t.host)
			if port != "" {
				h += ":" + port
			}
			hostname, port = h, ""
			if i := strings.IndexByte(h, ':'); i >= 0 {
				hostname = h[:i]
				if last := h[strings.LastIndexByte(h, ':')+1:]; last != "" && allDigits(last) {
					port = last
				}
			}
			notes = append(notes, "global-agent 3 reads an IPv6 target as host "+q(hostname)+" (url.parse on a URL without brackets; on Node >= 26 that throws)")
		}
		rules := reGASplit.Split(np, -1)
		for _, rule := range rules {
			if rule == "" {
				if m.v3 {
					return fail(fmt.Sprintf("global-agent 3 throws on an empty NO_PROXY entry (%s)", q(np)), notes...)
				}
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
			if globMatch(hostname, mm[1]) && (mm[2] == "" || (port != "" && port == mm[2])) {
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
	if t.scheme == "https" && name == ns+"HTTP_PROXY" {
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
