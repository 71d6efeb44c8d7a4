package discovery

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/ipaddr"
)

// Read gathers Inputs from the cluster through r (an informer cache or a
// direct client). A missing ServiceCIDR API or kubernetes Service is not an
// error (Compute falls back or warns); an unreadable additions ConfigMap is.
func Read(ctx context.Context, r client.Reader, o Options) (Inputs, error) {
	in := Inputs{
		ServiceCIDRs:   map[string][]netip.Prefix{},
		NodePodCIDRs:   map[string][]netip.Prefix{},
		APIServerAddrs: map[string][]netip.Addr{},
		NodeAddrs:      map[string][]netip.Addr{},
	}

	var scs networkingv1.ServiceCIDRList
	if err := r.List(ctx, &scs); err != nil && !absent(err) {
		return in, fmt.Errorf("list servicecidrs: %w", err)
	}
	for _, sc := range scs.Items {
		for _, c := range sc.Spec.CIDRs {
			if p, err := ipaddr.ParsePrefix(c); err == nil {
				in.ServiceCIDRs[sc.Name] = append(in.ServiceCIDRs[sc.Name], p)
			}
		}
	}

	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return in, fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Items {
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			if p, err := ipaddr.ParsePrefix(c); err == nil {
				in.NodePodCIDRs[n.Name] = append(in.NodePodCIDRs[n.Name], p)
			}
		}
		in.NodeAddrs[n.Name] = internalIPs(&n)
	}

	var svc corev1.Service
	switch err := r.Get(ctx, types.NamespacedName{Namespace: "default", Name: "kubernetes"}, &svc); {
	case err == nil:
		ips := svc.Spec.ClusterIPs
		if len(ips) == 0 {
			ips = []string{svc.Spec.ClusterIP}
		}
		for _, s := range ips {
			if a, err := netip.ParseAddr(s); err == nil {
				in.KubernetesServiceIPs = append(in.KubernetesServiceIPs, a)
			}
		}
	case !absent(err):
		return in, fmt.Errorf("get service default/kubernetes: %w", err)
	}

	var slices discoveryv1.EndpointSliceList
	if err := r.List(ctx, &slices, client.InNamespace("default"),
		client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}); err != nil && !absent(err) {
		return in, fmt.Errorf("list endpointslices default/kubernetes: %w", err)
	}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					in.APIServerAddrs[s.Name] = append(in.APIServerAddrs[s.Name], ip)
				}
			}
		}
	}

	if o.Additions != "" {
		ns, name, _ := strings.Cut(o.Additions, "/")
		var cm corev1.ConfigMap
		switch err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cm); {
		case err == nil:
			adds, err := ParseAdditions(cm.Data[AdditionsKey], "configmap/"+o.Additions)
			if err != nil {
				return in, fmt.Errorf("read additions: %w", err)
			}
			in.Additions = adds
		case !apierrors.IsNotFound(err):
			return in, fmt.Errorf("get additions configmap %s: %w", o.Additions, err)
		}
	}
	return in, nil
}

// internalIPs returns a node's InternalIP addresses.
func internalIPs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := ipaddr.ParseAddr(a.Address); err == nil {
			out = append(out, ip)
		}
	}
	return out
}

// NamespaceAdditions parses a namespace's NoProxyAnnotation.
func NamespaceAdditions(ns *corev1.Namespace) ([]Addition, error) {
	if ns == nil {
		return nil, nil
	}
	v, ok := ns.Annotations[NoProxyAnnotation]
	if !ok {
		return nil, nil
	}
	return ParseAdditions(v, "namespace/"+ns.Name)
}

// Discover reads the cluster and computes its NO_PROXY in one call (what
// `egret noproxy discover` prints). kubelet, if set, is asked for the
// cluster domain (ReadClusterDomain) unless o sets it.
func Discover(ctx context.Context, r client.Reader, kubelet KubeletConfigz, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	in, err := Read(ctx, r, o)
	if err != nil {
		return nil, err
	}
	if o.ClusterDomain == "" {
		in.ClusterDomain, in.DomainWarnings = ReadClusterDomain(ctx, r, kubelet, sortedKeys(in.NodeAddrs))
	}
	return Compute(in, o), nil
}

// absent reports an error meaning "this object or API does not exist here".
func absent(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err) || errors.Is(err, &meta.NoKindMatchError{})
}
