package route

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"egret.io/egret/internal/ipaddr"
)

// Action is what happens to a destination.
type Action uint8

// Actions. The zero value is invalid so a forgotten field is caught by New.
const (
	Direct Action = iota + 1
	Upstream
	Deny
)

func (a Action) String() string {
	switch a {
	case Direct:
		return "direct"
	case Upstream:
		return "upstream"
	case Deny:
		return "deny"
	default:
		return "unknown(" + strconv.Itoa(int(a)) + ")"
	}
}

// ParseAction reads "direct", "upstream", "upstream:<pool>" or "deny".
// The pool is empty when none is named.
func ParseAction(s string) (Action, string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch {
	case s == "direct":
		return Direct, "", nil
	case s == "deny":
		return Deny, "", nil
	case s == "upstream":
		return Upstream, "", nil
	case strings.HasPrefix(s, "upstream:"):
		pool := strings.TrimPrefix(s, "upstream:")
		if pool == "" {
			return 0, "", errors.New(`"upstream:" needs a pool name`)
		}
		return Upstream, pool, nil
	}
	return 0, "", fmt.Errorf("unknown route action %q (want direct, upstream, upstream:<pool> or deny)", s)
}

// Reason says why a Decision was made. The set is closed: it is a metric label.
type Reason uint8

// Reasons.
const (
	ReasonLoopback Reason = iota + 1 // the destination is loopback: always direct
	ReasonHost                       // an exact host matched
	ReasonSuffix                     // a DNS suffix matched
	ReasonCIDR                       // an IP literal is inside a CIDR
	ReasonResolved                   // a name resolved to an address inside a CIDR
	ReasonPort                       // a rule with only a port matcher matched
	ReasonDefault                    // no rule matched
	ReasonAny                        // a rule matching everything ("*")
)

func (r Reason) String() string {
	switch r {
	case ReasonLoopback:
		return "loopback"
	case ReasonHost:
		return "host"
	case ReasonSuffix:
		return "suffix"
	case ReasonCIDR:
		return "cidr"
	case ReasonResolved:
		return "resolved_cidr"
	case ReasonPort:
		return "port"
	case ReasonDefault:
		return "default"
	case ReasonAny:
		return "any"
	default:
		return "unknown(" + strconv.Itoa(int(r)) + ")"
	}
}

// Rule indexes with a special meaning in Decision.Rule.
const (
	RuleDefault  = -1
	RuleLoopback = -2
)

// Decision is the routing outcome every later stage reads.
type Decision struct {
	Action Action
	Pool   string // set when Action is Upstream
	Reason Reason
	Rule   int    // index of the matching rule; RuleDefault or RuleLoopback
	Source string // where the deciding rule came from ("env DIRECT_CIDRS", "config routes[2]")
	Entry  string // the matcher entry that decided (".svc", "10.0.0.0/8"), if any
	// Addrs holds the addresses the decision approves when Decide resolved
	// the destination's name (nil when it did not): the whole answer of
	// its one lookup, or — when a CIDR rule let the name through by its
	// addresses (ReasonResolved) — only the addresses inside the rule's
	// ranges. A direct dial uses them and nothing else, so the connection
	// goes where the rule looked, from the same answer.
	Addrs []netip.Addr
	// ResolveErr is the lookup failure when resolution was tried and failed;
	// the name then matched no CIDR rule.
	ResolveErr error
	// WouldDeny describes the report-only deny rule that would have denied
	// the destination had it been enforced (Detail form); empty otherwise.
	// It is never set on a Deny decision.
	WouldDeny string
}

// Detail returns a short human reason: "suffix .svc (env DIRECT_SUFFIXES)".
func (d Decision) Detail() string {
	var b strings.Builder
	b.WriteString(d.Reason.String())
	if d.Entry != "" {
		b.WriteByte(' ')
		b.WriteString(d.Entry)
	}
	if d.Source != "" {
		b.WriteString(" (")
		b.WriteString(d.Source)
		b.WriteByte(')')
	}
	return b.String()
}

// Dest is a destination: a host name or IP literal, and a port.
type Dest struct {
	Host string     // lower case, no brackets, no trailing dot
	Port uint16     // never 0 once parsed
	Addr netip.Addr // valid when Host is an IP literal
}

// String returns host:port with IPv6 literals bracketed.
func (d Dest) String() string {
	return net.JoinHostPort(d.Host, strconv.Itoa(int(d.Port)))
}

