package noproxy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"egret.io/egret/internal/severity"
)

// Severity ranks a lint finding (the scale of package severity, shared
// with egret lint).
type Severity = severity.Level

// Severities, lowest first.
const (
	SeverityInfo    = severity.Info
	SeverityWarning = severity.Warning
	SeverityError   = severity.Error
)

// Lint rule identifiers (stable: used in JSON output, by egret lint and the
// admission webhook).
const (
	RuleUnreadableEntry  = "NP001" // an entry egret (Go rules) cannot read
	RuleEntryMisread     = "NP002" // some clients ignore or misread an entry
	RuleSeparator        = "NP003" // separators other than commas, blanks around entries, empty entries
	RuleMissingEssential = "NP004" // a cluster destination some client would send to the proxy
	RuleTooBroad         = "NP005" // an entry that sends too much direct
	RuleCaseMismatch     = "NP006" // lower- and upper-case variables differ or only one is set
	RuleCIDROnly         = "NP007" // cluster ranges that only CIDR-capable clients can use
)

// Finding is one lint result.
type Finding struct {
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	Entry    string   `json:"entry,omitempty"`   // the NO_PROXY entry concerned, if any
	Clients  []string `json:"clients,omitempty"` // the clients concerned, if any
	Message  string   `json:"message"`
	Fix      string   `json:"fix,omitempty"`
	// Add lists the entries the fix adds to the value, in order, for the
	// findings whose fix is adding entries (RuleMissingEssential).
	Add []string `json:"add,omitempty"`
}

// LintOptions is what the caller knows about the cluster. The zero value
// lints the entries only against every client, with cluster domain
// "cluster.local".
type LintOptions struct {
	Clients       []string       // client names that matter; empty = all
	ClusterCIDRs  []netip.Prefix // Service and Pod CIDRs that must go direct
	ClusterDomain string         // "" = cluster.local
	APIServerIPs  []netip.Addr   // the kubernetes Service IP and endpoints
	// MetadataAddrs are the cloud instance metadata addresses that must go
	// direct. nil means DefaultMetadataAddr (169.254.169.254); an empty,
	// non-nil slice checks none (a cluster without a metadata service).
	MetadataAddrs []netip.Addr
	External      []string // names that must use the proxy (fixed egress)
	// Env is the environment the value comes from, when known: it enables
	// the both-case checks (NO_PROXY vs no_proxy, HTTP_PROXY vs http_proxy).
	Env Env
	// SkipEssentials turns off RuleMissingEssential (for values that are not
	// meant to be a pod's whole NO_PROXY).
	SkipEssentials bool
}

// DefaultMetadataAddr is the cloud instance metadata address (AWS, GCP,
// Azure, OpenStack) a pod's NO_PROXY must cover unless told otherwise.
const DefaultMetadataAddr = "169.254.169.254"

// metadataAddrs returns the metadata addresses with the default applied.
func (o LintOptions) metadataAddrs() []netip.Addr {
	if o.MetadataAddrs == nil {
		return []netip.Addr{netip.MustParseAddr(DefaultMetadataAddr)}
	}
	return o.MetadataAddrs
}

// HasErrors reports whether any finding is an error.
func HasErrors(fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == SeverityError {
			return true
		}
	}
	return false
}

// lintEnv is the probe environment: both cases of every variable, Node's
// and global-agent's switches on, and Java given egret's translation.
func lintEnv(np string) Env {
	env := Env{"http_proxy": proxyProbe, "HTTP_PROXY": proxyProbe, "https_proxy": proxyProbe, "HTTPS_PROXY": proxyProbe,
		"no_proxy": np, "NO_PROXY": np, "NODE_USE_ENV_PROXY": "1", "GLOBAL_AGENT_ENVIRONMENT_VARIABLE_NAMESPACE": ""}
	opts, _, _ := JavaToolOptions(proxyProbe, np)
	env["JAVA_TOOL_OPTIONS"] = opts
	return env
}

const proxyProbe = "http://192.0.2.1:3128"

// probe is a URL and whether it should go direct.
type probe struct {
	url    string
	direct bool
	what   string // how the URL relates to the entry, for messages
}

// decideAll returns the clients whose decision on u differs from want.
func decideAll(clients []Client, env Env, u string, wantDirect bool) (wrong []string, errs []string) {
	t, err := parseTarget(u)
	if err != nil {
		return nil, nil
	}
	for _, c := range clients {
		r := c.decideTarget(env, t)
		switch {
		case r.Decision == DecisionError:
			errs = append(errs, c.Name)
		case (r.Decision == DecisionDirect) != wantDirect:
			wrong = append(wrong, c.Name)
		}
	}
	return wrong, errs
}

