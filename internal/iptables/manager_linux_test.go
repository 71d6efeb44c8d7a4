//go:build linux

package iptables_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/iptables"
	"egret.io/egret/internal/testutil/netns"
)

var backends = []iptables.Backend{iptables.BackendNFT, iptables.BackendLegacy}

func requireIptables(t *testing.T, b iptables.Backend, fams ...iptables.Family) {
	t.Helper()
	var tools []string
	for _, f := range fams {
		tools = append(tools, b.Save(f), b.Restore(f))
	}
	netns.Require(t, tools...)
}

func runner(ns *netns.NS) iptables.ExecRunner {
	return iptables.ExecRunner{Prefix: []string{"ip", "netns", "exec", ns.Name}}
}

var counters = regexp.MustCompile(`\[\d+:\d+\]$`)

// natSave returns the nat table as iptables-save prints it, without comment
// lines and with counters zeroed.
func natSave(t *testing.T, ns *netns.NS, b iptables.Backend, fam iptables.Family) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(ns.Run(t, b.Save(fam), "-t", "nat"), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, counters.ReplaceAllString(l, "[0:0]"))
	}
	return out
}

// ours splits a save into egret's lines (chain declarations and rules that
// are in or jump to EGRET_ chains) and everything else.
func ours(lines []string) (egret, rest []string) {
	for _, l := range lines {
		if strings.HasPrefix(l, ":EGRET_") || strings.HasPrefix(l, "-A EGRET_") || strings.Contains(l, "-j EGRET_") {
			egret = append(egret, l)
		} else {
			rest = append(rest, l)
		}
	}
	return egret, rest
}

func expectedLines(rs iptables.Ruleset) []string {
	out := []string{":" + iptables.ChainOutput + " - [0:0]", ":" + iptables.ChainRedirect + " - [0:0]"}
	for _, r := range rs.Rules {
		out = append(out, r.Line())
	}
	return out
}

// TestApplyRemove applies rules in a fresh namespace with each backend and
// family and checks: iptables-save shows exactly egret's chains and rules
// (spelled as Build spells them) beside an untouched foreign rule; applying
// again changes nothing; Remove restores the table saved before Apply;
// removing again is a no-op.
func TestApplyRemove(t *testing.T) {
	specs := []struct {
		name string
		spec iptables.Spec
	}{
		{"ipv4", iptables.Spec{ProxyUID: 1337, ProxyGID: 1337, RedirectPort: 15001,
			ExcludeCIDRs: []string{"10.96.0.0/12", "169.254.169.254"}, ExcludePorts: []string{"22", "8000-8100"},
			ExcludeInterfaces: []string{"eth9", "wg+"}}},
		{"ipv6", iptables.Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: 15001, IPv6: true,
			ExcludeCIDRs: []string{"10.96.0.0/12", "fd00:10:96::/112"}, IncludeCIDRs: []string{"0.0.0.0/0", "2000::/3"}}},
	}
	for _, b := range backends {
		for _, sc := range specs {
			t.Run(b.String()+"-"+sc.name, func(t *testing.T) {
				c, err := sc.spec.Compile()
				if err != nil {
					t.Fatal(err)
				}
				requireIptables(t, b, c.Families()...)
				ns := netns.New(t, "ipt-"+b.String())
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				// A foreign rule that egret must leave alone.
				for _, fam := range c.Families() {
					tool := strings.TrimSuffix(b.Save(fam), "-save")
					ns.Run(t, tool, "-w", "-t", "nat", "-A", "POSTROUTING", "-p", "udp", "-m", "comment", "--comment", "not egret", "-j", "RETURN")
				}
				pre := map[iptables.Family][]string{}
				for _, fam := range c.Families() {
					pre[fam] = natSave(t, ns, b, fam)
				}
				m := &iptables.Manager{Runner: runner(ns), Backend: b, Logf: t.Logf}

				if _, err := m.Apply(ctx, c); err != nil {
					t.Fatal(err)
				}
				first := map[iptables.Family][]string{}
				for _, fam := range c.Families() {
					got := natSave(t, ns, b, fam)
					first[fam] = got
					egret, rest := ours(got)
					if want := expectedLines(iptables.Build(c, fam)); !slices.Equal(egret, want) {
						t.Errorf("%s after apply, egret lines:\n%s\nwant:\n%s", fam, strings.Join(egret, "\n"), strings.Join(want, "\n"))
					}
					if !slices.Equal(rest, pre[fam]) {
						t.Errorf("%s after apply, other lines changed:\n%s\nwas:\n%s", fam, strings.Join(rest, "\n"), strings.Join(pre[fam], "\n"))
					}
				}

				res, err := m.Apply(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				for _, fr := range res.Families {
					if fr.Before.Empty() {
						t.Errorf("%s: second apply did not see the first one's rules", fr.Family)
					}
				}
				for _, fam := range c.Families() {
					if got := natSave(t, ns, b, fam); !slices.Equal(got, first[fam]) {
						t.Errorf("%s: second apply changed the table:\n%s\nwant:\n%s", fam, strings.Join(got, "\n"), strings.Join(first[fam], "\n"))
					}
				}

				for range 2 {
					if _, err := m.Remove(ctx, c); err != nil {
						t.Fatal(err)
					}
					for _, fam := range c.Families() {
						if got := natSave(t, ns, b, fam); !slices.Equal(got, pre[fam]) {
							t.Errorf("%s after remove:\n%s\nwant:\n%s", fam, strings.Join(got, "\n"), strings.Join(pre[fam], "\n"))
						}
					}
				}
			})
		}
	}
}

