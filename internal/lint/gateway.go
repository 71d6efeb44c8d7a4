package lint

import (
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// GatewayLabel marks a workload as an egress gateway: `egret.io/role: gateway`.
// `app.kubernetes.io/component: egress-gateway` is accepted too.
const GatewayLabel = "egret.io/role"

// gateways returns the Deployments and StatefulSets that are egress
// gateways: running `egret proxy --role gateway`, labelled as a gateway, or
// running a proxy behind a Service on port 3128.
func (c *check) gateways() []*workload {
	var out []*workload
	for _, w := range c.workloads {
		if w.ref.Kind != "Deployment" && w.ref.Kind != "StatefulSet" {
			continue
		}
		if c.isGateway(w) {
			out = append(out, w)
		}
	}
	return out
}

func (c *check) isGateway(w *workload) bool {
	for _, m := range []map[string]string{w.meta.Labels, w.template.Labels} {
		if m[GatewayLabel] == "gateway" || m["app.kubernetes.io/component"] == "egress-gateway" {
			return true
		}
	}
	hasProxy := false
	for _, ct := range w.pod.containers {
		if isGatewayCommand(ct.c) {
			return true
		}
		if ct.proxy != notProxy && !ct.isInit() {
			hasProxy = true
		}
	}
	if !hasProxy {
		return false
	}
	for _, s := range c.servicesOf(w) {
		for _, p := range s.svc.Spec.Ports {
			if p.Port == ProxyPort || p.TargetPort.IntValue() == ProxyPort {
				return true
			}
		}
	}
	return false
}

// servicesOf returns the Services that select w's pods.
func (c *check) servicesOf(w *workload) []*service {
	var out []*service
	for _, s := range c.services {
		if sameNS(s.obj.Namespace, w.ref.Namespace) && len(s.svc.Spec.Selector) > 0 &&
			labels.SelectorFromSet(s.svc.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
			out = append(out, s)
		}
	}
	return out
}

// selects reports whether a label selector in namespace ns selects w's pods.
// A nil selector selects nothing; an empty one selects everything.
func selects(sel *metav1.LabelSelector, ns string, w *workload) bool {
	if sel == nil || !sameNS(ns, w.ref.Namespace) {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return s.Matches(labels.Set(w.template.Labels))
}

func sameNS(a, b string) bool {
	if a == "" {
		a = "default"
	}
	if b == "" {
		b = "default"
	}
	return a == b
}

// serviceHosts returns the names and addresses through which a pod in
// namespace from reaches Service s.
func serviceHosts(s *service, from, domain string) []string {
	ns := s.obj.Namespace
	if ns == "" {
		ns = "default"
	}
	n := strings.ToLower(s.obj.Name)
	hosts := []string{n + "." + ns, n + "." + ns + ".svc", n + "." + ns + ".svc." + domain}
	if sameNS(from, ns) {
		hosts = append(hosts, n)
	}
	for _, ip := range append([]string{s.svc.Spec.ClusterIP}, s.svc.Spec.ClusterIPs...) {
		if a, err := netip.ParseAddr(ip); err == nil {
			hosts = append(hosts, a.String())
		}
	}
	return hosts
}

// podProxyHosts returns the hosts of the proxies w's application containers
// are told to use.
func podProxyHosts(w *workload) map[string]bool {
	out := map[string]bool{}
	for _, ct := range w.pod.clients() {
		for _, v := range setProxyVars(ct.env) {
			if v.known {
				if h := strings.TrimSuffix(parseProxyURL(v.value).host, "."); h != "" {
					out[h] = true
				}
			}
		}
	}
	return out
}

// hasAntiAffinity reports whether spec spreads its pods over nodes or zones.
func hasAntiAffinity(spec *corev1.PodSpec) bool {
	if a := spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		pa := a.PodAntiAffinity
		if len(pa.RequiredDuringSchedulingIgnoredDuringExecution) > 0 || len(pa.PreferredDuringSchedulingIgnoredDuringExecution) > 0 {
			return true
		}
	}
	return len(spec.TopologySpreadConstraints) > 0
}
