package noproxy

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// axiosModel is axios's Node http adapter (setProxy): the proxy comes from
// proxy-from-env (1.x before 1.14, 2.x from 1.14) on the URL axios has
// normalized, and from 1.15 axios runs its own NO_PROXY pass as well
// (lib/helpers/shouldBypassProxy.js): the request goes direct when either
// says so.
type axiosModel struct {
	name string
	pfe2 bool // >= 1.14: proxy-from-env 2.x (no npm_config_* variables)
	// v6DirectFails: before 1.7.7 a request that goes direct to an IPv6
	// literal fails (the bracketed host is looked up as a name).
	v6DirectFails bool
	// bypass is the revision of axios's own NO_PROXY pass, 0 for none
	// (before 1.15.0); see the axBypass* constants.
	bypass int
	// tunnel: from 1.16 an https request goes through a CONNECT tunnel to
	// the proxy whatever its scheme (a socks5:// value is then dialled
	// like an HTTP proxy); before, and for http requests, the proxy's scheme
	// is the request's protocol and only http:/https: work.
	tunnel bool
	// nodeDefer: from 1.18.1, when Node's own proxy support is on
	// (NODE_USE_ENV_PROXY=1, Node >= 22.21 / 24.5) axios leaves proxying to
	// Node's agents.
	nodeDefer bool
}

// Revisions of axios's NO_PROXY pass (each adds to the one before).
const (
	axBypassBasic     = 1 + iota // 1.15.0: trailing dots, [v6], host:port, "*x"/".x" suffixes, exact names
	axBypassLoopback             // 1.15.1: loopback names and addresses match each other
	axBypassUnmap                // 1.16.0: IPv4-mapped IPv6 read as IPv4
	axBypassAnyZero              // 1.18.0: 0.0.0.0 and :: count as loopback
	axBypassIPv4Norm             // 1.19.0: IPv4 shorthand/octal/hex; a "*" entry anywhere
	axBypassCIDR                 // 1.20.0: CIDR entries
	axBypassEntryNorm            // 1.21.0: IPv6 entries compressed, IDN entries to punycode
)

func (m axiosModel) decide(env Env, t *target) verdict {
	var notes []string
	if m.nodeDefer && env["NODE_USE_ENV_PROXY"] == "1" {
		v := decideNodeCore(env, t)
		v.notes = append([]string{"NODE_USE_ENV_PROXY=1: axios leaves the proxy to Node's own agents (on Node >= 22.21 / 24.5), so Node's rules apply"}, v.notes...)
		return v
	}
	if env["NODE_USE_ENV_PROXY"] == "1" {
		notes = append(notes, "NODE_USE_ENV_PROXY=1 also turns on Node's own proxying under this axios (the two together are not modelled)")
	}
	pfe := pfeModel{name: m.name, v1: !m.pfe2, whatwg: true}
	v := pfe.decide(env, t)
	if v.d == DecisionDirect {
		v.notes = append(v.notes, notes...)
		return m.directTo(t, v)
	}
	if m.bypass > 0 {
		if hit, name, ok := m.bypassEnv(env, t); ok {
			return m.directTo(t, direct(fmt.Sprintf("matched entry %s in %s (axios's own NO_PROXY check)", q(hit), name), notes...))
		}
	}
	proxy := v.proxy
	scheme := schemeOf(proxy)
	if !(m.tunnel && t.scheme == "https") && scheme != "http" && scheme != "https" {
		return fail(fmt.Sprintf("%s (the proxy's scheme is the request's protocol: Node accepts only http: and https:)", v.reason), notes...)
	}
	v.notes = append(v.notes, notes...)
	return v
}

// directTo applies the IPv6 bug of axios < 1.7.7 to a direct decision.
func (m axiosModel) directTo(t *target, v verdict) verdict {
	if m.v6DirectFails && t.v6 {
		return fail(v.reason + "; axios before 1.7.7 cannot connect to an IPv6 literal (it looks the bracketed host up as a name)")
	}
	return v
}

