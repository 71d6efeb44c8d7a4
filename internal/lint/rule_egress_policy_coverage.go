package lint

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	npol "egret.io/egret/internal/netpol"
)

const idEgressPolicyCoverage = "egress-policy-coverage"

var ruleEgressPolicyCoverage = Rule{
	ID:       idEgressPolicyCoverage,
	Severity: Warning,
	Summary:  "an egress NetworkPolicy is not \"egress only via the gateway\"",
	Help: "The egress NetworkPolicies of a namespace (their union, as the CNI applies them) are evaluated for its pods " +
		"against what `egret render networkpolicy NAMESPACE` computes: the cluster DNS pods and the egress gateway (the input's, " +
		"else egret-system's on 3128) must be reachable, and with `--cluster-cidrs`/`--api-server-ip` each cluster " +
		"range; outside addresses, public DNS and the cloud metadata service must not. A blocked destination breaks " +
		"name resolution, the proxy or the direct cluster traffic NO_PROXY sends; an allowed one lets pods bypass the " +
		"gateway. Prefer the generated policy: label the namespace `egret.io/egress-policy=enabled` (docs/egress-policy.md).",
	set: checkEgressPolicyCoverage,
}

func checkEgressPolicyCoverage(c *check) {
	byNS := map[string][]*netpol{}
	for _, n := range c.netpols {
		if hasEgressType(&n.np) {
			byNS[n.obj.Namespace] = append(byNS[n.obj.Namespace], n)
		}
	}
	in := npol.Inputs{DNS: npol.DefaultDNS, Gateway: c.gatewayPeer()}
	for _, p := range c.opts.Cluster.CIDRs {
		in.Ranges = append(in.Ranges, npol.Range{Prefix: p.Masked(), Kind: "cluster-cidr"})
	}
	for _, a := range c.opts.Cluster.APIServerIPs {
		in.Ranges = append(in.Ranges, npol.Range{Prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), Kind: "apiserver"})
	}
	if len(in.Ranges) == 0 {
		// Pod addresses unknown: a pod may be in any private range.
		for _, a := range []string{"10.0.0.10", "172.16.0.10", "192.168.0.10", "100.64.0.10", "fd00::10"} {
			in.PodAddrGuesses = append(in.PodAddrGuesses, netip.MustParseAddr(a))
		}
	}
	for _, ns := range slices.Sorted(maps.Keys(byNS)) {
		nps := byNS[ns]
		pols := make([]networkingv1.NetworkPolicy, len(nps))
		for i, n := range nps {
			pols[i] = n.np
			pols[i].Namespace = ns
		}
		// The pods judged: the namespace's workloads an egress policy
		// selects, else a pod of a policy that selects every pod.
		type src struct {
			name string
			s    npol.Source
		}
		var srcs []src
		for _, w := range c.workloads {
			if !sameNS(ns, w.ref.Namespace) || w.pod.ignored(idEgressPolicyCoverage) || c.isGateway(w) {
				continue
			}
			for _, n := range nps {
				if selects(&n.np.Spec.PodSelector, ns, w) {
					srcs = append(srcs, src{w.ref.String(), npol.Source{Namespace: ns, Labels: w.template.Labels}})
					break
				}
			}
		}
		if len(srcs) == 0 {
			for _, n := range nps {
				if len(n.np.Spec.PodSelector.MatchLabels) == 0 && len(n.np.Spec.PodSelector.MatchExpressions) == 0 {
					srcs = append(srcs, src{"every pod of namespace " + nsOf(ns), npol.Source{Namespace: ns}})
					break
				}
			}
		}
		seen := map[string]bool{}
		for _, s := range srcs {
			var blocked, allowed []string
			for _, p := range npol.Judge(pols, s.s, in) {
				if p.Allow {
					blocked = append(blocked, p.Name)
				} else {
					allowed = append(allowed, p.Name)
				}
			}
			if len(blocked)+len(allowed) == 0 {
				continue
			}
			var parts []string
			if len(blocked) > 0 {
				parts = append(parts, "blocks "+strings.Join(blocked, ", "))
			}
			if len(allowed) > 0 {
				parts = append(parts, "allows "+strings.Join(allowed, ", "))
			}
			msg := strings.Join(parts, "; ")
			if seen[msg] {
				continue
			}
			seen[msg] = true
			var names []string
			for _, n := range nps {
				names = append(names, n.obj.Ref().String())
			}
			c.report(idEgressPolicyCoverage, Warning, nps[0].obj, "spec.egress",
				"for %s, the egress NetworkPolicies (%s) %s: allow exactly DNS, the gateway and the cluster — label the namespace egret.io/egress-policy=enabled or use `egret render networkpolicy %s`",
				s.name, strings.Join(names, ", "), msg, nsOf(ns))
		}
	}
}

// gatewayPeer is the egress gateway the policies must allow: the first
// gateway of the input behind a Service (its proxy port's target), else
// egret's default.
func (c *check) gatewayPeer() npol.Peer {
	for _, g := range c.gateways() {
		for _, s := range c.servicesOf(g) {
			for _, p := range s.svc.Spec.Ports {
				if p.Name == "proxy" || p.Port == ProxyPort {
					t := p.TargetPort
					if (t.Type == intstr.Int && t.IntVal == 0) || (t.Type == intstr.String && t.StrVal == "") {
						t = intstr.FromInt32(p.Port)
					}
					port := npol.Port{Protocol: corev1.ProtocolTCP, Port: t}
					if t.Type == intstr.String {
						port = npol.Port{Protocol: corev1.ProtocolTCP, Port: namedPort(g, t.StrVal), Name: t.StrVal}
					}
					return npol.Peer{Namespace: nsOf(s.obj.Namespace), Labels: s.svc.Spec.Selector, Ports: []npol.Port{port}}
				}
			}
		}
	}
	return npol.Peer{Namespace: "egret-system", Labels: npol.DefaultGatewayLabels,
		Ports: []npol.Port{{Protocol: corev1.ProtocolTCP, Port: intstr.FromInt32(npol.DefaultGatewayPort)}}}
}

// namedPort resolves a container port name of w to its number when a
// container declares it (a policy may name the port or number it).
func namedPort(w *workload, name string) intstr.IntOrString {
	for _, ct := range w.spec.Containers {
		for _, p := range ct.Ports {
			if p.Name == name {
				return intstr.FromInt32(p.ContainerPort)
			}
		}
	}
	return intstr.FromString(name)
}
