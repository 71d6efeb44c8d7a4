package noproxy

import (
	"fmt"
	"net/netip"
	"strings"
)

// curlModel is libcurl's variable selection and proxy_check_noproxy.
type curlModel struct {
	name      string
	cidr4     bool // IPv4 CIDR entries (>= 7.86)
	v6Typed   bool // IPv6 hosts are matched as addresses, with CIDR (>= 8.18)
	commaOnly bool // a blank-separated second name ends parsing (>= 8.9)
}

func (m curlModel) decide(env Env, t *target) verdict {
	var notes []string
	var val, name string
	if t.scheme == "http" {
		val, name = env.nonEmpty("http_proxy")
		if v := env["HTTP_PROXY"]; v != "" && val == "" {
			notes = append(notes, "HTTP_PROXY ignored: curl reads only lower-case http_proxy")
		}
	} else {
		val, name = env.nonEmpty("https_proxy", "HTTPS_PROXY")
	}
	if val == "" {
		val, name = env.nonEmpty("all_proxy", "ALL_PROXY")
	}
	if val == "" {
		if t.scheme == "http" {
			return direct(unsetReason("http_proxy", "all_proxy", "ALL_PROXY"), notes...)
		}
		return direct(unsetReason("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"), notes...)
	}
	np, npName := env.nonEmpty("no_proxy", "NO_PROXY")
	if np != "" {
		if hit, ok := m.noproxy(np, t); ok {
			return verdict{d: DecisionDirect, reason: fmt.Sprintf("matched entry %s in %s", q(hit), npName), notes: notes}
		}
	}
	p, err := proxyWithDefaultScheme(val, "http", "https", "socks4", "socks4a", "socks5", "socks5h")
	if err != nil {
		return fail(fmt.Sprintf("%s: %v", name, err), notes...)
	}
	return verdict{d: DecisionProxy, proxy: p, reason: fmt.Sprintf("proxy from %s; no no_proxy entry matches %s", name, t.hostname), notes: notes, np: np}
}

// noproxy returns the matching token, if any.
func (m curlModel) noproxy(np string, t *target) (string, bool) {
	if np == "*" {
		return "*", true
	}
	const (
		typeHost = iota
		type4
		type6
	)
	name := t.hostname
	typ := typeHost
	switch {
	case t.ip.IsValid() && t.ip.Is4():
		typ = type4
	case t.v6 && m.v6Typed:
		typ = type6
	}
	if typ == typeHost {
		name = strings.TrimSuffix(name, ".")
	}
	blank := func(c byte) bool { return c == ' ' || c == '\t' }
	i := 0
	for i < len(np) {
		for i < len(np) && blank(np[i]) {
			i++
		}
		start := i
		for i < len(np) && !blank(np[i]) && np[i] != ',' {
			i++
		}
		token := np[start:i]
		if token != "" && m.tokenMatch(typ == type4, typ == type6, name, token) {
			return token, true
		}
		for i < len(np) && blank(np[i]) {
			i++
		}
		if i < len(np) && np[i] != ',' {
			if m.commaOnly {
				return "", false
			}
			continue
		}
		for i < len(np) && np[i] == ',' {
			i++
		}
	}
	return "", false
}

func (m curlModel) tokenMatch(is4, is6 bool, name, token string) bool {
	if is4 || is6 {
		if is4 && !m.cidr4 && strings.Contains(token, "/") {
			return false
		}
		check, bitsStr, hasSlash := strings.Cut(token, "/")
		bits := 0
		if hasSlash {
			bits = atoi(bitsStr)
		}
		h, err1 := netip.ParseAddr(name)
		c, err2 := netip.ParseAddr(check)
		if err1 != nil || err2 != nil || h.Is4() != c.Is4() || c.Zone() != "" {
			return false
		}
		max := h.BitLen()
		if bits < 0 || bits > max {
			return false
		}
		if bits == 0 || bits == max {
			return h == c
		}
		return netip.PrefixFrom(c, bits).Masked().Contains(h)
	}
	// Host names: drop one trailing and one leading dot from the token.
	token = strings.TrimSuffix(token, ".")
	token = strings.TrimPrefix(token, ".")
	if len(token) == len(name) {
		return strings.EqualFold(token, name)
	}
	if len(token) < len(name) {
		return name[len(name)-len(token)-1] == '.' && strings.EqualFold(token, name[len(name)-len(token):])
	}
	return false
}

// atoi is C's atoi: leading digits, 0 when none; huge values count as invalid.
func atoi(s string) int {
	n := 0
	for i := 0; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int(s[i]-'0')
		if n > 1<<20 {
			return -1
		}
	}
	return n
}