func hostURL(host string, port uint16) string {
	h := host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if port != 0 && port != 80 {
		return fmt.Sprintf("http://%s:%d/", h, port)
	}
	return "http://" + h + "/"
}

// entryProbes derives the URLs an entry is meant to cover (or not).
func entryProbes(e Entry) []probe {
	port := e.Port
	switch e.Kind {
	case KindDomain:
		d := e.Domain
		ps := []probe{
			{hostURL("www."+d, port), true, "a subdomain (www." + d + ")"},
			{hostURL("not"+d, port), false, "a look-alike name (not" + d + ")"},
		}
		if e.Apex {
			ps = append(ps, probe{hostURL(d, port), true, "the name itself"})
		}
		return ps
	case KindIP:
		return []probe{{hostURL(e.Prefix.Addr().String(), port), true, "the address itself"}}
	case KindCIDR:
		a := e.Prefix.Addr().Next()
		if !e.Prefix.Contains(a) {
			a = e.Prefix.Addr()
		}
		return []probe{{hostURL(a.String(), 0), true, "an address inside it (" + a.String() + ")"}}
	}
	return nil
}

// Lint checks a NO_PROXY value and returns its findings, most severe first.
func Lint(value string, opts LintOptions) []Finding {
	clients, err := SelectClients(opts.Clients)
	if err != nil {
		return []Finding{{Rule: RuleUnreadableEntry, Severity: SeverityError, Message: err.Error()}}
	}
	domain := strings.Trim(strings.ToLower(opts.ClusterDomain), ".")
	if domain == "" {
		domain = "cluster.local"
	}
	var fs []Finding
	entries, errs := Parse(value)
	bare := bareIPv6Entries(entries)
	for _, err := range errs {
		ee, _ := err.(*EntryError)
		f := Finding{Rule: RuleUnreadableEntry, Severity: SeverityWarning, Message: err.Error() + "; egret and Go ignore it"}
		if ee != nil {
			f.Entry = ee.Entry
			f.Fix = "remove it or write a host name, IP address or CIDR"
			if a, ok := bracketedIPv6(ee.Entry); ok {
				if bare[a] {
					// The recommended pair ("::1,[::1]"): the bracketed form
					// is for the clients that need it, Go reads the bare one.
					continue
				}
				f.Message = fmt.Sprintf("entry %s: Go and egret read IPv6 entries only without brackets, so they ignore it", q(ee.Entry))
				f.Fix = fmt.Sprintf("add %s beside it (keep %s for the clients that need brackets)", q(a.String()), q(ee.Entry))
			}
		}
		fs = append(fs, f)
	}
	fs = append(fs, lintSeparators(value)...)
	// Per entry: what each client does with it alone.
	for _, e := range entries {
		if e.Kind == KindAll {
			fs = append(fs, Finding{Rule: RuleTooBroad, Severity: SeverityError, Entry: e.Raw,
				Message: "`*` sends every destination direct: nothing uses the proxy", Fix: "list the internal destinations instead"})
			if strings.TrimSpace(value) != "*" {
				var ignore []string
				env := lintEnv(value)
				w, _ := decideAll(clients, env, "http://www.example.com/", true)
				ignore = append(ignore, w...)
				if len(ignore) > 0 {
					fs = append(fs, Finding{Rule: RuleEntryMisread, Severity: SeverityWarning, Entry: e.Raw, Clients: ignore,
						Message: "`*` inside a list is ignored by " + strings.Join(ignore, ", "), Fix: "make `*` the whole value"})
				}
			}
			continue
		}
		probeValue, fix := e.Raw, entryFix(e)
		if pair, ok := bracketedPair(e, value); ok {
			// The value already lists both spellings: judge them together,
			// and do not recommend what is already there.
			probeValue = e.Raw + "," + pair
			fix = "no NO_PROXY spelling helps these clients: call the address by a name they bypass"
		} else if same := sameDomain(e, entries); len(same) > 1 {
			// "svc" beside ".svc": the fix entryFix gives is applied, so
			// judge the spellings together.
			probeValue = strings.Join(same, ",")
			fix = "no NO_PROXY spelling helps these clients"
		}
		env, alone := lintEnv(probeValue), lintEnv(e.Raw)
		for _, p := range entryProbes(e) {
			penv := env
			if !p.direct {
				penv = alone // a look-alike match belongs to the entry that makes it
			}
			wrong, throws := decideAll(clients, penv, p.url, p.direct)
			if len(throws) > 0 {
				tfix := fix
				if e.Kind == KindIP && e.Prefix.Addr().Is6() {
					// Another spelling does not stop the failure.
					tfix = "no NO_PROXY spelling helps these clients: call the address by a name they bypass"
				}
				fs = append(fs, Finding{Rule: RuleEntryMisread, Severity: SeverityWarning, Entry: e.Raw, Clients: throws,
					Message: fmt.Sprintf("entry %s makes %s fail for %s", q(e.Raw), strings.Join(throws, ", "), p.url), Fix: tfix})
			}
			if len(wrong) == 0 {
				continue
			}
			verb, pfix := "does not cover "+p.what, fix
			if !p.direct {
				verb = "also matches " + p.what
				// No spelling narrows a client that compares the end of
				// the name: listing more entries cannot fix it.
				pfix = fmt.Sprintf("no NO_PROXY spelling stops %s from matching by the end of the name; keep it if no outside name ends in %s", strings.Join(wrong, ", "), e.Domain)
			}
			fs = append(fs, Finding{Rule: RuleEntryMisread, Severity: SeverityWarning, Entry: e.Raw, Clients: wrong,
				Message: fmt.Sprintf("entry %s %s in %s", q(e.Raw), verb, strings.Join(wrong, ", ")), Fix: pfix})
		}
		if e.Kind == KindDomain && !e.Apex {
			// ".x.com": who also covers x.com itself?
			covers, _ := decideAll(clients, env, hostURL(e.Domain, e.Port), false)
			if len(covers) > 0 && len(covers) < len(clients) {
				fs = append(fs, Finding{Rule: RuleEntryMisread, Severity: SeverityInfo, Entry: e.Raw, Clients: covers,
					Message: fmt.Sprintf("entry %s also covers %s itself in %s, not in the others", q(e.Raw), e.Domain, strings.Join(covers, ", ")),
					Fix:     fmt.Sprintf("if %s itself must go direct, list %s too", e.Domain, q(e.Domain))})
			}
		}
		if e.Kind == KindDomain && tooBroadDomain(e.Domain) {
			fs = append(fs, Finding{Rule: RuleTooBroad, Severity: SeverityError, Entry: e.Raw,
				Message: fmt.Sprintf("entry %s covers a whole public top-level domain", q(e.Raw)), Fix: "list the internal names instead"})
		}
		for _, ext := range opts.External {
			h := strings.ToLower(strings.TrimSpace(ext))
			if h != "" && (e.Match(h, 443) || e.Match(h, 80)) {
				fs = append(fs, Finding{Rule: RuleTooBroad, Severity: SeverityError, Entry: e.Raw,
					Message: fmt.Sprintf("entry %s sends %s direct, but it must use the fixed egress (proxy)", q(e.Raw), h),
					Fix:     "narrow or remove the entry"})
			}
		}
	}
	if !opts.SkipEssentials {
		fs = append(fs, lintEssentials(value, entries, clients, domain, opts)...)
	}
	if opts.Env != nil {
		fs = append(fs, lintCases(opts.Env, clients)...)
	}
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Severity > fs[j].Severity })
	return fs
}

