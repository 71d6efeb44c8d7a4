package noproxy

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// gRPC clients (issue 24, item 5). A gRPC channel's target is host:port,
// not a URL: a URL here stands for the target its host (as written) and
// its port make — http:// a plaintext channel, https:// a TLS one — and
// the path is ignored. Each stack reads the variables its own way:
//
//   - grpc-go (internal/resolver/delegatingresolver, since the delegating
//     resolver): http.ProxyFromEnvironment for https://host:port, whatever
//     the transport — HTTPS_PROXY/https_proxy and NO_PROXY/no_proxy by
//     golang.org/x/net/http/httpproxy's rules, read once per process;
//     grpc_proxy and no_grpc_proxy are not read.
//   - grpc-js (packages/grpc-js/src/http_proxy.ts): lower-case grpc_proxy,
//     else https_proxy, else http_proxy (the first non-empty); a WHATWG URL
//     whose scheme must be http:; no_grpc_proxy, else no_proxy, split on
//     commas as they are. Since 1.13.0 an entry matches by raw suffix of
//     the target host (case-sensitive, so "" matches everything) or, for an
//     IPv4 target, as an IPv4 CIDR; before, only an entry equal to the host.
//   - gRPC C-core (src/core/ext/filters/client_channel/http_proxy.cc, the
//     Python grpcio, Ruby, PHP, C++ stacks): grpc_proxy, else https_proxy,
//     else http_proxy — the first that is set; an RFC 3986 URI whose scheme
//     must be exactly "http"; no_grpc_proxy, else no_proxy (the first set),
//     entries matched as case-insensitive raw suffixes of the target host.

// grpcTarget is the channel target t stands for: the host as written and
// the port ("[v6]:port" for IPv6).
func grpcTarget(t *target) string {
	return netJoin(t.host, t.port)
}

func netJoin(host string, port uint16) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(int(port))
}

// decideGRPCGo follows grpc-go's delegating resolver: net/http's
// ProxyFromEnvironment asked for https://<target>.
func decideGRPCGo(env Env, t *target) verdict {
	tt := *t
	tt.scheme = "https"
	v := decideGo(env, &tt)
	if t.scheme == "http" {
		v.notes = append(v.notes, "grpc-go looks the proxy up as for https://"+grpcTarget(t)+" whatever the transport: HTTPS_PROXY, never HTTP_PROXY")
	}
	for _, n := range []string{"grpc_proxy", "no_grpc_proxy"} {
		if env[n] != "" {
			v.notes = append(v.notes, n+" ignored: grpc-go does not read it")
		}
	}
	if v.d == DecisionProxy {
		v.reason += " (grpc-go sends CONNECT " + grpcTarget(t) + " in plaintext, whatever the proxy URL's scheme)"
	}
	return v
}

// grpcUpperIgnored notes the upper-case variables a lower-case-only stack
// does not read.
func grpcUpperIgnored(env Env, who string, names ...string) []string {
	var notes []string
	for _, n := range names {
		if env[n] != "" {
			notes = append(notes, n+" ignored: "+who+" reads only lower-case variables")
		}
	}
	return notes
}

// grpcJSModel is grpc-js's http_proxy.ts; suffix is the matching of 1.13.0
// and later (raw suffix, IPv4 CIDR), else exact.
type grpcJSModel struct{ suffix bool }

