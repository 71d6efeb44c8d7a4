package iptables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Table is the only table egret writes.
const Table = "nat"

// Egret's chains.
const (
	ChainOutput   = "EGRET_OUTPUT"   // decides: direct (RETURN) or redirect
	ChainRedirect = "EGRET_REDIRECT" // REDIRECTs to the transparent port
	chainPrefix   = "EGRET_"
)

// Chain is one of egret's chains and the built-in chain (hook) that jumps
// to it; Hook is empty for chains reached only from egret's own chains.
type Chain struct {
	Name string
	Hook string
}

// Chains lists egret's chains in declaration order.
var Chains = []Chain{
	{Name: ChainOutput, Hook: "OUTPUT"},
	{Name: ChainRedirect},
}

// Rule is one rule in iptables-save's canonical spelling, so that what
// Build produces is exactly what iptables-save prints back.
type Rule struct {
	Chain   string
	Match   []string // matches before the comment, e.g. -p tcp -m tcp --dport 22
	Comment string   // why the rule exists; rendered as "egret: " + Comment
	Target  []string // -j TARGET [options]
}

// Args returns the rule's arguments after the chain name.
func (r Rule) Args() []string {
	args := append([]string(nil), r.Match...)
	args = append(args, "-m", "comment", "--comment", "egret: "+r.Comment)
	return append(args, r.Target...)
}

// Argv returns the arguments of an `iptables` command that appends the rule.
func (r Rule) Argv() []string {
	return append([]string{"-t", Table, "-A", r.Chain}, r.Args()...)
}

// Line returns the rule as an iptables-restore line (-A CHAIN ...).
func (r Rule) Line() string {
	var b strings.Builder
	b.WriteString("-A ")
	b.WriteString(r.Chain)
	for _, a := range r.Args() {
		b.WriteByte(' ')
		if strings.ContainsAny(a, " \t\"'") {
			b.WriteString(strconv.Quote(a))
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// Ruleset is the complete set of egret's rules for one family.
type Ruleset struct {
	Family Family
	Rules  []Rule // jumps from built-in chains first, then egret's chains in order
}

// Build returns the rules for fam. It is pure: the same Config gives the
// same rules, which is what makes Apply idempotent and the output
// golden-testable. Order inside EGRET_OUTPUT: the proxy's UID and GID,
// the excluded UIDs (a service mesh's proxy), loopback, excluded
// interfaces, excluded ports and excluded CIDRs RETURN (go direct); then
// the included CIDRs, or everything else, jump to EGRET_REDIRECT.
func Build(c Config, fam Family) Ruleset {
	rs := Ruleset{Family: fam}
	add := func(chain, comment string, match []string, target ...string) {
		rs.Rules = append(rs.Rules, Rule{Chain: chain, Match: match, Comment: comment, Target: target})
	}
	ret := []string{"-j", "RETURN"}
	add("OUTPUT", "outbound TCP to "+ChainOutput, []string{"-p", "tcp"}, "-j", ChainOutput)

	uid := strconv.FormatUint(uint64(c.ProxyUID), 10)
	add(ChainOutput, "proxy uid "+uid+" goes direct", []string{"-m", "owner", "--uid-owner", uid}, ret...)
	if c.HasProxyGID {
		gid := strconv.FormatUint(uint64(c.ProxyGID), 10)
		add(ChainOutput, "proxy gid "+gid+" goes direct", []string{"-m", "owner", "--gid-owner", gid}, ret...)
	}
	for _, u := range c.ExcludeUIDs {
		uid := strconv.FormatUint(uint64(u), 10)
		add(ChainOutput, "excluded uid "+uid+" goes direct", []string{"-m", "owner", "--uid-owner", uid}, ret...)
	}
	add(ChainOutput, "loopback interface goes direct", []string{"-o", "lo"}, ret...)
	add(ChainOutput, "loopback destination goes direct", []string{"-d", fam.loopback().String()}, ret...)
	for _, ifc := range c.ExcludeInterfaces {
		add(ChainOutput, "excluded interface "+ifc, []string{"-o", ifc}, ret...)
	}
	for _, p := range c.ExcludePorts {
		add(ChainOutput, "excluded port "+p.String(), []string{"-p", "tcp", "-m", "tcp", "--dport", p.arg()}, ret...)
	}
	for _, p := range c.ExcludeCIDRs {
		if fam.contains(p.Addr()) {
			add(ChainOutput, "excluded cidr "+p.String(), dst(p), ret...)
		}
	}
	if len(c.IncludeCIDRs) == 0 {
		add(ChainOutput, "all other outbound TCP is redirected", nil, "-j", ChainRedirect)
	} else {
		for _, p := range c.IncludeCIDRs {
			if fam.contains(p.Addr()) {
				add(ChainOutput, "included cidr "+p.String()+" is redirected", dst(p), "-j", ChainRedirect)
			}
		}
	}
	port := strconv.Itoa(int(c.RedirectPort))
	add(ChainRedirect, "to the transparent proxy on port "+port, []string{"-p", "tcp"}, "-j", "REDIRECT", "--to-ports", port)
	return rs
}

// dst matches destination p; iptables-save omits a match-all /0.
func dst(p netip.Prefix) []string {
	if p.Bits() == 0 {
		return nil
	}
	return []string{"-d", p.String()}
}

// RestoreText renders the ruleset as input for `iptables-restore --noflush`
// (or ip6tables-restore): declaring a chain creates it or, if it exists,
// flushes it, so the text alone is correct on a table without egret's
// rules. Apply adds the deletion of residue jumps (see State).
func (rs Ruleset) RestoreText() string {
	return transaction(chainNames(), nil, rs.Rules, nil)
}

func chainNames() []string {
	names := make([]string, len(Chains))
	for i, c := range Chains {
		names[i] = c.Name
	}
	return names
}

// transaction writes one *nat ... COMMIT block: chain declarations, -D of
// the given lines (each "-A CHAIN ..." as iptables-save printed it), the
// rules, then -X of the chains to delete.
func transaction(declare, deleteLines []string, rules []Rule, drop []string) string {
	var b strings.Builder
	b.WriteString("*" + Table + "\n")
	for _, c := range declare {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	for _, l := range deleteLines {
		b.WriteString("-D " + strings.TrimPrefix(l, "-A ") + "\n")
	}
	for _, r := range rules {
		b.WriteString(r.Line() + "\n")
	}
	for _, c := range drop {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// RemoveText renders the transaction that removes rs after a clean Apply of
// it (what `egret iptables remove --dry-run` prints). Remove itself builds
// the transaction from what iptables-save shows.
func (rs Ruleset) RemoveText() string {
	return removeText(expectedState(rs))
}