// bracketedIPv6 reports whether raw is a bracketed IPv6 address without a
// port ("[::1]") and returns the address.
func bracketedIPv6(raw string) (netip.Addr, bool) {
	if len(raw) < 3 || raw[0] != '[' || raw[len(raw)-1] != ']' {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(raw[1 : len(raw)-1])
	if err != nil || !a.Is6() || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// bareIPv6Entries returns the IPv6 addresses listed without brackets and
// without a port.
func bareIPv6Entries(entries []Entry) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, e := range entries {
		if e.Kind == KindIP && e.Port == 0 && e.Prefix.Addr().Is6() && !strings.HasPrefix(e.Raw, "[") {
			m[e.Prefix.Addr()] = true
		}
	}
	return m
}

// bracketedPair returns the bracketed spelling of a bare IPv6 entry e when
// value lists it too (the pair entryFix recommends).
func bracketedPair(e Entry, value string) (string, bool) {
	if e.Kind != KindIP || e.Port != 0 || !e.Prefix.Addr().Is6() || strings.HasPrefix(e.Raw, "[") {
		return "", false
	}
	for _, raw := range strings.Split(value, ",") {
		raw = strings.TrimSpace(raw)
		if a, ok := bracketedIPv6(raw); ok && a == e.Prefix.Addr() {
			return raw, true
		}
	}
	return "", false
}

// sameDomain returns every portless spelling of e's domain the value lists
// ("svc", ".svc", "*.svc"), e's first; just e when there is no other.
func sameDomain(e Entry, entries []Entry) []string {
	out := []string{e.Raw}
	if e.Kind != KindDomain || e.Port != 0 {
		return out
	}
	for _, o := range entries {
		if o.Kind == KindDomain && o.Port == 0 && o.Domain == e.Domain && o.Rooted == e.Rooted && o.Raw != e.Raw {
			out = append(out, o.Raw)
		}
	}
	return out
}

// entryFix suggests a spelling every client reads the same way.
func entryFix(e Entry) string {
	switch e.Kind {
	case KindDomain:
		if e.Port != 0 {
			return "avoid ports in NO_PROXY: several clients ignore such entries"
		}
		if strings.HasPrefix(e.Raw, "*.") {
			return fmt.Sprintf("write %s instead (and %s if the name itself must go direct)", q("."+e.Domain), q(e.Domain))
		}
		return fmt.Sprintf("list both %s and %s (apex and subdomains)", q(e.Domain), q("."+e.Domain))
	case KindIP:
		a := e.Prefix.Addr()
		if a.Is6() {
			return fmt.Sprintf("list both %s and %s", q(a.String()), q("["+a.String()+"]"))
		}
		if e.Port != 0 {
			return "avoid ports in NO_PROXY"
		}
		return "keep it; add the host names that resolve to it for clients without IP support"
	case KindCIDR:
		return "clients without CIDR support need the names (e.g. `.svc`, `." + "cluster.local`) or the individual addresses; egret's sidecar routes CIDRs for every client"
	}
	return ""
}

// tooBroadDomain reports single-label public suffixes.
func tooBroadDomain(d string) bool {
	if strings.Contains(d, ".") {
		return false
	}
	switch d {
	case "com", "net", "org", "io", "dev", "app", "cloud", "co", "info", "biz", "ai", "us", "uk", "de", "eu", "fr", "nl", "jp", "cn", "ru", "br", "in", "edu", "gov":
		return true
	}
	return false
}

// lintSeparators checks the raw value.
func lintSeparators(value string) []Finding {
	var fs []Finding
	parts := strings.Split(value, ",")
	empty := 0
	for i, p := range parts {
		t := strings.TrimSpace(p)
		if t == "" {
			if strings.TrimSpace(value) != "" {
				empty++
			}
			continue
		}
		if strings.ContainsAny(t, " \t;") {
			fs = append(fs, Finding{Rule: RuleSeparator, Severity: SeverityError, Entry: t,
				Message: fmt.Sprintf("entry %s contains a blank or `;`: only undici, proxy-from-env, global-agent, Ruby and curl <= 8.8 split there; everyone else reads one broken entry", q(t)),
				Fix:     "separate entries with commas only"})
		}
		if p != t && (i == 0 || strings.TrimLeft(p, " \t") != p || strings.TrimRight(p, " \t") != p) {
			if strings.TrimRight(p, " \t\n") != p || i == 0 && strings.TrimLeft(p, " \t") != p {
				fs = append(fs, Finding{Rule: RuleSeparator, Severity: SeverityWarning, Entry: t, Clients: []string{"wget"},
					Message: fmt.Sprintf("blank around entry %s: wget keeps it, so the entry never matches in wget", q(t)),
					Fix:     "remove the blanks"})
			}
		}
	}
	if empty > 0 {
		fs = append(fs, Finding{Rule: RuleSeparator, Severity: SeverityInfo, Clients: []string{"wget"},
			Message: "empty entries (`,,` or a trailing comma): wget then bypasses every host name that ends in a dot",
			Fix:     "remove them"})
	}
	return fs
}

// essential is a destination that must go direct in a pod.
type essential struct {
	url  string
	fix  []string // entries that cover it for every client
	what string
}

func lintEssentials(value string, entries []Entry, clients []Client, domain string, opts LintOptions) []Finding {
	ess := []essential{
		{"http://payments.default.svc/", []string{".svc"}, "Service names (<svc>.<ns>.svc)"},
		{"http://payments.default.svc." + domain + "/", []string{"." + domain}, "fully qualified Service names (." + domain + ")"},
		{"https://kubernetes/", []string{"kubernetes"}, "the API server short name"},
		{"https://kubernetes.default/", []string{"kubernetes.default"}, "the API server name kubernetes.default"},
		{"https://kubernetes.default.svc/", []string{"kubernetes.default.svc"}, "the API server name kubernetes.default.svc"},
		{"https://kubernetes.default.svc." + domain + "/", []string{"kubernetes.default.svc." + domain}, "the API server FQDN"},
	}
	for _, a := range opts.metadataAddrs() {
		fix := []string{a.String()}
		if a.Is6() {
			fix = append(fix, "["+a.String()+"]")
		}
		ess = append(ess, essential{hostURL(a.String(), 0), fix, "the cloud metadata address"})
	}
	ess = append(ess,
		essential{"http://localhost/", []string{"localhost"}, "localhost"},
		essential{"http://127.0.0.1/", []string{"127.0.0.1"}, "127.0.0.1"},
		essential{"http://[::1]/", []string{"::1", "[::1]"}, "::1"},
	)
	for _, ip := range opts.APIServerIPs {
		ess = append(ess, essential{hostURL(ip.String(), 443), []string{ip.String()}, "the API server address " + ip.String()})
	}
	env := lintEnv(value)
	var fs []Finding
	present := map[string]bool{}
	for _, e := range strings.Split(value, ",") {
		present[strings.ToLower(strings.TrimSpace(e))] = true
	}
	for _, es := range ess {
		wrong, throws := decideAll(clients, env, es.url, true)
		wrong = append(wrong, throws...)
		if len(wrong) == 0 {
			continue
		}
		var add, quoted []string
		for _, f := range es.fix {
			if !present[f] {
				add = append(add, f)
				quoted = append(quoted, q(f))
			}
		}
		fix := "add " + strings.Join(quoted, " and ")
		if len(add) == 0 {
			fix = "these clients cannot be made to skip it with NO_PROXY"
		}
		fs = append(fs, Finding{Rule: RuleMissingEssential, Severity: SeverityError, Clients: wrong,
			Message: fmt.Sprintf("%s (%s) would go to the proxy in %s", es.what, es.url, strings.Join(wrong, ", ")), Fix: fix, Add: add})
	}
	var noCIDR []string
	for _, c := range clients {
		if !c.Caps.CIDR4 {
			noCIDR = append(noCIDR, c.Name)
		}
	}
	for _, cidr := range opts.ClusterCIDRs {
		cidr = cidr.Masked()
		a := cidr.Addr().Next()
		covered := false
		for _, e := range entries {
			if e.Kind == KindAll || e.Kind == KindCIDR && e.Prefix.Bits() <= cidr.Bits() && e.Prefix.Contains(cidr.Addr()) {
				covered = true
			}
		}
		if !covered {
			fs = append(fs, Finding{Rule: RuleMissingEssential, Severity: SeverityError, Entry: cidr.String(),
				Message: fmt.Sprintf("cluster range %s is not in NO_PROXY: requests to its IPs (e.g. %s) go to the proxy", cidr, a),
				Fix:     "add " + q(cidr.String()), Add: []string{cidr.String()}})
		} else if len(noCIDR) > 0 {
			fs = append(fs, Finding{Rule: RuleCIDROnly, Severity: SeverityInfo, Entry: cidr.String(), Clients: noCIDR,
				Message: fmt.Sprintf("%s still send requests to IPs in %s through the proxy (no CIDR support)", strings.Join(noCIDR, ", "), cidr),
				Fix:     "use Service names in those clients, or egret's sidecar, which routes CIDRs for every client"})
		}
	}
	return fs
}

// lintCases compares both spellings of each variable.
func lintCases(env Env, clients []Client) []Finding {
	var fs []Finding
	names := func() string {
		var n []string
		for _, c := range clients {
			n = append(n, c.Name)
		}
		return strings.Join(n, ", ")
	}
	_ = names
	for _, base := range []string{"no_proxy", "http_proxy", "https_proxy"} {
		lv, lset := env[base]
		uv, uset := env[upper(base)]
		switch {
		case lset && uset && Normalize(lv) != Normalize(uv):
			fs = append(fs, Finding{Rule: RuleCaseMismatch, Severity: SeverityError,
				Message: fmt.Sprintf("%s and %s differ: go, reqwest and global-agent use %s; curl, wget, Python, Node, Ruby and .NET use %s", base, upper(base), upper(base), base),
				Fix:     "set both to the same value"})
		case lset != uset:
			set, missing := base, upper(base)
			if uset {
				set, missing = upper(base), base
			}
			who := "global-agent (upper-case only)"
			if missing == base {
				who = "wget (lower-case only)"
				if base == "http_proxy" {
					who = "curl and wget (lower-case http_proxy only)"
				}
			}
			fs = append(fs, Finding{Rule: RuleCaseMismatch, Severity: SeverityWarning,
				Message: fmt.Sprintf("only %s is set: %s ignore it", set, who), Fix: "set " + missing + " to the same value"})
		}
	}
	return fs
}
