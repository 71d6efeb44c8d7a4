package noproxy

import (
	"fmt"
	"strconv"
	"strings"
)

// pyProxies is urllib.request.getproxies_environment: any-case *_proxy
// variables, then the all-lower-case names override (an empty lower-case
// value deletes the key); REQUEST_METHOD drops the non-lower-case http entry.
type pyProxy struct{ value, name string }

func pyProxies(env Env) map[string]pyProxy {
	d := map[string]pyProxy{}
	for _, n := range env.sortedNames() {
		v := env[n]
		ln := lower(n)
		if v != "" && len(ln) >= 6 && ln[len(ln)-6:] == "_proxy" {
			d[ln[:len(ln)-6]] = pyProxy{v, n}
		}
	}
	if _, cgi := env["REQUEST_METHOD"]; cgi {
		delete(d, "http")
	}
	for _, n := range env.sortedNames() {
		if len(n) >= 6 && n[len(n)-6:] == "_proxy" {
			k := lower(n[:len(n)-6])
			if v := env[n]; v != "" {
				d[k] = pyProxy{v, n}
			} else {
				delete(d, k)
			}
		}
	}
	return d
}

// pyBypass is urllib.request.proxy_bypass_environment(host).
func pyBypass(np, host string) (string, bool) {
	if np == "*" {
		return "*", true
	}
	host = lower(host)
	hostonly := host
	if i := strings.LastIndex(host, ":"); i >= 0 && allDigits(host[i+1:]) {
		hostonly = host[:i]
	}
	for _, name := range strings.Split(np, ",") {
		raw := strings.TrimSpace(name)
		name = pyStrip(name)
		if name == "" {
			continue
		}
		name = lower(strings.TrimLeft(name, "."))
		if hostonly == name || host == name {
			return raw, true
		}
		if strings.HasSuffix(hostonly, "."+name) || strings.HasSuffix(host, "."+name) {
			return raw, true
		}
	}
	return "", false
}

// pyStrip is str.strip() for ASCII whitespace.
func pyStrip(s string) string { return strings.Trim(s, " \t\n\r\f\v") }

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// pyNetloc is urllib's Request.host: the URL authority as written (brackets
// kept), with ":port" only when the URL has one.
func pyNetloc(t *target) string {
	h := t.host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if t.portStr != "" {
		h += ":" + t.portStr
	}
	return h
}

func decideURLLib(env Env, t *target) verdict { return urllibModel{}.decide(env, t) }

// urllibModel is urllib.request at one range of Python versions.
type urllibModel struct {
	// asciiOnly (3.6): a non-ASCII host name fails even direct (http.client
	// encodes the Host header as ASCII).
	asciiOnly bool
}

func (m urllibModel) decide(env Env, t *target) verdict {
	v := m.decideAny(env, t)
	if m.asciiOnly && v.d == DecisionDirect && !isASCII(t.host) {
		return fail(v.reason+"; Python 3.6's http.client cannot send a non-ASCII host name (UnicodeEncodeError)", v.notes...)
	}
	return v
}

func (m urllibModel) decideAny(env Env, t *target) verdict {
	var notes []string
	d := pyProxies(env)
	p, ok := d[t.scheme]
	if !ok {
		if _, cgi := env["REQUEST_METHOD"]; cgi && t.scheme == "http" && env["HTTP_PROXY"] != "" {
			notes = append(notes, "HTTP_PROXY ignored: REQUEST_METHOD is set (CGI rule); only lower-case http_proxy is used")
		}
		if v, set := env[t.scheme+"_proxy"]; set && v == "" && env[upper(t.scheme)+"_PROXY"] != "" {
			notes = append(notes, fmt.Sprintf("%s ignored: %s_proxy is set to \"\", which removes it", upper(t.scheme)+"_PROXY", t.scheme))
		}
		if t.scheme == "https" && d["http"].value != "" {
			notes = append(notes, "http_proxy is not used for https:// URLs")
		}
		return direct(unsetReason(t.scheme+"_proxy", upper(t.scheme)+"_PROXY"), notes...)
	}
	np := d["no"]
	if np.value != "" {
		if hit, ok := pyBypass(np.value, pyNetloc(t)); ok {
			return direct(fmt.Sprintf("matched entry %s in %s", q(hit), np.name), notes...)
		}
	}
	proxy := p.value
	if !strings.Contains(proxy, "://") {
		proxy = "http://" + proxy
	}
	reason := fmt.Sprintf("proxy from %s; no %s entry matches %s", p.name, orNoProxy(np.name), pyNetloc(t))
	if s := schemeOf(proxy); t.scheme == "http" && s != "http" && s != "https" {
		// ProxyHandler starts over with the proxy's scheme as the URL type.
		return fail(fmt.Sprintf("%s; urllib has no handler for %s:// proxies (unknown url type)", reason, s), notes...)
	}
	if !isASCII(t.host) {
		return fail(reason+"; urllib cannot send a non-ASCII host name to a proxy (UnicodeEncodeError: it does not convert IDN names)", notes...)
	}
	return verdict{d: DecisionProxy, proxy: proxy, reason: reason, notes: notes, np: np.value}
}

func orNoProxy(name string) string {
	if name == "" {
		return "no_proxy"
	}
	return name
}