func (m grpcJSModel) decide(env Env, t *target) verdict {
	notes := grpcUpperIgnored(env, "grpc-js", "HTTPS_PROXY", "HTTP_PROXY", "GRPC_PROXY", "NO_PROXY")
	val, name := env.nonEmpty("grpc_proxy", "https_proxy", "http_proxy")
	if name == "" {
		return direct(unsetReason("grpc_proxy", "https_proxy", "http_proxy"), notes...)
	}
	// new URL(value): a value without a scheme does not parse.
	if !hasScheme(val) {
		return direct(name+" ignored: grpc-js cannot parse it as a URL (no scheme)", notes...)
	}
	u, err := url.Parse(val)
	if err != nil || u.Hostname() == "" {
		return direct(name+" ignored: grpc-js cannot parse it as a URL", notes...)
	}
	if s := schemeOf(val); s != "http" {
		return direct(name+" ignored: grpc-js takes only http:// proxies ("+s+":// is not supported)", notes...)
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	proxy := "http://" + netJoin(strings.Trim(u.Hostname(), "[]"), mustPort(port))
	np, npName := env["no_grpc_proxy"], "no_grpc_proxy"
	if np == "" {
		np, npName = env["no_proxy"], "no_proxy"
	}
	host := t.host
	if np != "" {
		for _, e := range strings.Split(np, ",") {
			switch {
			case !m.suffix:
				if e == host {
					return direct(fmt.Sprintf("matched entry %s (the whole host, exactly) in %s", q(e), npName), notes...)
				}
			case isIPv4(host) && jsCIDRMatch(e, host):
				return direct(fmt.Sprintf("matched entry %s (IPv4 CIDR) in %s", q(e), npName), notes...)
			case strings.HasSuffix(host, e):
				what := "raw suffix of the host, case-sensitive"
				if e == "" {
					what = "an empty entry: every host ends with it"
				}
				return direct(fmt.Sprintf("matched entry %s (%s) in %s", q(e), what, npName), notes...)
			}
		}
	}
	return viaProxy(proxy, fmt.Sprintf("proxy from %s; no %s entry matches %s (grpc-js sends CONNECT %s)", name, npName, host, grpcTarget(t)), notes...)
}

func mustPort(p string) uint16 {
	n, _ := strconv.ParseUint(p, 10, 16)
	return uint16(n)
}

// jsCIDRMatch is grpc-js's parseCIDR and isIpInCIDR: "a.b.c.d/n" with n
// read by parseInt (leading digits) in 0..32; the mask is -1 << (32-n) in
// 32-bit JavaScript arithmetic, where a shift by 32 is a shift by 0 — so
// "/0" compares the whole address.
func jsCIDRMatch(entry, host string) bool {
	parts := strings.Split(entry, "/")
	if len(parts) != 2 || !isIPv4(parts[0]) {
		return false
	}
	n, ok := jsParseInt(parts[1])
	if !ok || n < 0 || n > 32 {
		return false
	}
	mask := uint32(0xFFFFFFFF) << ((32 - n) % 32)
	a, b := netip.MustParseAddr(parts[0]).As4(), netip.MustParseAddr(host).As4()
	ai := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	bi := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return ai&mask == bi&mask
}

// jsParseInt is parseInt(s, 10): leading white space, a sign, then the
// leading digits; none is NaN.
func jsParseInt(s string) (int, bool) {
	s = strings.TrimLeft(s, " \t\n\r\v\f")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	n, digits := 0, 0
	for digits < len(s) && s[digits] >= '0' && s[digits] <= '9' && digits < 9 {
		n = n*10 + int(s[digits]-'0')
		digits++
	}
	if digits == 0 {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// grpcCoreModel is gRPC C-core's HTTP proxy mapper as Debian's grpcio
// 1.51 has it.
type grpcCoreModel struct{}

func (m grpcCoreModel) decide(env Env, t *target) verdict {
	notes := grpcUpperIgnored(env, "gRPC C-core", "HTTPS_PROXY", "HTTP_PROXY", "GRPC_PROXY", "NO_PROXY")
	val, name, ok := env.firstSet("grpc_proxy", "https_proxy", "http_proxy")
	if !ok {
		return direct(unsetReason("grpc_proxy", "https_proxy", "http_proxy"), notes...)
	}
	if val == "" {
		return direct(name+" is set and empty: gRPC C-core takes the first variable set, and an empty one means no proxy", notes...)
	}
	// URI::Parse: a scheme, then "//" and an authority.
	i := strings.Index(val, "://")
	if !hasScheme(val) || i < 0 || strings.SplitN(val[i+3:], "/", 2)[0] == "" {
		return direct(name+" ignored: gRPC C-core cannot parse it as a URI with an authority", notes...)
	}
	if s := val[:i]; s != "http" {
		return direct(name+" ignored: gRPC C-core takes only the scheme \"http\" ("+q(s)+" is not supported)", notes...)
	}
	// URI::Parse percent-decodes the authority before it is split at '@':
	// a password with %40 makes a third part, and the value is dropped.
	auth := strings.SplitN(val[i+3:], "/", 2)[0]
	if dec, err := url.PathUnescape(auth); err == nil {
		auth = dec
	}
	at := strings.Split(auth, "@")
	if len(at) > 2 {
		return direct(name+" ignored: gRPC C-core percent-decodes the user information and then finds more than one @ in the authority", notes...)
	}
	hostport := at[len(at)-1]
	if !strings.Contains(strings.TrimPrefix(hostport, "["), "]:") && strings.Count(hostport, ":") != 1 {
		hostport += ":443" // the proxy name is resolved with gRPC's default port
	}
	proxy := "http://" + hostport
	np, npName, set := env.firstSet("no_grpc_proxy", "no_proxy")
	if set {
		host := t.host
		for _, e := range strings.Split(np, ",") {
			if e == "" {
				continue
			}
			if len(e) <= len(host) && strings.EqualFold(host[len(host)-len(e):], e) {
				return direct(fmt.Sprintf("matched entry %s (raw suffix of the host, any case) in %s", q(e), npName), notes...)
			}
		}
	}
	return viaProxy(proxy, fmt.Sprintf("proxy from %s; no %s entry matches %s (C-core sends CONNECT %s)", name, "no_grpc_proxy/no_proxy", t.host, grpcTarget(t)), notes...)
}