var reAxSplit = regexp.MustCompile(`[\s,]+`)

// bypassEnv is shouldBypassProxy: no_proxy || NO_PROXY, lower-cased.
func (m axiosModel) bypassEnv(env Env, t *target) (hit, name string, ok bool) {
	np, name := env.nonEmpty("no_proxy", "NO_PROXY")
	np = lower(np)
	if np == "" {
		return "", "", false
	}
	if np == "*" {
		return "*", name, true
	}
	host := m.normHost(strings.Trim(whatwgHost(t), "[]"))
	hostIP := axIPBytes(host)
	for _, entry := range reAxSplit.Split(np, -1) {
		if entry == "" {
			continue
		}
		if m.bypass >= axBypassIPv4Norm && entry == "*" {
			return entry, name, true
		}
		if m.bypass >= axBypassCIDR && strings.Contains(entry, "/") {
			if p, ok := m.cidr(entry); ok && hostIP.IsValid() && hostIP.Is4() == p.Addr().Is4() && p.Contains(hostIP) {
				return entry, name, true
			}
			continue
		}
		eh, ep := axEntry(entry)
		eh = m.normHost(eh)
		if eh == "" || (ep != 0 && ep != int(t.port)) {
			continue
		}
		eh = strings.TrimPrefix(eh, "*")
		if strings.HasPrefix(eh, ".") {
			if strings.HasSuffix(host, eh) {
				return entry, name, true
			}
			continue
		}
		if host == eh || (m.bypass >= axBypassLoopback && m.loopback(host) && m.loopback(eh)) {
			return entry, name, true
		}
	}
	return "", "", false
}

// axEntry splits "[v6]:port", "[v6]" and "host:port" (one colon only).
func axEntry(e string) (string, int) {
	if strings.HasPrefix(e, "[") {
		if i := strings.IndexByte(e, ']'); i >= 0 {
			port := 0
			if rest := e[i+1:]; strings.HasPrefix(rest, ":") && rest != ":" && allDigits(rest[1:]) {
				port = jsPort(rest[1:])
			}
			return e[1:i], port
		}
	}
	if strings.Count(e, ":") == 1 {
		i := strings.IndexByte(e, ':')
		if i+1 < len(e) && allDigits(e[i+1:]) {
			return e[:i], jsPort(e[i+1:])
		}
	}
	return e, 0
}

// normHost is normalizeNoProxyHost at m's revision.
func (m axiosModel) normHost(h string) string {
	if h == "" {
		return h
	}
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	h = strings.TrimRight(h, ".")
	if m.bypass >= axBypassEntryNorm {
		if strings.Contains(h, ":") {
			a, err := netip.ParseAddr(h)
			if err != nil || a.Zone() != "" {
				return h
			}
			h = whatwgIPv6(a)
		} else if !isASCII(h) {
			prefix := h[:len(h)-len(strings.TrimLeft(h, "*."))]
			a, err := idnaLookup(h[len(prefix):])
			if err != nil || a == "" {
				return ""
			}
			h = prefix + strings.TrimRight(a, ".")
		}
	}
	if m.bypass >= axBypassIPv4Norm {
		if v4 := axNormIPv4(h); v4 != h {
			return v4
		}
	}
	if m.bypass >= axBypassUnmap {
		return axUnmap(h)
	}
	return h
}

