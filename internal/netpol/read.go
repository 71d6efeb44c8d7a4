package netpol

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options name the Services the peers are read from.
type Options struct {
	// DNSService is the cluster DNS Service, "namespace/name"; "" means
	// kube-system/kube-dns.
	DNSService string
	// GatewayService is the egress gateway's Service, "namespace/name";
	// "" means <egret's namespace>/egret-gateway.
	GatewayService string
	// GatewayPortName is the gateway Service port clients use; "" means
	// "proxy" (every port when no port has that name).
	GatewayPortName string
	// NodeLocalDNS is how NodeLocal DNSCache's addresses are found: ""
	// or "auto" reads the DaemonSet kube-system/node-local-dns (its
	// -localip argument; 169.254.20.10 when it has none), "off" allows
	// none, else a comma-separated list of addresses. Its pods run in the
	// host's network: pods reach them at these addresses on the DNS ports.
	NodeLocalDNS string
}

// NodeLocalDNSDaemonSet is where NodeLocal DNSCache runs
// (kubernetes/kubernetes cluster/addons/dns/nodelocaldns), and
// DefaultNodeLocalDNS the link-local address its manifests use.
var (
	NodeLocalDNSDaemonSet = types.NamespacedName{Namespace: "kube-system", Name: "node-local-dns"}
	DefaultNodeLocalDNS   = netip.MustParseAddr("169.254.20.10")
)

func split(s, defNS, defName string) types.NamespacedName {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return types.NamespacedName{Namespace: ns, Name: name}
	}
	if s != "" {
		return types.NamespacedName{Namespace: defNS, Name: s}
	}
	return types.NamespacedName{Namespace: defNS, Name: defName}
}

// Validate checks the options.
func (o Options) Validate() error {
	for _, s := range []string{o.DNSService, o.GatewayService} {
		if s != "" && (strings.Count(s, "/") > 1 || strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/")) {
			return fmt.Errorf("service %q: want namespace/name", s)
		}
	}
	if _, err := o.nodeLocalList(); err != nil {
		return err
	}
	return nil
}

// nodeLocalList returns the addresses NodeLocalDNS lists; nil for "",
// "auto" and "off".
func (o Options) nodeLocalList() ([]netip.Addr, error) {
	switch o.NodeLocalDNS {
	case "", "auto", "off":
		return nil, nil
	}
	var out []netip.Addr
	for _, s := range strings.Split(o.NodeLocalDNS, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("node-local DNS %q: want auto, off or IP addresses (e.g. 169.254.20.10)", o.NodeLocalDNS)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// nodeLocalDNS returns NodeLocal DNSCache's addresses as o asks for them
// (see Options.NodeLocalDNS) and a warning when the DaemonSet could not
// be read.
func nodeLocalDNS(ctx context.Context, r client.Reader, o Options) ([]netip.Addr, string, error) {
	if o.NodeLocalDNS == "off" {
		return nil, "", nil
	}
	if o.NodeLocalDNS != "" && o.NodeLocalDNS != "auto" {
		ips, err := o.nodeLocalList()
		return ips, "", err
	}
	var ds appsv1.DaemonSet
	if err := r.Get(ctx, NodeLocalDNSDaemonSet, &ds); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", nil
		}
		if apierrors.IsForbidden(err) {
			return nil, fmt.Sprintf("cannot read DaemonSet %s (%v): NodeLocal DNSCache not looked for; name its addresses with --node-local-dns", NodeLocalDNSDaemonSet, err), nil
		}
		return nil, "", fmt.Errorf("get daemonset %s: %w", NodeLocalDNSDaemonSet, err)
	}
	var out []netip.Addr
	for _, c := range ds.Spec.Template.Spec.Containers {
		args := append(slices.Clone(c.Command), c.Args...)
		for i, a := range args {
			var v string
			switch {
			case strings.HasPrefix(a, "-localip=") || strings.HasPrefix(a, "--localip="):
				_, v, _ = strings.Cut(a, "=")
			case (a == "-localip" || a == "--localip") && i+1 < len(args):
				v = args[i+1]
			default:
				continue
			}
			for _, s := range strings.Split(v, ",") {
				if ip, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil && !slices.Contains(out, ip.Unmap()) {
					out = append(out, ip.Unmap())
				}
			}
		}
	}
	if len(out) == 0 {
		out = []netip.Addr{DefaultNodeLocalDNS}
	}
	return out, "", nil
}

