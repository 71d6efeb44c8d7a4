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

// essential is one missing NO_PROXY entry.
type essential struct {
	what, add string
	severity  Severity
}

// missingEssentials returns the cluster essentials a NO_PROXY value lacks.
func missingEssentials(v string, cl Cluster) []essential {
	entries := map[string]bool{}
	var prefixes []netip.Prefix
	var addrs []netip.Addr
	apiByVar := false
	for _, e := range strings.Split(v, ",") {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if e == "$(kubernetes_service_host)" {
			apiByVar = true
		}
		entries[e] = true
		if pf, err := netip.ParsePrefix(e); err == nil {
			prefixes = append(prefixes, pf)
		} else if a, err := netip.ParseAddr(e); err == nil {
			addrs = append(addrs, a)
		}
	}
	if entries["*"] {
		return nil
	}
	has := func(names ...string) bool {
		for _, n := range names {
			if entries[n] {
				return true
			}
		}
		return false
	}
	covered := func(a netip.Addr) bool {
		for _, p := range prefixes {
			if p.Contains(a) {
				return true
			}
		}
		for _, b := range addrs {
			if a == b {
				return true
			}
		}
		return false
	}
	var out []essential
	d := cl.domain()
	if !has(".svc", "svc") {
		out = append(out, essential{"Service names (*.svc)", ".svc", Error})
	}
	if !has("."+d, d) {
		out = append(out, essential{"the cluster domain (*." + d + ")", "." + d, Error})
	}
	if !has("kubernetes.default.svc", ".svc", "svc") {
		out = append(out, essential{"the API server name", "kubernetes.default.svc", Error})
	}
	for _, a := range cl.APIServerIPs {
		if !covered(a) && !apiByVar {
			out = append(out, essential{"the API server address " + a.String(), a.String(), Error})
		}
	}
	for _, c := range cl.CIDRs {
		found := false
		for _, p := range prefixes {
			if p.Bits() <= c.Bits() && p.Contains(c.Addr()) {
				found = true
			}
		}
		if !found {
			out = append(out, essential{"the cluster CIDR " + c.String(), c.String(), Error})
		}
	}
	if !has("localhost") || !has("127.0.0.1", "127.0.0.0/8") {
		out = append(out, essential{"loopback", "localhost,127.0.0.1,::1", Warning})
	}
	return out
}

// ignoredEntry is a NO_PROXY entry some client ignores or misreads.
type ignoredEntry struct {
	entry   string
	how     string
	clients []string
	fix     string
}

// clientsFor returns the NO_PROXY readers in a container, by runtime.
func clientsFor(c *container) []string {
	var out []string
	if c.runtimes.has(rtPython) {
		out = append(out, "python-urllib", "python-requests")
	}
	if c.runtimes.has(rtNode) {
		out = append(out, "node-http", "undici")
	}
	return out
}

// ignoredEntries returns the entries of v that clients ignore.
func ignoredEntries(v string, clients []string) []ignoredEntry {
	var out []ignoredEntry
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if _, err := netip.ParsePrefix(e); err != nil {
			continue
		}
		var who []string
		for _, c := range clients {
			if c != "python-requests" || strings.Contains(e, ":") {
				who = append(who, c)
			}
		}
		if len(who) > 0 {
			out = append(out, ignoredEntry{e, "ignored (CIDR entries are not understood)", who, "list the addresses it must cover, or call them by Service name"})
		}
	}
	return out
}