var (
	reAxMappedDotted = regexp.MustCompile(`(?i)^(?:::|(?:0{1,4}:){1,4}:|(?:0{1,4}:){5})ffff:(\d+\.\d+\.\d+\.\d+)$`)
	reAxMappedHex    = regexp.MustCompile(`(?i)^(?:::|(?:0{1,4}:){1,4}:|(?:0{1,4}:){5})ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$`)
	reAxV4Chars      = regexp.MustCompile(`^[0-9.xXa-fA-F]+$`)
	reAxV4Octet      = regexp.MustCompile(`^(?:0|[1-9]\d{0,2})$`)
	reAxV6Group      = regexp.MustCompile(`(?i)^[0-9a-f]{1,4}$`)
	reAxCIDR         = regexp.MustCompile(`^(.+)/(0|[1-9]\d{0,2})$`)
	reAxLoopDotted   = regexp.MustCompile(`(?i)^::ffff:(\d+\.\d+\.\d+\.\d+)$`)
	reAxLoopHex      = regexp.MustCompile(`(?i)^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$`)
	reAxLastOne      = regexp.MustCompile(`^0*1$`)
)

// axUnmap writes an IPv4-mapped IPv6 address as dotted IPv4.
func axUnmap(h string) string {
	if !strings.Contains(h, ":") {
		return h
	}
	if mm := reAxMappedDotted.FindStringSubmatch(h); mm != nil {
		return mm[1]
	}
	if mm := reAxMappedHex.FindStringSubmatch(h); mm != nil {
		hi, _ := strconv.ParseUint(mm[1], 16, 16)
		lo, _ := strconv.ParseUint(mm[2], 16, 16)
		return fmt.Sprintf("%d.%d.%d.%d", hi>>8, hi&0xff, lo>>8, lo&0xff)
	}
	return h
}

// axOctet parses one IPv4 part: 0x hex, 0-prefixed octal, decimal; -1 if
// none (a 0-prefixed part with 8 or 9 is refused).
func axOctet(s string) int64 {
	switch {
	case len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X"):
		n, err := strconv.ParseInt(s[2:], 16, 64)
		if err != nil {
			return -1
		}
		return n
	case len(s) > 1 && s[0] == '0':
		n, err := strconv.ParseInt(s[1:], 8, 64)
		if err != nil {
			return -1
		}
		return n
	case s != "" && allDigits(s):
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	return -1
}

// axNormIPv4 writes IPv4 shorthand, octal and hex forms in dotted decimal;
// anything else is returned unchanged.
func axNormIPv4(h string) string {
	if h == "" || strings.Contains(h, ":") {
		return h
	}
	s := strings.TrimRight(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), ".")
	if !reAxV4Chars.MatchString(s) {
		return h
	}
	parts := strings.Split(s, ".")
	for _, p := range parts {
		if p == "" {
			return h
		}
	}
	if len(parts) == 1 || len(parts) > 4 {
		return h
	}
	var out []int64
	for _, p := range parts[:len(parts)-1] {
		n := axOctet(p)
		if n < 0 || n > 255 {
			return h
		}
		out = append(out, n)
	}
	slots := 4 - len(out)
	tail := axOctet(parts[len(parts)-1])
	if tail < 0 || tail > int64(1)<<(8*slots)-1 {
		return h
	}
	tailOctets := make([]int64, slots)
	for i := slots - 1; i >= 0; i-- {
		tailOctets[i] = tail & 0xff
		tail >>= 8
	}
	out = append(out, tailOctets...)
	str := make([]string, 4)
	for i, n := range out {
		str[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(str, ".")
}

// axIPBytes is ipToBytes: dotted decimal IPv4 (no leading zeros) or IPv6
// written with hex groups (no dotted tail, no zone).
func axIPBytes(h string) netip.Addr {
	if h == "" {
		return netip.Addr{}
	}
	if !strings.Contains(h, ":") {
		parts := strings.Split(h, ".")
		if len(parts) != 4 {
			return netip.Addr{}
		}
		var b [4]byte
		for i, p := range parts {
			n, err := strconv.Atoi(p)
			if !reAxV4Octet.MatchString(p) || err != nil || n > 255 {
				return netip.Addr{}
			}
			b[i] = byte(n)
		}
		return netip.AddrFrom4(b)
	}
	halves := strings.Split(h, "::")
	if len(halves) > 2 {
		return netip.Addr{}
	}
	var groups []string
	if halves[0] != "" {
		groups = strings.Split(halves[0], ":")
	}
	if len(halves) == 2 {
		var rear []string
		if halves[1] != "" {
			rear = strings.Split(halves[1], ":")
		}
		missing := 8 - len(groups) - len(rear)
		if missing < 1 {
			return netip.Addr{}
		}
		for i := 0; i < missing; i++ {
			groups = append(groups, "0")
		}
		groups = append(groups, rear...)
	}
	if len(groups) != 8 {
		return netip.Addr{}
	}
	var b [16]byte
	for i, g := range groups {
		if !reAxV6Group.MatchString(g) {
			return netip.Addr{}
		}
		n, _ := strconv.ParseUint(g, 16, 16)
		b[2*i], b[2*i+1] = byte(n>>8), byte(n)
	}
	return netip.AddrFrom16(b)
}

// cidr is parseCidrEntry; ok is false for an entry that is no valid CIDR
// (which then matches nothing).
func (m axiosModel) cidr(entry string) (netip.Prefix, bool) {
	mm := reAxCIDR.FindStringSubmatch(entry)
	if mm == nil {
		return netip.Prefix{}, false
	}
	bits, _ := strconv.Atoi(mm[2])
	base := mm[1]
	starts, ends := strings.HasPrefix(base, "["), strings.HasSuffix(base, "]")
	switch {
	case starts || ends:
		if !starts || !ends {
			return netip.Prefix{}, false
		}
		base = base[1 : len(base)-1]
		if !strings.Contains(base, ":") || strings.ContainsAny(base, "[]") {
			return netip.Prefix{}, false
		}
	case strings.ContainsAny(base, "[]"):
		return netip.Prefix{}, false
	}
	if base == "" || strings.HasSuffix(base, ".") {
		return netip.Prefix{}, false
	}
	wasV6 := strings.Contains(base, ":")
	if wasV6 {
		a, err := netip.ParseAddr(base)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, false
		}
		base = whatwgIPv6(a)
	} else {
		base = axNormIPv4(base)
		if a := axIPBytes(base); !a.IsValid() || !a.Is4() {
			return netip.Prefix{}, false
		}
	}
	base = axUnmap(base)
	if wasV6 && !strings.Contains(base, ":") {
		if bits < 96 {
			return netip.Prefix{}, false
		}
		bits -= 96
	}
	a := axIPBytes(base)
	if !a.IsValid() || bits > a.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, bits).Masked(), true
}