// NewDest normalises host (case, brackets, trailing dot, IPv6 zone
// rejected) and pairs it with port.
func NewDest(host string, port uint16) (Dest, error) {
	if port == 0 {
		return Dest{}, errors.New("port 0 is not a destination")
	}
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if h == "" {
		return Dest{}, errors.New("empty host")
	}
	if strings.HasSuffix(h, ".") {
		// "10.1.2.3." is the address, not a name.
		if _, err := netip.ParseAddr(h[:len(h)-1]); err == nil {
			h = h[:len(h)-1]
		}
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return Dest{}, fmt.Errorf("host %q: zoned addresses are not destinations", host)
		}
		a = a.Unmap()
		return Dest{Host: a.String(), Port: port, Addr: a}, nil
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" {
		return Dest{}, fmt.Errorf("host %q: empty name", host)
	}
	if err := checkName(h); err != nil {
		return Dest{}, err
	}
	return Dest{Host: h, Port: port}, nil
}

// ParseDest parses "host:port" (or "host" with defaultPort when it is not 0).
func ParseDest(hostport string, defaultPort uint16) (Dest, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		if defaultPort == 0 {
			return Dest{}, fmt.Errorf("destination %q: want host:port", hostport)
		}
		host, portStr = hostport, strconv.Itoa(int(defaultPort))
	}
	p, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || p == 0 {
		return Dest{}, fmt.Errorf("destination %q: bad port %q", hostport, portStr)
	}
	return NewDest(host, uint16(p))
}

// checkName accepts what can appear in a DNS name or a Kubernetes Service
// name: letters, digits, '-', '_', '.'; no empty label; at most 253 bytes.
func checkName(h string) error {
	if len(h) > 253 {
		return fmt.Errorf("host name too long (%d bytes)", len(h))
	}
	last := byte('.')
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.':
			if last == '.' {
				return fmt.Errorf("host %q: empty label", h)
			}
		default:
			return fmt.Errorf("host %q: invalid character %q", h, c)
		}
		last = c
	}
	if last == '.' {
		return fmt.Errorf("host %q: empty label", h)
	}
	return nil
}

// IsLoopback reports whether d is a loopback address or a localhost name.
func (d Dest) IsLoopback() bool {
	if d.Addr.IsValid() {
		return d.Addr.IsLoopback()
	}
	return d.Host == "localhost" || strings.HasSuffix(d.Host, ".localhost")
}

// Suffix is a DNS suffix matcher: it matches names below Domain, and Domain
// itself when Apex is set. ".svc" is {svc, false}; "example.com" is
// {example.com, true}.
type Suffix struct {
	Domain string
	Apex   bool
}

// ParseSuffix reads ".svc" (subdomains), "*.svc" (same) or "svc" (itself and
// subdomains).
func ParseSuffix(s string) (Suffix, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	apex := true
	switch {
	case strings.HasPrefix(s, "*."):
		s, apex = s[2:], false
	case strings.HasPrefix(s, "."):
		s, apex = s[1:], false
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return Suffix{}, errors.New("empty DNS suffix")
	}
	if err := checkName(s); err != nil {
		return Suffix{}, err
	}
	return Suffix{Domain: s, Apex: apex}, nil
}

func (s Suffix) String() string {
	if s.Apex {
		return s.Domain
	}
	return "." + s.Domain
}

// Match lists what a rule matches. Hosts, Suffixes and CIDRs are
// alternatives: the destination must match one of them (if any are set).
// Ports, when set, must also match.
type Match struct {
	Any      bool           // matches every destination ("*")
	Hosts    []string       // exact names, or IP literals (treated as a single-address CIDR)
	Suffixes []Suffix       // DNS suffixes
	CIDRs    []netip.Prefix // IP ranges: IP literals, and names by their resolved addresses
	Ports    []uint16
}

// Rule is one routing rule.
type Rule struct {
	Match  Match
	Action Action
	Pool   string // for Upstream; empty means the default pool
	Source string // where the rule came from, for logs and explain
	// Report makes a Deny rule report-only (dry run): when it would decide,
	// Decide records it in Decision.WouldDeny and goes on with the next
	// rule as if it were not there.
	Report bool
}

// Resolver looks names up. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

type compiled struct {
	rule     Rule
	hosts    map[string]string // name → entry as written
	suffixes map[string]Suffix // domain → suffix
	cidrs    []netip.Prefix
	ports    []uint16
	anyName  bool // hosts or suffixes present
	any      bool
}

// Table is an immutable, ordered rule list with a default.
type Table struct {
	rules []compiled
	def   Decision
}

