package webhook

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Per-pod overrides of the injected sidecar's resources, as Istio's
// sidecar.istio.io/proxyCPU and Linkerd's config.linkerd.io/proxy-cpu-request
// offer: a quantity each; a pod without them gets the webhook's defaults
// (--sidecar-cpu-request and friends).
const (
	ProxyCPURequestAnnotation    = "egret.io/proxy-cpu-request"
	ProxyMemoryRequestAnnotation = "egret.io/proxy-memory-request"
	ProxyCPULimitAnnotation      = "egret.io/proxy-cpu-limit"
	ProxyMemoryLimitAnnotation   = "egret.io/proxy-memory-limit"
)

// SidecarResources are the flags' defaults for the injected sidecar;
// "" keeps the built-in value (a limit: none).
type SidecarResources struct {
	CPURequest, MemoryRequest, CPULimit, MemoryLimit string
}

// resourceSetting is one quantity: where the webhook's flag and the pod's
// annotation put it.
type resourceSetting struct {
	flag, annotation string
	name             corev1.ResourceName
	limit            bool
}

var resourceSettings = []resourceSetting{
	{"--sidecar-cpu-request", ProxyCPURequestAnnotation, corev1.ResourceCPU, false},
	{"--sidecar-memory-request", ProxyMemoryRequestAnnotation, corev1.ResourceMemory, false},
	{"--sidecar-cpu-limit", ProxyCPULimitAnnotation, corev1.ResourceCPU, true},
	{"--sidecar-memory-limit", ProxyMemoryLimitAnnotation, corev1.ResourceMemory, true},
}

func (r SidecarResources) values() []string {
	return []string{r.CPURequest, r.MemoryRequest, r.CPULimit, r.MemoryLimit}
}

// compile checks the flags' quantities.
func (r SidecarResources) compile() (map[int]resource.Quantity, error) {
	out := map[int]resource.Quantity{}
	for i, v := range r.values() {
		if v == "" {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("%s %q: want a quantity like 100m or 128Mi", resourceSettings[i].flag, v)
		}
		out[i] = q
	}
	return out, nil
}

// customizeSidecar applies the resource defaults and the pod's overrides to
// the sidecar egret just added, and adds the webhook's image pull Secrets
// to the pod (egret's images may come from a private registry). It returns
// why the pod must be refused, or "".
func customizeSidecar(pod *corev1.Pod, p *Policy) string {
	i := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == SidecarName })
	if i >= 0 {
		c := &pod.Spec.InitContainers[i]
		for k, q := range p.SidecarResources {
			set(c, resourceSettings[k], q)
		}
		for _, s := range resourceSettings {
			v, ok := pod.Annotations[s.annotation]
			if !ok {
				continue
			}
			q, err := resource.ParseQuantity(v)
			if err != nil || q.Sign() < 0 {
				return fmt.Sprintf("egret: annotation %s: %q is not a quantity like 100m or 128Mi", s.annotation, v)
			}
			set(c, s, q)
		}
		for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[n]
			lim, hasLim := c.Resources.Limits[n]
			if hasReq && hasLim && req.Cmp(lim) > 0 {
				return fmt.Sprintf("egret: the %s sidecar's %s request %s is above its limit %s (annotations egret.io/proxy-%s-request and -limit)", SidecarName, n, req.String(), lim.String(), n)
			}
		}
	}
	for _, name := range p.ImagePullSecrets {
		if !slices.ContainsFunc(pod.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == name }) {
			pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
		}
	}
	return ""
}

func set(c *corev1.Container, s resourceSetting, q resource.Quantity) {
	l := &c.Resources.Requests
	if s.limit {
		l = &c.Resources.Limits
	}
	if *l == nil {
		*l = corev1.ResourceList{}
	}
	(*l)[s.name] = q
}