// decideRequests is requests' should_bypass_proxies + resolve_proxies
// (2.34: names at label boundaries).
func decideRequests(env Env, t *target) verdict { return requestsModel{}.decide(env, t) }

// requestsModel is requests at one range of versions.
type requestsModel struct {
	// rawSuffix (< 2.34): a name entry matches any host (or host:port)
	// ending in it, so example.com also covers notexample.com.
	rawSuffix bool
}

func (m requestsModel) decide(env Env, t *target) verdict {
	var notes []string
	// requests prepares the URL first: a name in punycode, an IP literal
	// as written (lower case, no brackets).
	hostname := t.hostname
	if t.ip.IsValid() {
		hostname = lower(t.host)
	}
	np, npName := env.nonEmpty("no_proxy", "NO_PROXY")
	if np != "" {
		var entries []string
		for _, e := range strings.Split(strings.ReplaceAll(np, " ", ""), ",") {
			if e != "" {
				entries = append(entries, e)
			}
		}
		if pyIsIPv4(hostname) {
			for _, e := range entries {
				if pyValidCIDR(e) {
					if pyInNetwork(hostname, e) {
						return direct(fmt.Sprintf("matched entry %s (CIDR) in %s", q(e), npName))
					}
				} else if hostname == e {
					return direct(fmt.Sprintf("matched entry %s in %s", q(e), npName))
				}
			}
		} else {
			hwp := hostname
			if t.portStr != "" {
				hwp += ":" + strconv.Itoa(int(t.port))
			}
			for _, e := range entries {
				if m.rawSuffix {
					if strings.HasSuffix(hostname, e) || strings.HasSuffix(hwp, e) {
						return direct(fmt.Sprintf("matched entry %s in %s (a raw suffix match)", q(e), npName))
					}
					continue
				}
				h := strings.TrimLeft(e, ".")
				if hostname == h || hwp == h || strings.HasSuffix(hostname, "."+h) || strings.HasSuffix(hwp, "."+h) {
					return direct(fmt.Sprintf("matched entry %s in %s", q(e), npName))
				}
			}
		}
	}
	d := pyProxies(env)
	if no := d["no"]; no.value != "" {
		if hit, ok := pyBypass(no.value, hostname); ok {
			return direct(fmt.Sprintf("matched entry %s in %s (urllib's rules)", q(hit), no.name))
		}
	}
	p, ok := d[t.scheme]
	if !ok {
		p, ok = d["all"]
	}
	if !ok {
		if _, cgi := env["REQUEST_METHOD"]; cgi && t.scheme == "http" && env["HTTP_PROXY"] != "" {
			notes = append(notes, "HTTP_PROXY ignored: REQUEST_METHOD is set (CGI rule)")
		}
		return direct(unsetReason(t.scheme+"_proxy", upper(t.scheme)+"_PROXY", "all_proxy", "ALL_PROXY"), notes...)
	}
	proxy, err := proxyWithDefaultScheme(p.value, "http", "https", "socks4", "socks4a", "socks5", "socks5h")
	if err != nil {
		return fail(fmt.Sprintf("%s: %v", p.name, err), notes...)
	}
	reason := fmt.Sprintf("proxy from %s; no %s entry matches %s", p.name, orNoProxy(npName), hostname)
	if strings.HasPrefix(schemeOf(proxy), "socks") {
		return fail(reason+"; requests needs PySocks (requests[socks]) for socks proxies and fails without it (InvalidSchema), as here", notes...)
	}
	return verdict{d: DecisionProxy, proxy: proxy, reason: reason, notes: notes, np: np}
}

// pyIsIPv4 is socket.inet_aton: 1 to 4 numeric parts (decimal, octal, hex).
func pyIsIPv4(s string) bool {
	_, ok := inetAton(s)
	return ok
}

func inetAton(s string) (uint32, bool) {
	parts := strings.Split(s, ".")
	if len(parts) == 0 || len(parts) > 4 {
		return 0, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		if p == "" {
			return 0, false
		}
		base := 10
		switch {
		case strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X"):
			base, p = 16, p[2:]
			if p == "" {
				vals[i] = 0
				continue
			}
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return 0, false
		}
		vals[i] = v
	}
	var out uint64
	last := len(vals) - 1
	for i := 0; i < last; i++ {
		if vals[i] > 255 {
			return 0, false
		}
		out |= vals[i] << (24 - 8*uint(i))
	}
	if vals[last] >= 1<<(8*uint(4-last)) {
		return 0, false
	}
	return uint32(out | vals[last]), true
}

// pyValidCIDR is requests' is_valid_cidr: one '/', mask 1..32, inet_aton address.
func pyValidCIDR(s string) bool {
	if strings.Count(s, "/") != 1 {
		return false
	}
	a, m, _ := strings.Cut(s, "/")
	mask, err := strconv.Atoi(strings.TrimSpace(m))
	if err != nil || mask < 1 || mask > 32 {
		return false
	}
	return pyIsIPv4(a)
}

func pyInNetwork(ip, network string) bool {
	a, _ := inetAton(ip)
	n, m, _ := strings.Cut(network, "/")
	na, _ := inetAton(n)
	bits, _ := strconv.Atoi(strings.TrimSpace(m))
	mask := uint32(0xffffffff) << (32 - uint(bits))
	return a&mask == na&mask
}
