package noproxy

import (
	"fmt"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// Env is a process environment: variable name → value. A name that is
// present with an empty value is different from an absent name; several
// clients tell them apart.
type Env map[string]string

// EnvFromList builds an Env from NAME=VALUE strings (os.Environ() form). A
// later duplicate replaces an earlier one.
func EnvFromList(list []string) (Env, error) {
	env := Env{}
	for _, kv := range list {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("environment entry %q is not NAME=VALUE", kv)
		}
		env[name] = value
	}
	return env, nil
}

// nonEmpty returns the first of names whose value is not empty.
func (e Env) nonEmpty(names ...string) (value, name string) {
	for _, n := range names {
		if v := e[n]; v != "" {
			return v, n
		}
	}
	return "", ""
}

// firstSet returns the first of names that is set, even when empty
// (JavaScript `??`, Ruby `||` on strings, .NET `??`).
func (e Env) firstSet(names ...string) (value, name string, ok bool) {
	for _, n := range names {
		if v, set := e[n]; set {
			return v, n, true
		}
	}
	return "", "", false
}

// sortedNames returns the variable names in a stable order.
func (e Env) sortedNames() []string {
	names := make([]string, 0, len(e))
	for n := range e {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// target is the request URL, parsed once; each client model derives the
// host form it really uses from it.
type target struct {
	raw      string
	scheme   string     // "http" or "https"
	host     string     // url.Hostname(): as written, no brackets
	port     uint16     // effective port
	portStr  string     // the port written in the URL, "" if none
	ip       netip.Addr // valid when host is an IP literal (zone dropped)
	v6       bool       // host is an IPv6 literal
	hostname string     // lower case, IDN → punycode, IPv6 compressed; no brackets
}

// defaultPort is the effective port per scheme.
func defaultPort(scheme string) uint16 {
	if scheme == "https" {
		return 443
	}
	return 80
}

// parseTarget reads an http:// or https:// URL.
func parseTarget(raw string) (*target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse url %q: %w", raw, err)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return nil, fmt.Errorf("url %q: only http:// and https:// URLs can be explained", raw)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("url %q has no host", raw)
	}
	t := &target{raw: raw, scheme: scheme, host: u.Hostname(), portStr: u.Port(), port: defaultPort(scheme)}
	if t.portStr != "" {
		n, err := strconv.ParseUint(t.portStr, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("url %q: bad port %q", raw, t.portStr)
		}
		t.port = uint16(n)
	}
	if a, err := netip.ParseAddr(t.host); err == nil {
		t.ip = a.WithZone("")
		t.v6 = a.Is6() && !a.Is4In6()
		if a.Is4In6() {
			t.v6 = true
		}
		t.hostname = t.ip.String()
	} else {
		t.hostname = strings.ToLower(t.host)
		if !isASCII(t.hostname) {
			if a, err := idnaLookup(t.hostname); err == nil {
				t.hostname = a
			}
		}
	}
	return t, nil
}

// bracketed is the host as it appears in a URL authority.
func (t *target) bracketed() string {
	if t.v6 {
		return "[" + t.hostname + "]"
	}
	return t.hostname
}

// isIPv4 reports a dotted-quad IPv4 literal.
func isIPv4(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4()
}
