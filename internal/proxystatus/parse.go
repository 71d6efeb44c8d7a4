package proxystatus

import (
	"strconv"
	"strings"
)

// Entry is one member of an RFC 9209 Proxy-Status field: the proxy's
// name and its parameters (error, next-hop, details, ...).
type Entry struct {
	Proxy  string
	Params map[string]string
}

// Parse reads Proxy-Status field values, the reader beside Header, the
// writer (RFC 9209: a
// Structured Fields list of tokens or strings with parameters). It is
// lenient: a malformed member is skipped, never fatal.
func Parse(values []string) []Entry {
	var out []Entry
	for _, v := range values {
		for _, m := range splitOutsideQuotes(v, ',') {
			m = strings.TrimSpace(m)
			if m == "" {
				continue
			}
			parts := splitOutsideQuotes(m, ';')
			name, ok := sfValue(strings.TrimSpace(parts[0]))
			if !ok || name == "" {
				continue
			}
			e := Entry{Proxy: name, Params: map[string]string{}}
			for _, p := range parts[1:] {
				k, val, has := strings.Cut(strings.TrimSpace(p), "=")
				k = strings.ToLower(strings.TrimSpace(k))
				if k == "" {
					continue
				}
				if !has {
					e.Params[k] = "?1"
					continue
				}
				if s, ok := sfValue(strings.TrimSpace(val)); ok {
					e.Params[k] = s
				}
			}
			out = append(out, e)
			if len(out) >= 16 {
				return out
			}
		}
	}
	return out
}

// splitOutsideQuotes splits s at sep where sep is not inside a
// double-quoted string (backslash escapes honoured).
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	start, inq := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inq && c == '\\':
			i++
		case c == '"':
			inq = !inq
		case !inq && c == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// sfValue reads a token, integer or quoted string.
func sfValue(s string) (string, bool) {
	if strings.HasPrefix(s, `"`) {
		if len(s) < 2 || !strings.HasSuffix(s, `"`) {
			return "", false
		}
		u, err := strconv.Unquote(s)
		if err != nil {
			// RFC 8941 strings allow only \" and \\ escapes.
			u = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(s[1 : len(s)-1])
		}
		return u, true
	}
	if s == "" || strings.ContainsAny(s, " \t\"") {
		return "", false
	}
	return s, true
}