// ReadPeers reads the DNS pods and the gateway's pods from their Services
// (the selector, and the target ports: NetworkPolicy judges the pod's
// port, after the Service's translation). egretNS is egret's namespace. A
// Service that is missing or has no selector gives the defaults
// (DefaultDNS; DefaultGatewayLabels on DefaultGatewayPort) and a warning.
func ReadPeers(ctx context.Context, r client.Reader, egretNS string, o Options) (dns, gw Peer, warnings []string, err error) {
	dnsName := split(o.DNSService, "kube-system", "kube-dns")
	gwName := split(o.GatewayService, egretNS, "egret-gateway")
	portName := o.GatewayPortName
	if portName == "" {
		portName = "proxy"
	}
	read := func(n types.NamespacedName) (*corev1.Service, error) {
		var s corev1.Service
		if err := r.Get(ctx, n, &s); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("get service %s: %w", n, err)
		}
		if len(s.Spec.Selector) == 0 {
			return nil, nil
		}
		return &s, nil
	}
	s, err := read(dnsName)
	if err != nil {
		return dns, gw, nil, err
	}
	if s == nil {
		dns = DefaultDNS
		dns.Namespace = dnsName.Namespace
		warnings = append(warnings, fmt.Sprintf("DNS Service %s not found or without a selector: allowing pods labelled %s on UDP/TCP 53", dnsName, labelString(dns.Labels)))
	} else {
		dns = Peer{Namespace: s.Namespace, Labels: maps.Clone(s.Spec.Selector), Ports: targetPorts(s, "")}
	}
	ips, warn, err := nodeLocalDNS(ctx, r, o)
	if err != nil {
		return dns, gw, nil, err
	}
	if warn != "" {
		warnings = append(warnings, warn)
	}
	if len(ips) > 0 {
		// NodeLocal DNSCache answers on port 53 (its -localip addresses),
		// whatever the kube-dns pods' target ports are.
		dns.IPs = ips
		for _, pt := range []Port{{Protocol: corev1.ProtocolUDP, Port: intstr.FromInt32(53)}, {Protocol: corev1.ProtocolTCP, Port: intstr.FromInt32(53)}} {
			if !slices.ContainsFunc(dns.Ports, func(p Port) bool { return p.Protocol == pt.Protocol && p.Port == pt.Port }) {
				dns.Ports = append(dns.Ports, pt)
			}
		}
	}
	s, err = read(gwName)
	if err != nil {
		return dns, gw, nil, err
	}
	if s == nil {
		gw = Peer{Namespace: gwName.Namespace, Labels: maps.Clone(DefaultGatewayLabels),
			Ports: []Port{{Protocol: corev1.ProtocolTCP, Port: intstr.FromInt32(DefaultGatewayPort)}}}
		warnings = append(warnings, fmt.Sprintf("gateway Service %s not found or without a selector: allowing pods labelled %s on TCP %d", gwName, labelString(gw.Labels), DefaultGatewayPort))
	} else {
		gw = Peer{Namespace: s.Namespace, Labels: maps.Clone(s.Spec.Selector), Ports: targetPorts(s, portName)}
	}
	return dns, gw, warnings, nil
}

// targetPorts returns the Service's target ports (only the port named
// name, when one has it).
func targetPorts(s *corev1.Service, name string) []Port {
	var out []Port
	for _, p := range s.Spec.Ports {
		if name != "" && p.Name != name {
			continue
		}
		out = append(out, target(p))
	}
	if len(out) == 0 {
		for _, p := range s.Spec.Ports {
			out = append(out, target(p))
		}
	}
	return out
}

func target(p corev1.ServicePort) Port {
	proto := p.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	t := p.TargetPort
	if (t.Type == intstr.Int && t.IntVal == 0) || (t.Type == intstr.String && t.StrVal == "") {
		t = intstr.FromInt32(p.Port)
	}
	return Port{Protocol: proto, Port: t}
}

func labelString(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}
