package sniff

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

const (
	maxMethodLen = 24
	maxHostLen   = 253
)

// ParseHTTP returns the host (lower-cased, without brackets) and explicit
// port of the HTTP/1 request at the start of b: from an absolute-form or
// authority-form target if there is one (RFC 9112 §3.2.2: it wins over the
// Host header), else from the Host header. It returns ErrIncomplete until
// the header section is complete, ErrNotHTTP when the request line is not
// HTTP/1.x, ErrNoName when there is no Host, and another error for a
// malformed request (several Host headers, a bad host, obsolete line
// folding).
func ParseHTTP(b []byte) (host string, port uint16, err error) {
	line, rest, ok := cutLine(b)
	if !ok {
		if err := checkRequestLinePrefix(b); err != nil {
			return "", 0, err
		}
		return "", 0, ErrIncomplete
	}
	method, target, version, ok := splitRequestLine(line)
	if !ok {
		return "", 0, ErrNotHTTP
	}
	if version != "HTTP/1.1" && version != "HTTP/1.0" {
		return "", 0, ErrNotHTTP
	}
	var authority string
	switch {
	case method == "CONNECT":
		authority = target
	case !strings.HasPrefix(target, "/") && target != "*":
		var err error
		if authority, err = absoluteAuthority(target); err != nil {
			return "", 0, err
		}
	}
	var hostHeader string
	seenHost := false
	for {
		line, rest, ok = cutLine(rest)
		if !ok {
			return "", 0, ErrIncomplete
		}
		if len(line) == 0 {
			break // end of the header section
		}
		if line[0] == ' ' || line[0] == '\t' {
			return "", 0, httpMalformed("obsolete line folding")
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found || len(name) == 0 || !isToken(name) {
			return "", 0, httpMalformed("header line %q", truncate(string(line), 64))
		}
		if strings.EqualFold(string(name), "Host") {
			if seenHost {
				return "", 0, httpMalformed("several Host headers")
			}
			seenHost = true
			hostHeader = string(bytes.Trim(value, " \t"))
		}
	}
	if authority == "" {
		authority = hostHeader
	}
	if authority == "" {
		return "", 0, ErrNoName
	}
	return splitAuthority(authority)
}

// absoluteAuthority returns the host[:port] of an absolute-form request
// target: scheme "://" [userinfo "@"] host[:port], then a path or a query.
// The scheme is what net/url reads as one (RFC 3986: a letter, then
// letters, digits, "+", "-", "."), so a target such as "A:://0", which
// net/http reads as scheme "A" with an opaque path and no authority (the
// Host header then names the host), is not read as authority "0". An
// absolute target without an authority ("http:x", "http:///x") is
// malformed (RFC 9110 §4.2.1) rather than left to the Host header, on which
// servers disagree. Userinfo ends at the last "@", as net/url has it.
func absoluteAuthority(target string) (string, error) {
	i := 0
	for i < len(target) && isSchemeChar(target[i], i == 0) {
		i++
	}
	rest, ok := strings.CutPrefix(target[i:], "://")
	if i == 0 || !ok {
		return "", httpMalformed("request target %q", truncate(target, 64))
	}
	authority, _, _ := strings.Cut(rest, "?")
	authority, _, _ = strings.Cut(authority, "/")
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		authority = authority[at+1:]
	}
	if authority == "" {
		return "", httpMalformed("request target %q without a host", truncate(target, 64))
	}
	return authority, nil
}

func isSchemeChar(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		return true
	case c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.':
		return !first
	}
	return false
}

// cutLine returns the line at the start of b without its CRLF (or bare LF).
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, b, false
	}
	line = b[:i]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, b[i+1:], true
}

// checkRequestLinePrefix rejects an unfinished first line early when it
// cannot become an HTTP request line.
func checkRequestLinePrefix(b []byte) error {
	sp := bytes.IndexByte(b, ' ')
	method := b
	if sp >= 0 {
		method = b[:sp]
	}
	if len(method) > maxMethodLen || (sp == 0) || !isUpperToken(method) {
		return ErrNotHTTP
	}
	return nil
}

func splitRequestLine(line []byte) (method, target, version string, ok bool) {
	m, rest, ok1 := bytes.Cut(line, []byte(" "))
	t, v, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || len(m) == 0 || len(m) > maxMethodLen || !isUpperToken(m) || len(t) == 0 {
		return "", "", "", false
	}
	for _, c := range t {
		if c <= ' ' || c == 0x7f {
			return "", "", "", false
		}
	}
	return string(m), string(t), string(v), true
}

// splitAuthority splits host[:port] (IPv6 in brackets) and validates both.
func splitAuthority(a string) (string, uint16, error) {
	host, portStr := a, ""
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", 0, httpMalformed("host %q", truncate(a, 64))
		}
		host = a[1:end]
		switch after := a[end+1:]; {
		case after == "":
		case strings.HasPrefix(after, ":"):
			portStr = after[1:]
		default:
			return "", 0, httpMalformed("host %q", truncate(a, 64))
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return "", 0, httpMalformed("host %q", truncate(a, 64))
		}
		host = ip.String()
	} else if i := strings.LastIndexByte(a, ':'); i >= 0 {
		host, portStr = a[:i], a[i+1:]
		if strings.Contains(host, ":") {
			return "", 0, httpMalformed("host %q: IPv6 literals need brackets", truncate(a, 64))
		}
	}
	var port uint16
	if portStr != "" {
		n, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || n == 0 {
			return "", 0, httpMalformed("port %q", truncate(portStr, 16))
		}
		port = uint16(n)
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if !strings.Contains(host, ":") && !validHostname(host) {
		return "", 0, httpMalformed("host %q", truncate(host, 64))
	}
	return host, port, nil
}

// validHostname accepts DNS names (letters, digits, hyphen, underscore,
// dots between non-empty labels of at most 63 bytes) and IPv4 literals.
func validHostname(h string) bool {
	if h == "" || len(h) > maxHostLen {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func isUpperToken(b []byte) bool {
	for _, c := range b {
		if c < 'A' || c > 'Z' {
			if c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}

// isToken reports whether b is an RFC 9110 token.
func isToken(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func httpMalformed(format string, args ...any) error {
	return fmt.Errorf("sniff: malformed HTTP request: "+format, args...)
}
