package netpol

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"egret.io/egret/internal/discovery"
)

// Probe is one destination and whether "egress only via the gateway"
// allows it.
type Probe struct {
	// Name says what the destination is ("DNS UDP/53", "outside 1.1.1.1 TCP/443").
	Name  string
	Dest  Dest
	Allow bool
}

// outside are destinations no egress-only-via-the-gateway policy may
// allow: public addresses on the ports clients use, public DNS (a pod that
// resolves outside the cluster bypasses it) and the cloud metadata
// service.
var outside = []struct {
	name  string
	ip    string
	proto corev1.Protocol
	port  int32
}{
	{"outside HTTPS", "1.1.1.1", corev1.ProtocolTCP, 443},
	{"outside HTTP", "93.184.215.14", corev1.ProtocolTCP, 80},
	{"outside on the proxy port", "93.184.215.14", corev1.ProtocolTCP, 3128},
	{"outside DNS", "8.8.8.8", corev1.ProtocolUDP, 53},
	{"outside DNS over TCP", "8.8.8.8", corev1.ProtocolTCP, 53},
	{"outside SSH", "192.0.2.10", corev1.ProtocolTCP, 22},
	{"cloud metadata", "169.254.169.254", corev1.ProtocolTCP, 80},
	{"outside HTTPS over IPv6", "2606:4700:4700::1111", corev1.ProtocolTCP, 443},
}

// Probes returns the destinations that decide whether a policy is "egress
// only via the gateway" for in: the DNS pods and the gateway's pods on
// each of their ports, an address in each cluster range, a pod of another
// namespace (all allowed); outside addresses, outside DNS and the metadata
// service (all denied; an outside address that lies in a cluster range is
// left out).
func Probes(in Inputs) []Probe {
	var out []Probe
	// A pod's address, for policies that allow pods by ipBlock: one in
	// the first pod range.
	var podIP netip.Addr
	for _, r := range in.Ranges {
		if r.Kind == discovery.KindPodCIDR && r.Prefix.Bits() < r.Prefix.Addr().BitLen()-1 {
			podIP = r.Prefix.Addr().Next().Next()
			break
		}
	}
	pod := func(name string, p Peer, port Port) Probe {
		d := Dest{Pod: true, IP: podIP, Namespace: p.Namespace, NamespaceLabels: map[string]string{NamespaceNameLabel: p.Namespace},
			Labels: p.Labels, Protocol: port.Protocol}
		if port.Port.Type == intstr.Int {
			d.Port, d.PortName = port.Port.IntVal, port.Name
		} else {
			d.PortName = port.Port.StrVal
		}
		return Probe{Name: fmt.Sprintf("%s %s/%s", name, port.Protocol, port.Port.String()), Dest: d, Allow: true}
	}
	for _, pt := range in.DNS.Ports {
		out = append(out, pod("DNS pods", in.DNS, pt))
		if pt.Port.Type != intstr.Int {
			continue
		}
		for _, a := range in.DNS.IPs {
			out = append(out, Probe{Name: fmt.Sprintf("NodeLocal DNSCache %s %s/%d", a, pt.Protocol, pt.Port.IntVal), Allow: true,
				Dest: Dest{IP: a, Protocol: pt.Protocol, Port: pt.Port.IntVal}})
		}
	}
	for _, pt := range in.Gateway.Ports {
		out = append(out, pod("gateway pods", in.Gateway, pt))
	}
	out = append(out, Probe{Name: "a pod of another namespace TCP/8080", Allow: true,
		Dest: Dest{Pod: true, Namespace: "egret-probe-other", NamespaceLabels: map[string]string{NamespaceNameLabel: "egret-probe-other"},
			IP: podIP, Labels: map[string]string{"app": "any"}, Protocol: corev1.ProtocolTCP, Port: 8080}})
	for _, r := range in.Ranges {
		a := r.Prefix.Addr()
		if r.Prefix.Bits() < a.BitLen() {
			a = a.Next()
		}
		out = append(out, Probe{Name: fmt.Sprintf("%s %s (%s) TCP/443", r.Kind, a, r.Prefix), Allow: true,
			Dest: Dest{IP: a, Protocol: corev1.ProtocolTCP, Port: 443}})
	}
	for _, o := range outside {
		a := netip.MustParseAddr(o.ip)
		if inRanges(in.Ranges, a) {
			continue
		}
		out = append(out, Probe{Name: fmt.Sprintf("%s %s %s/%d", o.name, a, o.proto, o.port),
			Dest: Dest{IP: a, Protocol: o.proto, Port: o.port}})
	}
	return out
}

func inRanges(rs []Range, a netip.Addr) bool {
	for _, r := range rs {
		if r.Prefix.Contains(a) {
			return true
		}
	}
	return false
}

// Judge evaluates pols for a pod src against Probes(in) and returns the
// probes the policies get wrong: a needed destination denied or an
// outside one allowed.
func Judge(pols []networkingv1.NetworkPolicy, src Source, in Inputs) []Probe {
	var wrong []Probe
	for _, p := range Probes(in) {
		got := Evaluate(pols, src, p.Dest)
		if !got && p.Dest.Pod && !p.Dest.IP.IsValid() {
			for _, a := range in.PodAddrGuesses {
				d := p.Dest
				d.IP = a
				if Evaluate(pols, src, d) {
					got = true
					break
				}
			}
		}
		if got != p.Allow {
			wrong = append(wrong, p)
		}
	}
	return wrong
}
