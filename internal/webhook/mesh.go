package webhook

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Mesh is a service mesh whose proxy shares a pod with egret's sidecar.
type Mesh struct {
	// Name is "istio" or "linkerd".
	Name string
	// ProxyUID is the UID the mesh's proxy runs as (its own iptables let it
	// through): istio-proxy 1337, linkerd-proxy 2102.
	ProxyUID int64
	// Ports are the mesh proxy's ports (its listeners, health and admin):
	// excluded from egret's redirect.
	Ports string
	// Ambient is Istio's ambient mode: ztunnel redirects inside the pod's
	// network namespace without a per-pod proxy UID to exclude.
	Ambient bool
	// Why says what gave it away.
	Why string
}

// The meshes egret knows, and what identifies their proxies.
var (
	istio   = Mesh{Name: "istio", ProxyUID: 1337, Ports: "15000-15090"}
	linkerd = Mesh{Name: "linkerd", ProxyUID: 2102, Ports: "4140,4143,4190,4191"}
)

// article names the mesh with its article, for messages.
func (m *Mesh) article() string {
	if m.Name == "istio" {
		return "an Istio"
	}
	return "a Linkerd"
}

// MeshAnnotation on a pod or its namespace: what transparent mode does
// beside a service mesh's sidecar — "refuse" or "exclude" (the pod wins,
// then the namespace, then --mesh).
const MeshAnnotation = "egret.io/mesh"

// MeshAction is what transparent mode does beside a mesh.
type MeshAction int

// The actions.
const (
	// MeshRefuse refuses transparent mode in a pod with a mesh sidecar.
	MeshRefuse MeshAction = iota + 1
	// MeshExclude writes egret's rules so that the mesh proxy's UID and
	// ports go direct, and moves egret's transparent listener off the
	// mesh's port.
	MeshExclude
)

// String returns refuse or exclude.
func (a MeshAction) String() string {
	switch a {
	case MeshRefuse:
		return "refuse"
	case MeshExclude:
		return "exclude"
	default:
		return fmt.Sprintf("unknown(%d)", int(a))
	}
}

// ParseMeshAction reads refuse or exclude.
func ParseMeshAction(s string) (MeshAction, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "refuse":
		return MeshRefuse, nil
	case "exclude":
		return MeshExclude, nil
	}
	return 0, fmt.Errorf("mesh %q: want refuse or exclude", s)
}

// MeshTransparentPort is egret's transparent listener in a pod that also
// runs a mesh proxy: Istio's Envoy listens on 15001, egret's default.
const MeshTransparentPort = 15401

// DetectMesh reports the service mesh whose proxy is, or will be, in pod:
// its containers (istio-proxy, istio-init, linkerd-proxy, linkerd-init),
// else the injection labels and annotations on the pod or its namespace
// that make the mesh's own webhook add them (it may run after egret's).
// A pod that opts out of the mesh has none. nil: no mesh.
func DetectMesh(pod *corev1.Pod, ns *corev1.Namespace) *Mesh {
	found := func(m Mesh, why string) *Mesh { m.Why = why; return &m }
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			switch c.Name {
			case "istio-proxy", "istio-init", "istio-validation":
				return found(istio, "container "+c.Name)
			case "linkerd-proxy", "linkerd-init", "linkerd-network-validator":
				return found(linkerd, "container "+c.Name)
			}
		}
	}
	var nsLabels, nsAnn map[string]string
	if ns != nil {
		nsLabels, nsAnn = ns.Labels, ns.Annotations
	}
	// Istio: the pod's label (or the older annotation) decides, then the
	// namespace's istio-injection or revision label.
	podIstio, podSet := pod.Labels["sidecar.istio.io/inject"]
	if !podSet {
		podIstio, podSet = pod.Annotations["sidecar.istio.io/inject"]
	}
	switch {
	case pod.Labels["istio.io/dataplane-mode"] == "ambient" ||
		(nsLabels["istio.io/dataplane-mode"] == "ambient" && pod.Labels["istio.io/dataplane-mode"] != "none"):
		m := found(istio, "label istio.io/dataplane-mode=ambient")
		m.Ambient = true
		return m
	case podSet && podIstio == "true":
		return found(istio, "pod sidecar.istio.io/inject=true")
	case podSet && podIstio == "false":
	case nsLabels["istio-injection"] == "enabled":
		return found(istio, "namespace label istio-injection=enabled")
	case nsLabels["istio.io/rev"] != "" && nsLabels["istio-injection"] != "disabled":
		return found(istio, "namespace label istio.io/rev="+nsLabels["istio.io/rev"])
	}
	// Linkerd: annotation linkerd.io/inject on the pod, then the namespace.
	li, ok := pod.Annotations["linkerd.io/inject"]
	if !ok {
		li = nsAnn["linkerd.io/inject"]
		if li == "enabled" || li == "ingress" {
			return found(linkerd, "namespace annotation linkerd.io/inject="+li)
		}
		return nil
	}
	if li == "enabled" || li == "ingress" {
		return found(linkerd, "pod annotation linkerd.io/inject="+li)
	}
	return nil
}

// meshAction is the pod's MeshAnnotation, then the namespace's, then the
// policy's.
func meshAction(pod *corev1.Pod, ns *corev1.Namespace, p *Policy) (MeshAction, error) {
	if v, ok := pod.Annotations[MeshAnnotation]; ok {
		return ParseMeshAction(v)
	}
	if ns != nil {
		if v, ok := ns.Annotations[MeshAnnotation]; ok {
			return ParseMeshAction(v)
		}
	}
	return p.Mesh, nil
}

// SidecarUIDAnnotation on a pod sets the UID of egret's sidecar (the UID
// egret's iptables rules let through) instead of --sidecar-uid.
const SidecarUIDAnnotation = "egret.io/sidecar-uid"

// DefaultSidecarUID is the UID of egret's sidecar: not istio-proxy's 1337
// nor linkerd-proxy's 2102, so neither mesh's rules mistake egret's traffic
// for their proxy's, nor egret's theirs.
const DefaultSidecarUID = 15337

// sidecarUID is the pod's SidecarUIDAnnotation, else the policy's.
func sidecarUID(pod *corev1.Pod, p *Policy) (int64, error) {
	v, ok := pod.Annotations[SidecarUIDAnnotation]
	if !ok {
		return p.SidecarUID, nil
	}
	return parseUID(v)
}

func parseUID(v string) (int64, error) {
	u, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || u < 1 || u > 2147483647 {
		return 0, fmt.Errorf("UID %q: want 1-2147483647 (not root)", v)
	}
	return u, nil
}

// runsAs returns the containers of pod (other than egret's) that run as
// uid, explicitly or through the pod's securityContext.
func runsAs(pod *corev1.Pod, uid int64) []string {
	podUID := int64(-1)
	if sc := pod.Spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
		podUID = *sc.RunAsUser
	}
	var out []string
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == SidecarName || c.Name == IptablesName {
				continue
			}
			u := podUID
			if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
				u = *c.SecurityContext.RunAsUser
			}
			if u == uid && !slices.Contains(out, c.Name) {
				out = append(out, c.Name)
			}
		}
	}
	return out
}