// loopback is isLoopback at m's revision.
func (m axiosModel) loopback(h string) bool {
	if h == "" {
		return false
	}
	if h == "localhost" || (m.bypass >= axBypassAnyZero && h == "0.0.0.0") {
		return true
	}
	v4loop := func(s string) bool {
		parts := strings.Split(s, ".")
		if len(parts) != 4 || parts[0] != "127" {
			return false
		}
		for _, p := range parts {
			n, err := strconv.Atoi(p)
			if p == "" || !allDigits(p) || err != nil || n > 255 {
				return false
			}
		}
		return true
	}
	if v4loop(h) {
		return true
	}
	if m.bypass >= axBypassAnyZero {
		if a := axIPBytes(h); a.IsValid() && a.Is6() && a.IsUnspecified() {
			return true
		}
	}
	if h == "::1" {
		return true
	}
	if mm := reAxLoopDotted.FindStringSubmatch(h); mm != nil {
		return v4loop(mm[1])
	}
	if mm := reAxLoopHex.FindStringSubmatch(h); mm != nil {
		hi, _ := strconv.ParseUint(mm[1], 16, 16)
		return hi >= 0x7f00 && hi <= 0x7fff
	}
	groups := strings.Split(h, ":")
	if len(groups) == 8 {
		for _, g := range groups[:7] {
			if g == "" || strings.Trim(g, "0") != "" {
				return false
			}
		}
		return reAxLastOne.MatchString(groups[7])
	}
	return false
}
