package noproxy

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

var reRubyNoProxy = regexp.MustCompile(`([^:,\s]+)(?::(\d+))?`)

// decideRuby is URI::Generic#find_proxy as Net::HTTP calls it (always the
// http_proxy name, even for https), with hostnames assumed not to resolve
// except localhost.
func decideRuby(env Env, t *target) verdict {
	if !isASCII(t.host) {
		return fail("URI() refuses a non-ASCII host name (URI::InvalidURIError: URI must be ascii only)")
	}
	v := decideRubyASCII(env, t)
	if v.d == DecisionDirect && t.ip.Is4In6() {
		// Seen with Ruby 3.1: connect to ::ffff:a.b.c.d fails (ENETUNREACH)
		// where other clients reach the IPv4 address.
		return fail(v.reason+"; Ruby's direct connection to an IPv4-mapped IPv6 literal fails (Errno::ENETUNREACH)", v.notes...)
	}
	return v
}

func decideRubyASCII(env Env, t *target) verdict {
	var notes []string
	var val, name string
	if _, cgi := env["REQUEST_METHOD"]; cgi {
		var names []string
		for n := range env {
			if strings.EqualFold(n, "http_proxy") {
				names = append(names, n)
			}
		}
		switch {
		case len(names) == 1 && names[0] == "http_proxy":
			val, name = env["http_proxy"], "http_proxy"
		case len(names) >= 2:
			val, name = env["http_proxy"], "http_proxy"
		}
		if len(names) == 1 && names[0] != "http_proxy" {
			notes = append(notes, names[0]+" ignored: REQUEST_METHOD is set (CGI rule)")
		}
		if val == "" {
			if v, ok := env["CGI_HTTP_PROXY"]; ok {
				val, name = v, "CGI_HTTP_PROXY"
			}
		}
	} else {
		v, n, _ := env.firstSet("http_proxy", "HTTP_PROXY")
		val, name = v, n
		if n == "http_proxy" && v == "" && env["HTTP_PROXY"] != "" {
			notes = append(notes, "HTTP_PROXY ignored: http_proxy is set to \"\", which wins")
		}
	}
	if t.scheme == "https" && (env["https_proxy"] != "" || env["HTTPS_PROXY"] != "") {
		notes = append(notes, "https_proxy ignored: Net::HTTP uses http_proxy for https too")
	}
	if val == "" {
		return direct(unsetReason("http_proxy", "HTTP_PROXY"), notes...)
	}
	var addr netip.Addr
	switch {
	case t.ip.IsValid():
		addr = t.ip
	case t.hostname == "localhost":
		addr = netip.MustParseAddr("127.0.0.1")
	}
	if addr.IsValid() && (addr.Is4() && addr.As4()[0] == 127 || addr == netip.IPv6Loopback()) {
		return direct("Ruby resolves the target and sends 127.x and ::1 direct", notes...)
	}
	np, npName, npSet := env.firstSet("no_proxy", "NO_PROXY")
	if npSet {
		hostname := lower(t.host)
		dot := "." + hostname
		for _, m := range reRubyNoProxy.FindAllStringSubmatch(np, -1) {
			h, p := m[1], m[2]
			if p != "" {
				if n, err := strconv.Atoi(p); err != nil || n != int(t.port) {
					continue
				}
			}
			if strings.HasPrefix(h, ".") {
				if strings.HasSuffix(hostname, lower(h)) {
					return direct(fmt.Sprintf("matched entry %s in %s", q(m[0]), npName), notes...)
				}
			} else if strings.HasSuffix(dot, "."+lower(h)) {
				return direct(fmt.Sprintf("matched entry %s in %s", q(m[0]), npName), notes...)
			}
			if addr.IsValid() {
				// The resolved address of [::ffff:a.b.c.d] is that IPv6
				// address: IPv4 entries do not cover it.
				if pfx, ok := rubyIPAddr(h); ok && pfx.Contains(addr) {
					return direct(fmt.Sprintf("matched entry %s against the resolved address %s", q(m[0]), addr), notes...)
				}
			}
		}
	}
	if !hasScheme(val) {
		return fail(fmt.Sprintf("%s: URI::InvalidURIError (no scheme://)", name), notes...)
	}
	if _, err := proxyWithDefaultScheme(val); err != nil {
		return fail(fmt.Sprintf("%s: %v", name, err), notes...)
	}
	return verdict{d: DecisionProxy, proxy: val, reason: fmt.Sprintf("proxy from %s; no %s entry matches %s", name, orNoProxy(npName), t.hostname), notes: notes, np: np}
}

// rubyIPAddr is IPAddr.new for an IPv4 address or CIDR token.
func rubyIPAddr(s string) (netip.Prefix, bool) {
	if a, m, ok := strings.Cut(s, "/"); ok {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return netip.Prefix{}, false
		}
		bits, err := strconv.Atoi(m)
		if err != nil || bits < 0 || bits > addr.BitLen() {
			return netip.Prefix{}, false
		}
		return netip.PrefixFrom(addr, bits).Masked(), true
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(addr, addr.BitLen()), true
}

