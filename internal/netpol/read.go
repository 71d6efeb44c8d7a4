package netpol

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

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
}

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
	return nil
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