// New validates rules and builds a Table. def is the default action and
// defPool its pool when def is Upstream.
func New(rules []Rule, def Action, defPool string) (*Table, error) {
	t := &Table{def: Decision{Action: def, Pool: defPool, Reason: ReasonDefault, Rule: RuleDefault, Source: "default route"}}
	if def < Direct || def > Deny {
		return nil, fmt.Errorf("default route: invalid action %v", def)
	}
	for i, r := range rules {
		if r.Action < Direct || r.Action > Deny {
			return nil, fmt.Errorf("rule %d (%s): invalid action %v", i, r.Source, r.Action)
		}
		if r.Report && r.Action != Deny {
			return nil, fmt.Errorf("rule %d (%s): only deny rules can be report-only", i, r.Source)
		}
		c := compiled{rule: r, cidrs: append([]netip.Prefix(nil), r.Match.CIDRs...), ports: r.Match.Ports}
		for _, h := range r.Match.Hosts {
			if lit := strings.Trim(h, "[]"); looksLikeAddr(lit) {
				a, err := ipaddr.ParseAddr(lit)
				if err != nil {
					return nil, fmt.Errorf("rule %d (%s): host %w", i, r.Source, err)
				}
				c.cidrs = append(c.cidrs, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
			d, err := NewDest(h, 1)
			if err != nil {
				return nil, fmt.Errorf("rule %d (%s): %w", i, r.Source, err)
			}
			if c.hosts == nil {
				c.hosts = map[string]string{}
			}
			c.hosts[d.Host] = h
		}
		for _, s := range r.Match.Suffixes {
			if c.suffixes == nil {
				c.suffixes = map[string]Suffix{}
			}
			if old, ok := c.suffixes[s.Domain]; ok && old.Apex {
				continue // "x" already covers ".x"
			}
			c.suffixes[s.Domain] = s
		}
		for j, p := range c.cidrs {
			if !p.IsValid() {
				return nil, fmt.Errorf("rule %d (%s): invalid CIDR", i, r.Source)
			}
			c.cidrs[j] = ipaddr.Canonical(p)
		}
		c.anyName = len(c.hosts) > 0 || len(c.suffixes) > 0
		c.any = r.Match.Any
		if !c.any && !c.anyName && len(c.cidrs) == 0 && len(c.ports) == 0 {
			return nil, fmt.Errorf("rule %d (%s): matches nothing (no hosts, suffixes, CIDRs or ports)", i, r.Source)
		}
		t.rules = append(t.rules, c)
	}
	return t, nil
}

// Rules returns the table's rules in order (for explain and the status page).
func (t *Table) Rules() []Rule {
	out := make([]Rule, len(t.rules))
	for i, c := range t.rules {
		out[i] = c.rule
	}
	return out
}

// Default returns the default decision.
func (t *Table) Default() Decision { return t.def }

// Decide routes d. res may be nil, in which case names never match CIDRs.
func (t *Table) Decide(ctx context.Context, d Dest, res Resolver) Decision {
	if d.IsLoopback() {
		return Decision{Action: Direct, Reason: ReasonLoopback, Rule: RuleLoopback, Source: "built-in"}
	}
	var (
		addrs      []netip.Addr
		resolved   bool
		resolveErr error
	)
	var wouldDeny string
	for i := range t.rules {
		c := &t.rules[i]
		dec, ok := c.match(ctx, i, d, res, &addrs, &resolved, &resolveErr)
		if !ok {
			continue
		}
		if c.rule.Report {
			if wouldDeny == "" {
				wouldDeny = dec.Detail()
			}
			continue
		}
		if dec.Action != Deny {
			dec.WouldDeny = wouldDeny
		}
		return dec
	}
	dec := withAddrs(t.def, addrs, resolveErr)
	if dec.Action != Deny {
		dec.WouldDeny = wouldDeny
	}
	return dec
}

// match tries one rule; names are resolved at most once per Decide (the
// state lives in the caller).
func (c *compiled) match(ctx context.Context, i int, d Dest, res Resolver, addrs *[]netip.Addr, resolved *bool, resolveErr *error) (Decision, bool) {
	if len(c.ports) > 0 && !hasPort(c.ports, d.Port) {
		return Decision{}, false
	}
	dec := Decision{Action: c.rule.Action, Pool: c.rule.Pool, Rule: i, Source: c.rule.Source}
	if c.any {
		dec.Reason, dec.Entry = ReasonAny, "*"
		return withAddrs(dec, *addrs, *resolveErr), true
	}
	if !c.anyName && len(c.cidrs) == 0 {
		dec.Reason = ReasonPort
		return withAddrs(dec, *addrs, *resolveErr), true
	}
	// A deny (enforced or report-only) closes every spelling of what it
	// names; anything else opens only the address as dialled (package
	// ipaddr).
	scope := ipaddr.AsDialled
	if c.rule.Action == Deny {
		scope = ipaddr.WithCarried
	}
	if d.Addr.IsValid() {
		if h, ok := ipaddr.Lookup(c.cidrs, d.Addr, scope); ok {
			dec.Reason, dec.Entry = ReasonCIDR, h.String()
			return dec, true
		}
		return Decision{}, false
	}
	if c.hosts != nil {
		if e, ok := c.hosts[d.Host]; ok {
			dec.Reason, dec.Entry = ReasonHost, e
			return withAddrs(dec, *addrs, *resolveErr), true
		}
	}
	if c.suffixes != nil {
		if s, ok := matchSuffix(c.suffixes, d.Host); ok {
			dec.Reason, dec.Entry = ReasonSuffix, s.String()
			return withAddrs(dec, *addrs, *resolveErr), true
		}
	}
	if len(c.cidrs) > 0 && res != nil {
		if !*resolved {
			*resolved = true
			*addrs, *resolveErr = lookup(ctx, res, d.Host)
		}
		if scope == ipaddr.WithCarried {
			// A deny closes the name when any of its addresses is inside.
			for _, a := range *addrs {
				if h, ok := ipaddr.Lookup(c.cidrs, a, scope); ok {
					dec.Reason, dec.Entry = ReasonResolved, resolvedEntry(h, a)
					return withAddrs(dec, *addrs, *resolveErr), true
				}
			}
			return Decision{}, false
		}
		// Anything else lets the name through by the addresses inside
		// its ranges, and only by those: they are all the decision
		// approves, so a name answering [outside, inside] reaches only
		// the inside address.
		var first ipaddr.Hit
		n := 0
		for _, a := range *addrs {
			if h, ok := ipaddr.Lookup(c.cidrs, a, scope); ok {
				if n == 0 {
					first = h
				}
				n++
			}
		}
		if n == 0 {
			return Decision{}, false
		}
		approved := *addrs
		if n < len(approved) {
			approved = make([]netip.Addr, 0, n)
			for _, a := range *addrs {
				if ipaddr.Contains(c.cidrs, a) {
					approved = append(approved, a)
				}
			}
		}
		dec.Reason, dec.Entry = ReasonResolved, resolvedEntry(first, first.Addr)
		return withAddrs(dec, approved, *resolveErr), true
	}
	return Decision{}, false
}

// resolvedEntry is the Entry of a name decided by its address a: "range
// (address)", with the IPv4 address a carries when that is what matched.
func resolvedEntry(h ipaddr.Hit, a netip.Addr) string {
	if h.Via == ipaddr.EmbedNone {
		return h.Prefix.String() + " (" + a.String() + ")"
	}
	return h.Prefix.String() + " (" + ipaddr.Plain(a).String() + ", " + h.Via.Human() + " of " + h.Addr.String() + ")"
}

// lookup resolves host once for Decide: the addresses as dialled (no zone,
// IPv4-mapped as IPv4), in the resolver's order, never the resolver's own
// slice modified.
func lookup(ctx context.Context, res Resolver, host string) ([]netip.Addr, error) {
	addrs, err := res.LookupNetIP(ctx, "ip", host)
	for i, a := range addrs {
		if p := ipaddr.Plain(a); p != a {
			out := make([]netip.Addr, len(addrs))
			copy(out, addrs[:i])
			for j := i; j < len(addrs); j++ {
				out[j] = ipaddr.Plain(addrs[j])
			}
			return out, err
		}
	}
	return addrs, err
}

func withAddrs(d Decision, addrs []netip.Addr, err error) Decision {
	d.Addrs, d.ResolveErr = addrs, err
	return d
}

// looksLikeAddr tells an IP literal (possibly malformed, or zoned) from a
// name: it parses as an address, or holds a colon or a zone.
func looksLikeAddr(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	return strings.ContainsAny(h, ":%")
}

func hasPort(ports []uint16, p uint16) bool {
	for _, q := range ports {
		if q == p {
			return true
		}
	}
	return false
}

// matchSuffix walks host's label boundaries from the left, so the longest
// matching suffix wins; "a.b.svc" tries "a.b.svc" (apex only), "b.svc", "svc".
func matchSuffix(m map[string]Suffix, host string) (Suffix, bool) {
	if s, ok := m[host]; ok && s.Apex {
		return s, true
	}
	for i := 0; i < len(host); i++ {
		if host[i] == '.' {
			if s, ok := m[host[i+1:]]; ok {
				return s, true
			}
		}
	}
	return Suffix{}, false
}

// Join is a Table of the rules of ts, in order, with the default def (and
// defPool). It shares the tables' compiled rules (their name maps and
// ranges) instead of building them again: a combination of many large
// tables costs a slice of rule headers.
func Join(def Action, defPool string, ts ...*Table) (*Table, error) {
	if def < Direct || def > Deny {
		return nil, fmt.Errorf("default route: invalid action %v", def)
	}
	n := 0
	for _, t := range ts {
		n += len(t.rules)
	}
	out := &Table{rules: make([]compiled, 0, n), def: Decision{Action: def, Pool: defPool, Reason: ReasonDefault, Rule: RuleDefault, Source: "default route"}}
	for _, t := range ts {
		out.rules = append(out.rules, t.rules...)
	}
	return out, nil
}
