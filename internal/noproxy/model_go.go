package noproxy

import (
	"fmt"
	"net/url"
	"strings"
)

// goProxyURL is httpproxy's parseProxy: a value without scheme or host is
// read as "http://"+value; a value that still does not parse is ignored.
func goProxyURL(v string) (string, bool) {
	u, err := url.Parse(v)
	if err != nil || u.Scheme == "" || u.Host == "" {
		if _, err2 := url.Parse("http://" + v); err2 == nil {
			return "http://" + v, true
		}
	}
	if err != nil {
		return "", false
	}
	return v, true
}

// decideGo follows golang.org/x/net/http/httpproxy (vendored in net/http).
func decideGo(env Env, t *target) verdict {
	var notes []string
	var val, name string
	switch t.scheme {
	case "https":
		val, name = env.nonEmpty("HTTPS_PROXY", "https_proxy")
		if val == "" {
			if _, n := env.nonEmpty("HTTP_PROXY", "http_proxy"); n != "" {
				notes = append(notes, n+" is not used for https:// URLs")
			}
			if _, n := env.nonEmpty("ALL_PROXY", "all_proxy"); n != "" {
				notes = append(notes, n+" ignored: Go does not read ALL_PROXY")
			}
			return direct(unsetReason("HTTPS_PROXY", "https_proxy"), notes...)
		}
	default:
		val, name = env.nonEmpty("HTTP_PROXY", "http_proxy")
		if val == "" {
			if _, n := env.nonEmpty("ALL_PROXY", "all_proxy"); n != "" {
				notes = append(notes, n+" ignored: Go does not read ALL_PROXY")
			}
			return direct(unsetReason("HTTP_PROXY", "http_proxy"), notes...)
		}
	}
	if other, on := env.nonEmpty(lowerOrUpper(name)); on != "" && other != val {
		notes = append(notes, fmt.Sprintf("%s ignored: Go prefers upper-case %s", on, name))
	}
	proxy, ok := goProxyURL(val)
	if !ok {
		return direct(fmt.Sprintf("%s ignored: not a URL Go can parse", name), notes...)
	}
	if t.scheme == "http" && env["REQUEST_METHOD"] != "" {
		return fail(fmt.Sprintf("Go refuses %s when REQUEST_METHOD is set (CGI rule): every http:// request fails", name), notes...)
	}
	host := t.host
	if !isASCII(host) {
		if a, err := idnaLookup(host); err == nil {
			host = a
		}
	}
	if host == "localhost" {
		return direct("Go always sends localhost direct", notes...)
	}
	if t.ip.IsValid() && t.ip.Unmap().IsLoopback() {
		return direct("Go always sends loopback addresses direct", notes...)
	}
	npVal, npName := env.nonEmpty("NO_PROXY", "no_proxy")
	if npName != "" {
		if other, on := env.nonEmpty("no_proxy"); npName == "NO_PROXY" && on != "" && other != npVal {
			notes = append(notes, "no_proxy ignored: Go prefers upper-case NO_PROXY")
		}
		entries, _ := Parse(npVal)
		// Go keeps "." and "*." as a suffix "." that matches every name
		// written with a trailing dot; Parse reports them as errors.
		if !t.ip.IsValid() && strings.HasSuffix(host, ".") {
			for _, raw := range strings.Split(npVal, ",") {
				if r := strings.TrimSpace(raw); r == "." || r == "*." {
					return direct(fmt.Sprintf("matched entry %s (every name ending in a dot) in %s", q(r), npName), notes...)
				}
			}
		}
		for _, e := range entries {
			if e.Match(host, t.port) {
				return direct(fmt.Sprintf("matched entry %s (%s) in %s", q(e.Raw), describe(e), npName), notes...)
			}
		}
		notes = append(notes, goIgnoredNotes(npVal, t)...)
	}
	return viaProxy(proxy, fmt.Sprintf("proxy from %s; no NO_PROXY entry matches %s", name, t.hostname), notes...)
}

// goIgnoredNotes explains entries Go cannot read that look meant for host.
func goIgnoredNotes(np string, t *target) []string {
	_, errs := Parse(np)
	var notes []string
	for _, err := range errs {
		if ee, ok := err.(*EntryError); ok && looksMeantFor(ee.Entry, t) {
			notes = append(notes, fmt.Sprintf("entry %s ignored by go: %s", q(ee.Entry), ee.Reason))
		}
	}
	return notes
}

// lowerOrUpper returns the other-case spelling of a variable name.
func lowerOrUpper(name string) string {
	for _, c := range name {
		if c >= 'a' && c <= 'z' {
			return upper(name)
		}
	}
	return lower(name)
}
