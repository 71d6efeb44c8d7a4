package lint

import (
	"net"
	"net/url"
	"strings"
	"unicode"
)

// varPair is a variable read in two cases.
type varPair struct{ upper, lower string }

var (
	httpProxy  = varPair{"HTTP_PROXY", "http_proxy"}
	httpsProxy = varPair{"HTTPS_PROXY", "https_proxy"}
	allProxy   = varPair{"ALL_PROXY", "all_proxy"}
	noProxy    = varPair{"NO_PROXY", "no_proxy"}
	// proxyPairs are the variables that name a proxy for clients.
	proxyPairs = []varPair{httpProxy, httpsProxy, allProxy}
)

// setProxyVars returns the proxy variables of env that are set to a non-empty
// (or unknown) value, upper case first.
func setProxyVars(env *environment) []*envVar {
	var out []*envVar
	for _, pr := range proxyPairs {
		for _, n := range []string{pr.upper, pr.lower} {
			if v := env.get(n); v != nil && (!v.known || strings.TrimSpace(v.value) != "") {
				out = append(out, v)
			}
		}
	}
	return out
}

// isAre returns "is" for one variable and "are" for several.
func isAre(vs []*envVar) string {
	if len(vs) == 1 {
		return "is"
	}
	return "are"
}

// names returns the variable names of vs joined for a message.
func names(vs []*envVar) string {
	var ns []string
	for _, v := range vs {
		ns = append(ns, v.name)
	}
	return strings.Join(ns, ", ")
}

// proxyURL is what the rules need to know about a proxy URL value, parsed
// leniently (the value may be broken in the ways the rules report).
type proxyURL struct {
	scheme      string // "" when the value has no scheme
	userinfo    bool   // the value has user information
	password    bool   // the user information has a non-empty password
	badUserinfo bool   // the user information has characters that must be percent-encoded
	host        string // host name or IP, lower case, without brackets
	port        string // "" when not given
}

// parseProxyURL reads a proxy URL the way a reader who knows the intent
// would: the user information ends at the last '@'.
func parseProxyURL(raw string) proxyURL {
	var p proxyURL
	rest := strings.TrimSpace(raw)
	if i := strings.Index(rest, "://"); i >= 0 {
		p.scheme, rest = strings.ToLower(rest[:i]), rest[i+3:]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		ui := rest[:at]
		rest = rest[at+1:]
		p.userinfo = true
		if _, pass, ok := strings.Cut(ui, ":"); ok && pass != "" {
			p.password = true
		}
		p.badUserinfo = !validUserinfo(ui)
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		host = strings.Trim(rest, "[]")
	}
	p.host, p.port = strings.ToLower(host), port
	return p
}

// userinfoSpan says where parseProxyURL finds the user information of raw:
// bytes [start, end), the password from pass on (pass == end when there is
// no password). ok is false when raw has no user information.
func userinfoSpan(raw string) (start, end, pass int, ok bool) {
	lead := len(raw) - len(strings.TrimLeftFunc(raw, unicode.IsSpace))
	rest := strings.TrimSpace(raw)
	base := lead
	if i := strings.Index(rest, "://"); i >= 0 {
		base, rest = lead+i+3, rest[i+3:]
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return 0, 0, 0, false
	}
	start, end, pass = base, base+at, base+at
	if c := strings.IndexByte(rest[:at], ':'); c >= 0 {
		pass = base + c + 1
	}
	return start, end, pass, true
}

// validUserinfo reports whether s is RFC 3986 user information: unreserved
// characters, sub-delims, ':' and well-formed percent-encodings only.
func validUserinfo(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:", c) >= 0:
		case c == '%':
			if i+2 >= len(s) || !ishex(s[i+1]) || !ishex(s[i+2]) {
				return false
			}
			i += 2
		default:
			return false
		}
	}
	return true
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// redact returns the URL with its password replaced by "xxxxx", for
// messages. An unparsable value is replaced by a placeholder.
func redact(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		if parseProxyURL(raw).userinfo {
			return "(value with credentials)"
		}
		return strings.TrimSpace(raw)
	}
	return u.Redacted()
}