// dotnetURI is HttpEnvironmentProxy.GetUriFromString: "" → none; no scheme
// → http; an unparseable value counts as unset.
func dotnetURI(v string) (string, bool) {
	if v == "" {
		return "", false
	}
	p, err := proxyWithDefaultScheme(v, "http", "https", "socks4", "socks4a", "socks5")
	if err != nil {
		return "", false
	}
	return p, true
}

// decideDotnet is HttpEnvironmentProxy (SocketsHttpHandler on Linux).
func decideDotnet(env Env, t *target) verdict {
	var notes []string
	httpP, httpN := "", ""
	if p, ok := dotnetURI(env["http_proxy"]); ok {
		httpP, httpN = p, "http_proxy"
	} else if _, cgi := env["GATEWAY_INTERFACE"]; !cgi {
		if p, ok := dotnetURI(env["HTTP_PROXY"]); ok {
			httpP, httpN = p, "HTTP_PROXY"
		}
	} else if env["HTTP_PROXY"] != "" {
		notes = append(notes, "HTTP_PROXY ignored: GATEWAY_INTERFACE is set (CGI rule)")
	}
	httpsP, httpsN := "", ""
	if p, ok := dotnetURI(env["https_proxy"]); ok {
		httpsP, httpsN = p, "https_proxy"
	} else if p, ok := dotnetURI(env["HTTPS_PROXY"]); ok {
		httpsP, httpsN = p, "HTTPS_PROXY"
	}
	allP, allN := "", ""
	if p, ok := dotnetURI(env["all_proxy"]); ok {
		allP, allN = p, "all_proxy"
	} else if p, ok := dotnetURI(env["ALL_PROXY"]); ok {
		allP, allN = p, "ALL_PROXY"
	}
	if httpP == "" {
		httpP, httpN = allP, allN
	}
	if httpsP == "" {
		httpsP, httpsN = allP, allN
	}
	val, name := httpP, httpN
	if t.scheme == "https" {
		val, name = httpsP, httpsN
	}
	if val == "" {
		return direct(unsetReason(t.scheme+"_proxy", upper(t.scheme)+"_PROXY", "all_proxy", "ALL_PROXY"), notes...)
	}
	np, npName, _ := env.firstSet("no_proxy", "NO_PROXY")
	host := t.bracketed()
	for _, s := range strings.Split(np, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if s[0] == '.' {
			if strings.EqualFold(host, s[1:]) || (len(host) >= len(s) && strings.EqualFold(host[len(host)-len(s):], s)) {
				return direct(fmt.Sprintf("matched entry %s in %s", q(s), npName), notes...)
			}
		} else if strings.EqualFold(host, s) {
			return direct(fmt.Sprintf("matched entry %s in %s", q(s), npName), notes...)
		}
	}
	return verdict{d: DecisionProxy, proxy: val, reason: fmt.Sprintf("proxy from %s; no %s entry matches %s", name, orNoProxy(npName), host), notes: notes, np: np}
}

// decideReqwest is reqwest's system proxy (hyper-util proxy::Matcher).
func decideReqwest(env Env, t *target) verdict {
	if _, cgi := env["REQUEST_METHOD"]; cgi {
		return direct("REQUEST_METHOD is set: reqwest ignores every proxy variable (CGI rule)")
	}
	parse := func(names ...string) (string, string) {
		v, n, ok := env.firstSet(names...)
		if !ok || v == "" {
			return "", n
		}
		p, err := proxyWithDefaultScheme(v, "http", "https", "socks4", "socks4a", "socks5", "socks5h")
		if err != nil {
			return "", n
		}
		return p, n
	}
	all, allN := parse("ALL_PROXY", "all_proxy")
	val, name := "", ""
	if t.scheme == "https" {
		val, name = parse("HTTPS_PROXY", "https_proxy")
	} else {
		val, name = parse("HTTP_PROXY", "http_proxy")
	}
	if val == "" {
		val, name = all, allN
	}
	if val == "" {
		return direct(unsetReason(upper(t.scheme)+"_PROXY", t.scheme+"_proxy", "ALL_PROXY", "all_proxy"))
	}
	np, npName, _ := env.firstSet("NO_PROXY", "no_proxy")
	host := t.hostname
	for _, part := range strings.Split(np, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		hit := direct(fmt.Sprintf("matched entry %s in %s", q(part), npName))
		if pfx, err := netip.ParsePrefix(part); err == nil {
			if t.ip.IsValid() && pfx.Masked().Contains(t.ip) {
				return hit
			}
			continue
		}
		if a, err := netip.ParseAddr(part); err == nil {
			if t.ip.IsValid() && a == t.ip {
				return hit
			}
			continue
		}
		if t.ip.IsValid() {
			continue
		}
		d := lower(part)
		if d == "*" || d == host || d == "."+host ||
			(strings.HasSuffix(host, d) && (strings.HasPrefix(d, ".") || (len(host) > len(d) && host[len(host)-len(d)-1] == '.'))) {
			return hit
		}
	}
	return verdict{d: DecisionProxy, proxy: val, reason: fmt.Sprintf("proxy from %s; no %s entry matches %s", name, orNoProxy(npName), host), np: np}
}