// TestApplyCleansResidue starts from rules an older egret (or a crashed
// run) could leave: a duplicated jump, a stale port, an obsolete EGRET_
// chain. Apply must end with exactly the current rules.
func TestApplyCleansResidue(t *testing.T) {
	for _, b := range backends {
		t.Run(b.String(), func(t *testing.T) {
			requireIptables(t, b, iptables.IPv4)
			ns := netns.New(t, "ipt-residue")
			stale := "*nat\n:EGRET_OUTPUT - [0:0]\n:EGRET_REDIRECT - [0:0]\n:EGRET_OLD - [0:0]\n" +
				"-A OUTPUT -p tcp -j EGRET_OUTPUT\n-A OUTPUT -p tcp -j EGRET_OUTPUT\n-A PREROUTING -p tcp -j EGRET_OLD\n" +
				"-A EGRET_OUTPUT -j EGRET_REDIRECT\n-A EGRET_REDIRECT -p tcp -j REDIRECT --to-ports 15000\n" +
				"-A EGRET_OLD -j RETURN\nCOMMIT\n"
			cmd := ns.Command(context.Background(), b.Restore(iptables.IPv4), "--noflush")
			cmd.Stdin = strings.NewReader(stale)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("seed residue: %v: %s", err, out)
			}
			c, _ := iptables.Spec{ProxyUID: 1337, ProxyGID: -1, RedirectPort: 15001}.Compile()
			m := &iptables.Manager{Runner: runner(ns), Backend: b}
			if _, err := m.Apply(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			egret, _ := ours(natSave(t, ns, b, iptables.IPv4))
			if want := expectedLines(iptables.Build(c, iptables.IPv4)); !slices.Equal(egret, want) {
				t.Fatalf("after apply over residue:\n%s\nwant:\n%s", strings.Join(egret, "\n"), strings.Join(want, "\n"))
			}
			if _, err := m.Remove(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			if egret, _ := ours(natSave(t, ns, b, iptables.IPv4)); len(egret) != 0 {
				t.Fatalf("left after remove: %q", egret)
			}
		})
	}
}

// TestDetect checks the backend choice in namespaces holding rules of one
// backend or the other.
func TestDetect(t *testing.T) {
	requireIptables(t, iptables.BackendNFT, iptables.IPv4)
	requireIptables(t, iptables.BackendLegacy, iptables.IPv4)
	for _, tc := range []struct {
		name string
		seed [][]string
		want iptables.Backend
	}{
		{"fresh-namespace-defaults-to-nft", nil, iptables.BackendNFT},
		{"legacy-rules", [][]string{{"iptables-legacy", "-w", "-t", "filter", "-A", "OUTPUT", "-p", "udp", "-j", "ACCEPT"}}, iptables.BackendLegacy},
		{"nft-rules", [][]string{{"iptables-nft", "-t", "filter", "-A", "OUTPUT", "-p", "udp", "-j", "ACCEPT"}}, iptables.BackendNFT},
		{"kubelet-hint-beats-legacy-count", [][]string{
			{"iptables-legacy", "-w", "-t", "filter", "-A", "OUTPUT", "-p", "udp", "-j", "ACCEPT"},
			{"iptables-legacy", "-w", "-t", "filter", "-A", "OUTPUT", "-p", "udp", "-j", "ACCEPT"},
			{"iptables-nft", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT"}}, iptables.BackendNFT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := netns.New(t, "ipt-detect")
			for _, argv := range tc.seed {
				ns.Run(t, argv...)
			}
			d, err := iptables.Detect(context.Background(), runner(ns), []iptables.Family{iptables.IPv4})
			if err != nil {
				t.Fatal(err)
			}
			if d.Backend != tc.want {
				t.Fatalf("Detect = %s (%s), want %s", d.Backend, d.Reason, tc.want)
			}
		})
	}
}
