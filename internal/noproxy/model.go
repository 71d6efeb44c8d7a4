package noproxy

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// Decision is what a client does with one request.
type Decision uint8

// The decisions a client can take.
const (
	DecisionDirect Decision = iota + 1 // connect to the target itself
	DecisionProxy                      // send the request through a proxy
	DecisionError                      // the request fails or the client throws
)

// String returns "direct", "proxy" or "error".
func (d Decision) String() string {
	switch d {
	case DecisionDirect:
		return "direct"
	case DecisionProxy:
		return "proxy"
	case DecisionError:
		return "error"
	default:
		return fmt.Sprintf("unknown(%d)", uint8(d))
	}
}

// Verification says how a client model was checked.
type Verification uint8

// How a model was checked against its client.
const (
	VerifiedReal     Verification = iota + 1 // the real client, run by the live differential test in CI
	VerifiedHarness                          // the client's own decision code, run in a harness
	VerifiedModelled                         // modelled from its source, checked against the vectors only
)

// String returns "live" (the real client in CI), "harness" or "source"
// (modelled from the source).
func (v Verification) String() string {
	switch v {
	case VerifiedReal:
		return "live"
	case VerifiedHarness:
		return "harness"
	case VerifiedModelled:
		return "source"
	default:
		return fmt.Sprintf("unknown(%d)", uint8(v))
	}
}

// Result is one client's prediction for one URL.
type Result struct {
	Client   string   `json:"client"`
	Decision Decision `json:"decision"`
	Proxy    string   `json:"proxy"`  // the proxy URL the client uses (password redacted); "" unless Decision is proxy
	Reason   string   `json:"reason"` // why, in words, naming the variable or entry
}

// MarshalJSON writes {"client","decision","proxy","reason"}.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Client   string `json:"client"`
		Decision string `json:"decision"`
		Proxy    string `json:"proxy"`
		Reason   string `json:"reason"`
	}{r.Client, r.Decision.String(), r.Proxy, r.Reason})
}

// Client is the model of one client runtime at one range of its releases
// (a row of the table Clients returns). Models are data plus a small decide
// function; a release that behaves differently is a new row.
type Client struct {
	// Name is the row's CLI name. The newest row of a family is named after
	// the family ("undici"); older rows add the first release they cover
	// ("undici-7.22"), so `--client undici` means today's release.
	Name    string
	Family  string   // "undici"; `--client family@version` picks the row by version
	Aliases []string // other names that select this row (names it had before)
	Ranges  []Range  // the releases the row stands for
	Column  string   // its column in noproxy-vectors.json, e.g. "curl788" ("" if none)
	Runtime string   // what it stands for, in words
	// Verified says how the model was checked; Checked lists the releases
	// the live differential runs (VerifiedReal) and Source what was read
	// instead (VerifiedModelled), or how the range ends were found.
	Verified Verification
	Checked  []string
	Source   string
	// Caps summarise how the client reads NO_PROXY entries; used to explain
	// why an entry egret matches does not match for this client.
	Caps Caps

	decide func(env Env, t *target) verdict
	label  string // the name the caller selected the row by, for results
}

// Caps lists what a client's NO_PROXY matcher understands.
type Caps struct {
	CIDR4       bool // IPv4 CIDR entries (IP-literal URLs)
	CIDR6       bool // IPv6 CIDR entries
	StarDot     bool // "*.x.com" means subdomains
	BareSub     bool // a bare "x.com" also covers subdomains
	Ports       bool // "host:port" entries
	BareIPv6    bool // "fd00::1" entries match
	BracketIPv6 bool // "[fd00::1]" entries match
	StarInList  bool // "*" as one entry of a list means everything
}

// verdict is what a model's decide function returns.
type verdict struct {
	d      Decision
	proxy  string
	reason string
	notes  []string
	np     string // the NO_PROXY value the client read, for "ignored entry" notes
}

func direct(reason string, notes ...string) verdict {
	return verdict{d: DecisionDirect, reason: reason, notes: notes}
}

func fail(reason string, notes ...string) verdict {
	return verdict{d: DecisionError, reason: reason, notes: notes}
}

func viaProxy(proxy, reason string, notes ...string) verdict {
	return verdict{d: DecisionProxy, proxy: proxy, reason: reason, notes: notes}
}

// ClientNames returns the names of all rows in their fixed order.
func ClientNames() []string {
	cs := Clients()
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return names
}

// ClientByName finds a row by its name, a family name (the family's newest
// row), an alias, or "family@version" (the row whose ranges hold version).
func ClientByName(name string) (Client, bool) {
	c, err := lookupClient(name)
	return c, err == nil
}

