package lint

import (
	"net/netip"
	"strings"
)

// This file is the seam to internal/noproxy. Until that package lands, the
// helpers below hold the minimum the rules need; they are replaced by calls
// into noproxy.

// suggestedNoProxy returns a NO_PROXY value for a pod in cl.
func suggestedNoProxy(cl Cluster) string {
	es := []string{"localhost", "127.0.0.1", "::1", ".svc", "." + cl.domain(), "kubernetes.default.svc"}
	for _, a := range cl.APIServerIPs {
		es = append(es, a.String())
	}
	for _, c := range cl.CIDRs {
		es = append(es, c.String())
	}
	es = append(es, "169.254.169.254")
	return strings.Join(es, ",")
}

// nonProxyHostsFor translates a NO_PROXY value (or a broken nonProxyHosts
// value) into the JVM's http.nonProxyHosts form.
func nonProxyHostsFor(v string) string {
	var out []string
	seen := map[string]bool{}
	add := func(e string) {
		if e != "" && !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	for _, e := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '|' || r == ' ' || r == '\t' }) {
		switch {
		case strings.HasPrefix(e, "."):
			add("*" + e)
		case strings.Contains(e, "/"):
			pf, err := netip.ParsePrefix(e)
			if err != nil || !pf.Addr().Is4() || pf.Bits()%8 != 0 {
				continue
			}
			octets := strings.Split(pf.Masked().Addr().String(), ".")
			w := strings.Join(octets[:pf.Bits()/8], ".")
			if w == "" {
				add("*")
			} else {
				add(w + ".*")
			}
		case strings.Contains(e, ":") && !strings.HasPrefix(e, "["):
			if a, err := netip.ParseAddr(e); err == nil {
				add("[" + a.String() + "]")
			}
		default:
			add(e)
		}
	}
	return strings.Join(out, "|")
}
