package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Domain is a cluster DNS domain and where it was read.
type Domain struct {
	Name string
	// Source names where it came from: "kubelet/<node>" (configz),
	// "configmap/kube-system/coredns" (the Corefile), "flag:--cluster-domain"
	// or "default".
	Source string
}

// CoreDNSConfigMap is where ReadClusterDomain looks for CoreDNS's Corefile
// (kubeadm, k3s, EKS, AKS and the CoreDNS Helm chart's default name).
const (
	CoreDNSNamespace = "kube-system"
	CoreDNSConfigMap = "coredns"
	corefileKey      = "Corefile"
)

// KubeletConfigz fetches a node's kubelet /configz through the API server
// (GET /api/v1/nodes/<node>/proxy/configz; RBAC nodes/proxy get).
type KubeletConfigz func(ctx context.Context, node string) ([]byte, error)

// KubeletConfigzFrom asks the API server's node proxy with cs.
func KubeletConfigzFrom(cs kubernetes.Interface) KubeletConfigz {
	return func(ctx context.Context, node string) ([]byte, error) {
		return cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "configz").DoRaw(ctx)
	}
}

// maxKubeletTries bounds the nodes asked for their kubelet configuration.
const maxKubeletTries = 3

// ReadClusterDomain reads the cluster's DNS domain, in this order:
//
//  1. the kubelet's configuration (clusterDomain in /configz) of the first
//     nodes by name that answer — what pods' resolv.conf search path is
//     built from — when kubelet is set and allowed (nodes/proxy, which
//     egret's webhook is not granted: it reads the next);
//  2. CoreDNS's Corefile (ConfigMap kube-system/coredns): the first zone of
//     its kubernetes plugin that is not a reverse zone;
//  3. none: Domain is zero and Compute uses DefaultClusterDomain, with a
//     warning.
//
// When both sources answer and disagree, the kubelet's wins, with a
// warning. r reads the ConfigMap (a direct client: egret's cache holds
// only its own ConfigMaps); nodes are the node names to ask.
func ReadClusterDomain(ctx context.Context, r client.Reader, kubelet KubeletConfigz, nodes []string) (Domain, []string) {
	var warns []string
	var fromKubelet Domain
	if kubelet != nil {
		nodes = slices.Sorted(slices.Values(nodes))
		for i, n := range nodes {
			if i == maxKubeletTries {
				break
			}
			b, err := kubelet(ctx, n)
			if err != nil {
				if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
					break // not allowed here: the Corefile answers
				}
				continue
			}
			if d, err := ParseKubeletConfigz(b); err == nil {
				fromKubelet = Domain{Name: d, Source: "kubelet/" + n}
				break
			} else {
				warns = append(warns, fmt.Sprintf("kubelet/%s configz: %v", n, err))
			}
		}
	}
	var fromCoreDNS Domain
	var cm corev1.ConfigMap
	switch err := r.Get(ctx, types.NamespacedName{Namespace: CoreDNSNamespace, Name: CoreDNSConfigMap}, &cm); {
	case err == nil:
		if d, err := ParseCorefile(cm.Data[corefileKey]); err == nil {
			fromCoreDNS = Domain{Name: d, Source: "configmap/" + CoreDNSNamespace + "/" + CoreDNSConfigMap}
		} else {
			warns = append(warns, fmt.Sprintf("configmap/%s/%s: %v", CoreDNSNamespace, CoreDNSConfigMap, err))
		}
	case !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err):
		warns = append(warns, fmt.Sprintf("configmap/%s/%s: %v", CoreDNSNamespace, CoreDNSConfigMap, err))
	}
	switch {
	case fromKubelet.Name != "":
		if fromCoreDNS.Name != "" && fromCoreDNS.Name != fromKubelet.Name {
			warns = append(warns, fmt.Sprintf("the kubelet's cluster domain %s (%s) is not CoreDNS's %s (%s): pods search %s, CoreDNS answers for %s",
				fromKubelet.Name, fromKubelet.Source, fromCoreDNS.Name, fromCoreDNS.Source, fromKubelet.Name, fromCoreDNS.Name))
		}
		return fromKubelet, warns
	case fromCoreDNS.Name != "":
		return fromCoreDNS, warns
	}
	return Domain{}, warns
}

// ParseKubeletConfigz reads clusterDomain from a kubelet's /configz answer.
func ParseKubeletConfigz(b []byte) (string, error) {
	var z struct {
		KubeletConfig *struct {
			ClusterDomain string `json:"clusterDomain"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(b, &z); err != nil {
		return "", fmt.Errorf("not a configz answer: %w", err)
	}
	if z.KubeletConfig == nil || z.KubeletConfig.ClusterDomain == "" {
		return "", errors.New("no kubeletconfig.clusterDomain")
	}
	d := strings.Trim(z.KubeletConfig.ClusterDomain, ".")
	if err := checkDomain(d); err != nil {
		return "", fmt.Errorf("clusterDomain %q: %w", d, err)
	}
	return d, nil
}

// ParseCorefile returns the cluster domain a Corefile serves: the first
// zone of the first kubernetes plugin that is not a reverse zone
// ("kubernetes cluster.local in-addr.arpa ip6.arpa {" → cluster.local).
func ParseCorefile(corefile string) (string, error) {
	for _, line := range strings.Split(corefile, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "kubernetes" {
			continue
		}
		for _, z := range f[1:] {
			if z == "{" {
				break
			}
			z = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(z, "dns://"), "."), ".")
			if i := strings.IndexByte(z, ':'); i >= 0 {
				z = z[:i] // a zone may carry a port
			}
			if z == "" || strings.HasSuffix(z, ".arpa") {
				continue
			}
			if err := checkDomain(z); err != nil {
				return "", fmt.Errorf("kubernetes plugin zone %q: %w", z, err)
			}
			return strings.ToLower(z), nil
		}
		return "", errors.New("the kubernetes plugin serves only reverse zones")
	}
	return "", errors.New("no kubernetes plugin in the Corefile")
}

func checkDomain(d string) error {
	if d == "" {
		return errors.New("empty")
	}
	if errs := validation.IsDNS1123Subdomain(strings.ToLower(d)); len(errs) > 0 {
		return errors.New("not a DNS name: " + errs[0])
	}
	return nil
}