func lookupClient(name string) (Client, error) {
	if fam, ver, ok := strings.Cut(name, "@"); ok {
		if fam == "" || ver == "" {
			return Client{}, fmt.Errorf("client %q: write family@version, e.g. axios@1.21", name)
		}
		if c, found := findRow(fam); found && c.Family != fam {
			fam = c.Family
		}
		c, err := ClientForVersion(fam, ver)
		if err != nil {
			return Client{}, err
		}
		c.label = name
		return c, nil
	}
	c, found := findRow(name)
	if !found {
		return Client{}, fmt.Errorf("unknown client %q (known: %s; or family@version, e.g. axios@1.21)", name, strings.Join(ClientNames(), ", "))
	}
	c.label = name
	return c, nil
}

// findRow resolves a row name, a family name or an alias.
func findRow(name string) (Client, bool) {
	cs := Clients()
	for _, c := range cs {
		if c.Name == name {
			return c, true
		}
	}
	var best Client
	found := false
	for _, c := range cs {
		if c.Family == name && (!found || compareVersions(c.newest(), best.newest()) > 0) {
			best, found = c, true
		}
	}
	if found {
		return best, true
	}
	for _, c := range cs {
		for _, a := range c.Aliases {
			if a == name {
				return c, true
			}
		}
	}
	return Client{}, false
}

// DefaultClientNames are the clients explain and lint use when none is
// named: the names of SPEC.md's contract, then the gRPC stacks (grpc-go,
// grpc-js from 1.13, gRPC C-core as Debian 12's grpcio runs it), which read
// the variables their own way (grpc_proxy, no_grpc_proxy, no CIDRs in
// C-core 1.51). Each family's name stands for its newest release;
// curl-7.88 (Debian 12), undici-7.22 and undici-6 (the undici in Node 24's
// and 22's fetch) are the older lines still widely run. "all" selects
// every row instead. The live differential (differential_test.go,
// differential_grpc_test.go) checks every row, whatever this list holds.
var DefaultClientNames = []string{"go", "curl", "curl-7.88", "wget", "python-urllib", "python-requests", "node-http",
	"undici", "undici-7.22", "undici-6", "axios", "proxy-from-env-2", "global-agent", "ruby", "dotnet", "reqwest", "java",
	"grpc-go", "grpc-js", "grpc-core"}

