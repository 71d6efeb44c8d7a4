package netpol

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Source is the pod whose egress is judged.
type Source struct {
	Namespace string
	Labels    map[string]string
}

// Dest is a destination: an address, and when it is a pod, the pod's
// namespace, the namespace's labels, the pod's labels and the name of the
// container port (for named ports).
type Dest struct {
	IP netip.Addr
	// Pod is true for a pod's address; Namespace, NamespaceLabels and
	// Labels then describe it.
	Pod             bool
	Namespace       string
	NamespaceLabels map[string]string
	Labels          map[string]string
	Protocol        corev1.Protocol // "" means TCP
	Port            int32
	PortName        string
}

// Evaluate reports whether src may open a connection to d under the
// NetworkPolicies pols, with the semantics of networking.k8s.io/v1: a pod
// no egress policy selects is not isolated (allowed); otherwise the union
// of the selecting policies' egress rules decides. A rule with no peers
// matches every destination, with no ports every port; ipBlock matches by
// address (except carves out), a pod/namespace selector only pods; a port
// matches by number (up to endPort) or by the destination's port name.
// Only egress is judged (the destination's ingress policies are not).
func Evaluate(pols []networkingv1.NetworkPolicy, src Source, d Dest) bool {
	isolated := false
	for i := range pols {
		p := &pols[i]
		if p.Namespace != src.Namespace || !hasEgress(p) || !matches(&p.Spec.PodSelector, src.Labels) {
			continue
		}
		isolated = true
		for _, r := range p.Spec.Egress {
			if portsMatch(r.Ports, d) && peersMatch(r.To, p.Namespace, d) {
				return true
			}
		}
	}
	return !isolated
}

func hasEgress(p *networkingv1.NetworkPolicy) bool {
	for _, t := range p.Spec.PolicyTypes {
		if t == networkingv1.PolicyTypeEgress {
			return true
		}
	}
	// policyTypes unset: Egress when there are egress rules.
	return len(p.Spec.PolicyTypes) == 0 && len(p.Spec.Egress) > 0
}

// matches reports whether a label selector selects set; an invalid
// selector selects nothing.
func matches(sel *metav1.LabelSelector, set map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return s.Matches(labels.Set(set))
}

func portsMatch(ports []networkingv1.NetworkPolicyPort, d Dest) bool {
	if len(ports) == 0 {
		return true
	}
	proto := d.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			if d.PortName != "" && p.Port.StrVal == d.PortName {
				return true
			}
		case p.EndPort != nil:
			if d.Port >= p.Port.IntVal && d.Port <= *p.EndPort {
				return true
			}
		case d.Port == p.Port.IntVal:
			return true
		}
	}
	return false
}

func peersMatch(peers []networkingv1.NetworkPolicyPeer, ns string, d Dest) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.IPBlock != nil {
			if blockMatches(p.IPBlock, d.IP) {
				return true
			}
			continue
		}
		if !d.Pod {
			continue
		}
		nsOK := false
		if p.NamespaceSelector != nil {
			nsOK = matches(p.NamespaceSelector, d.NamespaceLabels)
		} else {
			nsOK = d.Namespace == ns // a podSelector alone: the policy's namespace
		}
		if !nsOK {
			continue
		}
		if p.PodSelector == nil || matches(p.PodSelector, d.Labels) {
			return true
		}
	}
	return false
}

func blockMatches(b *networkingv1.IPBlock, ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	ip = ip.Unmap()
	c, err := netip.ParsePrefix(b.CIDR)
	if err != nil || !c.Contains(ip) {
		return false
	}
	for _, e := range b.Except {
		if x, err := netip.ParsePrefix(e); err == nil && x.Contains(ip) {
			return false
		}
	}
	return true
}
