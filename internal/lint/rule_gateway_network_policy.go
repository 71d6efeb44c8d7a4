package lint

import (
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

const idGatewayNetworkPolicy = "gateway-network-policy"

var ruleGatewayNetworkPolicy = Rule{
	ID:       idGatewayNetworkPolicy,
	Severity: Warning,
	Summary:  "pods routed to an egress gateway are not stopped from going out directly",
	Help: "Proxy variables are advice: raw TCP clients, some gRPC stacks and SDKs ignore them, and a " +
		"forgotten NO_PROXY entry goes direct. Only a NetworkPolicy with `policyTypes: [Egress]` that allows DNS, " +
		"the cluster and the gateway (and nothing else) makes the gateway the only way out. Checked when the " +
		"input holds both the gateway and the workloads that use it.",
	set: checkGatewayNetworkPolicy,
}

func checkGatewayNetworkPolicy(c *check) {
	gws := c.gateways()
	if len(gws) == 0 {
		return
	}
	domain := c.opts.Cluster.domain()
	for _, w := range c.workloads {
		if w.pod.ignored(idGatewayNetworkPolicy) || c.isGateway(w) {
			continue
		}
		hosts := podProxyHosts(w)
		if len(hosts) == 0 {
			continue
		}
		var via []string
		for _, g := range gws {
			for _, s := range c.servicesOf(g) {
				for _, h := range serviceHosts(s, w.ref.Namespace, domain) {
					if hosts[h] {
						via = append(via, s.obj.Ref().String())
						break
					}
				}
			}
		}
		if len(via) == 0 {
			continue
		}
		sort.Strings(via)
		if why := c.directEgress(w); why != "" {
			c.report(idGatewayNetworkPolicy, Warning, w.obj, "",
				"%s is routed to the egress gateway (%s) but %s: add a NetworkPolicy in namespace %s with policyTypes [Egress] that allows only DNS, the cluster and the gateway",
				w.ref, strings.Join(via, ", "), why, nsOf(w.ref.Namespace))
		}
	}
}

// directEgress says why w's pods may still reach the outside directly, or
// returns "" when the NetworkPolicies in the input confine them.
func (c *check) directEgress(w *workload) string {
	var egress []*netpol
	for _, n := range c.netpols {
		if selects(&n.np.Spec.PodSelector, n.obj.Namespace, w) && hasEgressType(&n.np) {
			egress = append(egress, n)
		}
	}
	if len(egress) == 0 {
		return "no NetworkPolicy restricts its egress"
	}
	for _, n := range egress {
		for _, r := range n.np.Spec.Egress {
			if allowsInternet(r) {
				return "NetworkPolicy " + n.obj.Ref().String() + " allows egress to any address"
			}
		}
	}
	return ""
}

func hasEgressType(np *networkingv1.NetworkPolicy) bool {
	for _, t := range np.Spec.PolicyTypes {
		if t == networkingv1.PolicyTypeEgress {
			return true
		}
	}
	return len(np.Spec.PolicyTypes) == 0 && len(np.Spec.Egress) > 0
}

// allowsInternet reports whether an egress rule opens outside addresses on
// ports other than DNS.
func allowsInternet(r networkingv1.NetworkPolicyEgressRule) bool {
	if onlyDNS(r.Ports) {
		return false
	}
	if len(r.To) == 0 {
		return true
	}
	for _, p := range r.To {
		if p.IPBlock == nil {
			continue
		}
		if pf, err := netip.ParsePrefix(p.IPBlock.CIDR); err == nil && pf.Bits() < 8 {
			return true
		}
	}
	return false
}

func onlyDNS(ports []networkingv1.NetworkPolicyPort) bool {
	if len(ports) == 0 {
		return false
	}
	for _, p := range ports {
		if p.Port == nil || p.Port.IntValue() != 53 || (p.Protocol != nil && *p.Protocol == corev1.ProtocolSCTP) {
			return false
		}
	}
	return true
}

func nsOf(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