// SelectClients returns the rows for names (see ClientByName), in the order
// given; no names means DefaultClientNames and "all" every row. An unknown
// name, or a version no row covers, is an error listing what is known.
func SelectClients(names []string) ([]Client, error) {
	if len(names) == 0 {
		names = DefaultClientNames
	}
	var out []Client
	for _, n := range names {
		for _, part := range strings.Split(n, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			if part == "all" {
				out = append(out, Clients()...)
				continue
			}
			c, err := lookupClient(part)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// label is the name results carry: the one the row was selected by.
func (c Client) resultName() string {
	if c.label != "" {
		return c.label
	}
	return c.Name
}

// Decide predicts what client c does with rawURL in env.
func (c Client) Decide(rawURL string, env Env) (Result, error) {
	t, err := parseTarget(rawURL)
	if err != nil {
		return Result{}, err
	}
	return c.decideTarget(env, t), nil
}

func (c Client) decideTarget(env Env, t *target) Result {
	if env == nil {
		env = Env{}
	}
	v := c.decide(env, t)
	if v.d == DecisionProxy && v.np != "" && c.Family != "go" {
		v.notes = append(v.notes, c.ignoredNotes(v.np, t)...)
	}
	reason := v.reason
	if len(v.notes) > 0 {
		reason += "; " + strings.Join(v.notes, "; ")
	}
	r := Result{Client: c.resultName(), Decision: v.d, Reason: reason}
	if v.d == DecisionProxy {
		r.Proxy = redact(v.proxy)
	}
	return r
}

// Explain predicts, for each client, what it does with rawURL in env.
func Explain(rawURL string, env Env, clients []Client) ([]Result, error) {
	t, err := parseTarget(rawURL)
	if err != nil {
		return nil, err
	}
	out := make([]Result, 0, len(clients))
	for _, c := range clients {
		out = append(out, c.decideTarget(env, t))
	}
	return out, nil
}

// redact hides the password of a proxy URL.
func redact(proxy string) string {
	if !strings.Contains(proxy, "@") {
		return proxy
	}
	if u, err := url.Parse(proxy); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			return u.Redacted()
		}
		return proxy
	}
	// Unparseable: cut the user info textually.
	if i := strings.Index(proxy, "://"); i >= 0 {
		rest := proxy[i+3:]
		if j := strings.LastIndex(rest, "@"); j >= 0 {
			return proxy[:i+3] + "xxxxx@" + rest[j+1:]
		}
	}
	return "xxxxx"
}

// q quotes an entry or value for a reason: `x`.
func q(s string) string { return "`" + s + "`" }

// describe names the kind of a Go-read entry for reasons.
func describe(e Entry) string {
	switch e.Kind {
	case KindAll:
		return "everything"
	case KindDomain:
		if e.Apex {
			return "name and subdomains"
		}
		return "suffix"
	case KindIP:
		return "IP"
	case KindCIDR:
		return "CIDR"
	}
	return e.Kind.String()
}

// unsetReason says that no proxy variable applies.
func unsetReason(names ...string) string {
	return "no proxy: " + strings.Join(names, ", ") + " unset or empty"
}

// hasScheme reports a "scheme://" prefix.
func hasScheme(v string) bool {
	i := strings.Index(v, "://")
	if i <= 0 {
		return false
	}
	for j, c := range v[:i] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || j > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

// schemeOf returns the lower-case scheme of "scheme://...".
func schemeOf(v string) string {
	if !hasScheme(v) {
		return ""
	}
	return strings.ToLower(v[:strings.Index(v, "://")])
}

// proxyWithDefaultScheme prefixes "http://" when v has no scheme and checks
// that the result has a host. It is the common "assume http://" rule.
func proxyWithDefaultScheme(v string, schemes ...string) (string, error) {
	p := v
	if !hasScheme(p) {
		p = "http://" + p
	}
	u, err := url.Parse(p)
	if err != nil {
		return "", fmt.Errorf("proxy %q is not a URL", redact(v))
	}
	if u.Hostname() == "" {
		return "", fmt.Errorf("proxy %q has no host", redact(v))
	}
	if len(schemes) > 0 {
		ok := false
		for _, s := range schemes {
			if strings.EqualFold(u.Scheme, s) {
				ok = true
			}
		}
		if !ok {
			return "", fmt.Errorf("proxy scheme %q not supported", u.Scheme)
		}
	}
	return p, nil
}

// ignoredNotes explains the entries that egret (Go rules) would match for t
// but that c did not.
func (c Client) ignoredNotes(np string, t *target) []string {
	entries, _ := Parse(np)
	var notes []string
	for _, e := range entries {
		host := t.hostname
		if e.Match(host, t.port) || e.Kind == KindAll {
			notes = append(notes, fmt.Sprintf("entry %s ignored: %s %s", q(e.Raw), c.Name, c.whyIgnored(e, t, np)))
		}
	}
	return notes
}

// whyIgnored names the reading rule that makes c skip an entry.
func (c Client) whyIgnored(e Entry, t *target, np string) string {
	raw := strings.TrimSpace(e.Raw)
	switch {
	case e.Kind == KindAll:
		if strings.TrimSpace(np) == "*" {
			if t.ip.IsValid() {
				return "does not apply `*` to IP addresses"
			}
			return "does not understand `*`"
		}
		return "reads `*` as everything only when it is the whole value (no spaces, no other entries)"
	case e.Kind == KindCIDR && !c.Caps.CIDR4:
		return "has no CIDR support"
	case e.Kind == KindCIDR && e.Prefix.Addr().Is6() && !c.Caps.CIDR6:
		return "has no IPv6 CIDR support"
	case e.Kind == KindCIDR && e.Prefix.Bits() == 0:
		return "does not read a /0 CIDR as everything (use `*`)"
	case e.Port != 0 && !c.Caps.Ports:
		return "ignores entries with a port"
	case e.Port != 0:
		return "compares the port only when the URL states it, or not for this form"
	case e.Kind == KindDomain && strings.HasPrefix(raw, "*.") && !c.Caps.StarDot:
		return "does not understand `*.` (the entry is taken literally; write " + q("."+e.Domain) + ")"
	case e.Kind == KindDomain && e.Apex && t.hostname != e.Domain && !c.Caps.BareSub:
		return "matches a bare name only exactly, not its subdomains (add " + q("."+e.Domain) + ")"
	case e.Kind == KindIP && e.Prefix.Addr().Is6() && !strings.HasPrefix(raw, "[") && !c.Caps.BareIPv6:
		return "needs IPv6 entries in brackets (add " + q("["+e.Prefix.Addr().String()+"]") + ")"
	case e.Kind == KindIP && e.Prefix.Addr().Is6() && raw != e.Prefix.Addr().String():
		return "compares IPv6 entries as strings (write " + q(e.Prefix.Addr().String()) + ")"
	case e.Kind == KindIP && strings.HasPrefix(raw, "[") && !c.Caps.BracketIPv6:
		return "does not read bracketed IPv6 entries (add " + q(e.Prefix.Addr().String()) + ")"
	case e.Rooted || strings.HasSuffix(t.hostname, "."):
		return "does not treat a trailing dot as the same name"
	}
	return "reads this entry differently"
}
