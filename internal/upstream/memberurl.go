package upstream

import (
	"strings"
	"unicode"
)

// The text of a member, before and around url.Parse. Its errors must never
// carry a password: url.Parse's quote the URL, and a password holding a
// space, '#' or ',' may have been cut in two by a caller's splitting, so
// the text before the cut looks like host:port.

// splitScheme splits "scheme://rest" when raw starts with a scheme as
// RFC 3986 has it (a letter, then letters, digits, '+', '-', '.').
func splitScheme(raw string) (scheme, rest string, ok bool) {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		case i > 0 && strings.HasPrefix(raw[i:], "://"):
			return raw[:i], raw[i+3:], true
		default:
			return "", raw, false
		}
	}
	return "", raw, false
}

// splitUserinfo splits rest (a URL after "scheme://") at its last '@': a
// proxy URL has no path, so everything before it is user info, even a '/',
// '?' or '#' that url.Parse would take as the end of the authority.
func splitUserinfo(rest string) (userinfo, hostpart string, ok bool) {
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return "", rest, false
	}
	return rest[:at], rest[at+1:], true
}

// redactUserinfo shows user info as "user:xxxxx" (the user name with a
// password) or "xxxxx" (a lone user name, often a token).
func redactUserinfo(userinfo string) string {
	if c := strings.IndexByte(userinfo, ':'); c >= 0 {
		return userinfo[:c] + ":xxxxx"
	}
	return "xxxxx"
}

// Redact removes the password from anything that looks like a URL with
// user info, so it can appear in an error: "http://u:xxxxx@proxy:3128". A
// lone user name (which may be a token) is removed too.
func Redact(raw string) string {
	prefix, rest := "", raw
	if scheme, r, ok := splitScheme(raw); ok {
		prefix, rest = scheme+"://", r
	}
	userinfo, hostpart, ok := splitUserinfo(rest)
	if !ok {
		return raw
	}
	return prefix + redactUserinfo(userinfo) + "@" + hostpart
}

// display names the member in raw ("scheme://..." after ParseMember's
// defaulting) for an error: user info redacted, path, query and fragment
// left out; when raw is malformed and has no '@', anything after a ':' in
// the authority is left out too, for it may be the first part of a
// password cut short ("http://u:pa" of "http://u:pa ss@proxy").
func display(raw string, malformed bool) string {
	scheme, rest, _ := splitScheme(raw)
	userinfo, hostpart, hasUser := splitUserinfo(rest)
	if i := strings.IndexAny(hostpart, "/?#"); i >= 0 {
		hostpart = hostpart[:i]
	}
	if !hasUser {
		if malformed {
			hostpart = maskPort(hostpart)
		}
		return scheme + "://" + hostpart
	}
	return scheme + "://" + redactUserinfo(userinfo) + "@" + hostpart
}

// maskPort replaces whatever follows the host in host[:port] by "xxxxx".
func maskPort(hostport string) string {
	from := 0
	if strings.HasPrefix(hostport, "[") {
		if end := strings.IndexByte(hostport, ']'); end >= 0 {
			from = end + 1
		}
	}
	if i := strings.IndexByte(hostport[from:], ':'); i >= 0 {
		return hostport[:from+i] + ":xxxxx"
	}
	return hostport
}

// userinfoError is a problem with the user info of a member URL. It names
// the part (user name or password) and the fix, never a character of it.
type userinfoError struct {
	part string // "user name" or "password"
	pct  bool   // a '%' not followed by two hex digits
}

func (e *userinfoError) Error() string {
	if e.pct {
		return "the " + e.part + " has a '%' that does not start a percent-encoded byte: write '%' as %25"
	}
	return "the " + e.part + " has characters a URL cannot carry as they are: percent-encode them " +
		"(a space is %20, '#' %23, '/' %2F, '?' %3F, '%' %25, each byte of a non-ASCII character as %hh)"
}

// checkUserinfo checks the user info of raw ("scheme://...") is RFC 3986's:
// unreserved, percent-encoded bytes, sub-delimiters and ':' (and '@', which
// url.Parse takes in user info, as it splits at the last '@').
func checkUserinfo(raw string) error {
	_, rest, _ := splitScheme(raw)
	userinfo, _, ok := splitUserinfo(rest)
	if !ok {
		return nil
	}
	colon := strings.IndexByte(userinfo, ':')
	for i := 0; i < len(userinfo); i++ {
		part := "user name"
		if colon >= 0 && i > colon {
			part = "password"
		}
		c := userinfo[i]
		switch {
		case c == '%':
			if i+2 >= len(userinfo) || !ishex(userinfo[i+1]) || !ishex(userinfo[i+2]) {
				return &userinfoError{part: part, pct: true}
			}
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0:
		default:
			return &userinfoError{part: part}
		}
	}
	return nil
}

func ishex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// urlProblem says why url.Parse refused raw, whose user info is valid,
// without quoting it.
func urlProblem(raw string) string {
	_, rest, _ := splitScheme(raw)
	_, hostpart, _ := splitUserinfo(rest)
	if i := strings.IndexAny(hostpart, "/?#"); i >= 0 {
		hostpart = hostpart[:i]
	}
	host, port := hostpart, ""
	if strings.HasPrefix(host, "[") {
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return "an IPv6 address needs its closing ']'"
		}
		host, port = host[:end+1], host[end+1:]
		if port != "" && port[0] != ':' {
			return "after an IPv6 address in brackets comes ':' and the port"
		}
	} else if i := strings.IndexByte(host, ':'); i >= 0 {
		host, port = host[:i], host[i:]
	}
	if port != "" && strings.Trim(port[1:], "0123456789") != "" {
		return "the port is not a number (a password needs an '@' before the host, and a space, '#' or ',' in it must be percent-encoded)"
	}
	if strings.IndexFunc(host, func(r rune) bool { return r <= ' ' || r == 0x7f || r >= 0x80 }) >= 0 {
		return "the host has a space, a control or a non-ASCII character"
	}
	return "not a valid URL (percent-encode special characters in the user name and password)"
}

// splitSpec splits a member spec into the URL and its attributes. The URL
// runs to the first space after its last '@', so a password with a space
// stays in the URL (and is refused there as a whole) rather than being cut
// into a URL and an "attribute".
func splitSpec(spec string) (raw string, attrs []string) {
	s := strings.TrimSpace(spec)
	from := 0
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		from = at
	}
	if i := strings.IndexFunc(s[from:], unicode.IsSpace); i >= 0 {
		return s[:from+i], strings.Fields(s[from+i:])
	}
	return s, nil
}

// stripComment splits a member file line at its comment: from a '#' at
// the start of the line or after a space.
func stripComment(line string) (member, comment string) {
	for i := 0; i < len(line); i++ {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return line[:i], line[i:]
		}
	}
	return line, ""
}
