package netpol

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"egret.io/egret/internal/discovery"
)

// The opt-in label, the generated policy's name and its labels.
const (
	// Label on a namespace opts it in when set to Enabled.
	Label   = "egret.io/egress-policy"
	Enabled = "enabled"
	// Name is the NetworkPolicy egret writes into opted-in namespaces.
	Name = "egret-egress-only-via-gateway"
	// SourcesAnnotation on the policy lists where each range came from.
	SourcesAnnotation = "egret.io/ranges"
	// NamespaceNameLabel is the label the API server sets on every
	// namespace (Kubernetes 1.22+).
	NamespaceNameLabel = "kubernetes.io/metadata.name"
)

// Peer is a set of pods (by namespace and labels) and the ports allowed to
// them.
type Peer struct {
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels"`
	Ports     []Port            `json:"ports"`
	// IPs are addresses allowed on the same ports besides the pods: the
	// DNS peer's NodeLocal DNSCache addresses (its pods run in the host's
	// network, so no pod selector reaches them).
	IPs []netip.Addr `json:"ips,omitempty"`
}

// Port is one protocol and port, a number or a container port's name.
type Port struct {
	Protocol corev1.Protocol    `json:"protocol"`
	Port     intstr.IntOrString `json:"port"`
	// Name is the container port's name when Port is its number (a
	// policy may allow either); only Probes reads it.
	Name string `json:"name,omitempty"`
}

// Range is a cluster range allowed on every port, with its sources.
type Range struct {
	Prefix  netip.Prefix   `json:"cidr"`
	Kind    discovery.Kind `json:"kind"`
	Sources []string       `json:"sources,omitempty"`
}

// Inputs are what the policy allows.
type Inputs struct {
	DNS     Peer
	Gateway Peer
	Ranges  []Range
	// PodAddrGuesses, when no pod range is known (a manifest judged
	// offline), are addresses a pod might have: a pod destination counts
	// as allowed when one of them is (a policy may allow pods by ipBlock).
	PodAddrGuesses []netip.Addr
}

// Defaults of the peers when their Services cannot be read.
var (
	DefaultDNS = Peer{Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"},
		Ports: []Port{{Protocol: corev1.ProtocolUDP, Port: intstr.FromInt32(53)}, {Protocol: corev1.ProtocolTCP, Port: intstr.FromInt32(53)}}}
	DefaultGatewayLabels = map[string]string{"app.kubernetes.io/name": "egret-gateway"}
	DefaultGatewayPort   = int32(3128)
)

// rangeKinds are the discovery kinds that are the cluster's own
// addresses; loopback (never subject to policy), cluster names, metadata
// and user additions are not.
var rangeKinds = []discovery.Kind{discovery.KindServiceCIDR, discovery.KindServiceIP, discovery.KindAPIServer,
	discovery.KindPodCIDR, discovery.KindNodeIP}

// Ranges returns the cluster's own ranges from a discovery result: the
// Service and Pod ranges, the kubernetes Service and API server addresses
// and the node addresses, each address as a /32 or /128, the ones inside
// another range left out (their sources join it), sorted.
func Ranges(r *discovery.Result) []Range {
	if r == nil {
		return nil
	}
	var all []Range
	for _, e := range r.Entries {
		if !slices.Contains(rangeKinds, e.Kind) || strings.HasPrefix(e.Value, "[") {
			continue
		}
		var p netip.Prefix
		if pp, err := netip.ParsePrefix(e.Value); err == nil {
			p = pp.Masked()
		} else if a, err := netip.ParseAddr(e.Value); err == nil {
			a = a.Unmap()
			p = netip.PrefixFrom(a, a.BitLen())
		} else {
			continue
		}
		all = append(all, Range{Prefix: p, Kind: e.Kind, Sources: slices.Clone(e.Sources)})
	}
	// Widest first, so a range inside an earlier one is folded into it.
	slices.SortStableFunc(all, func(a, b Range) int { return a.Prefix.Bits() - b.Prefix.Bits() })
	var out []Range
	for _, rg := range all {
		i := slices.IndexFunc(out, func(o Range) bool {
			return o.Prefix.Addr().Is4() == rg.Prefix.Addr().Is4() && o.Prefix.Contains(rg.Prefix.Addr())
		})
		if i < 0 {
			out = append(out, rg)
		}
	}
	slices.SortFunc(out, func(a, b Range) int {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		return a.Prefix.Bits() - b.Prefix.Bits()
	})
	return out
}

// Render returns the NetworkPolicy for namespace ns: every pod of ns may
// reach the DNS pods (and NodeLocal DNSCache's addresses, Peer.IPs) on
// their ports, the gateway's pods on its ports, and
// the cluster — every pod (namespaceSelector {}, for CNIs whose pod
// addresses no Node lists) and the cluster's ranges — on any port. Nothing
// else: an outside address is denied, whatever the port.
func Render(ns string, in Inputs) *networkingv1.NetworkPolicy {
	peer := func(p Peer) networkingv1.NetworkPolicyEgressRule {
		r := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{NamespaceNameLabel: p.Namespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: maps.Clone(p.Labels)},
		}}}
		for _, a := range p.IPs {
			r.To = append(r.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(a, a.BitLen()).String()}})
		}
		for _, pt := range p.Ports {
			r.Ports = append(r.Ports, networkingv1.NetworkPolicyPort{Protocol: ptrTo(pt.Protocol), Port: ptrTo(pt.Port)})
		}
		return r
	}
	cluster := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}}
	var sources []string
	for _, r := range in.Ranges {
		cluster.To = append(cluster.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: r.Prefix.String()}})
		sources = append(sources, r.Prefix.String()+"="+string(r.Kind))
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: ns,
			Labels:      map[string]string{discovery.ManagedByLabel: "egret", discovery.PartOfLabel: "egret"},
			Annotations: map[string]string{SourcesAnnotation: strings.Join(sources, ",")}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{peer(in.DNS), peer(in.Gateway), cluster},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }
