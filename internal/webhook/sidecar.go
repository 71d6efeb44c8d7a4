package webhook

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/utils/ptr"

	"egret.io/egret/internal/discovery"
)

// NativeSidecarsSupported reports whether an API server of version v runs
// native sidecars (init containers with restartPolicy: Always): beta and on
// by default from 1.29, GA in 1.33. Provider suffixes ("29+", "1.29-gke")
// are understood; an unreadable version is "no".
func NativeSidecarsSupported(v *version.Info) bool {
	if v == nil {
		return false
	}
	major, minor := leadingInt(v.Major), leadingInt(v.Minor)
	if major < 0 || minor < 0 {
		// Fall back to gitVersion "v1.29.3-gke.100".
		parts := strings.SplitN(strings.TrimPrefix(v.GitVersion, "v"), ".", 3)
		if len(parts) < 2 {
			return false
		}
		major, minor = leadingInt(parts[0]), leadingInt(parts[1])
	}
	return major > 1 || (major == 1 && minor >= 29)
}

func leadingInt(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return -1
	}
	n, err := strconv.Atoi(s[:i])
	if err != nil {
		return -1
	}
	return n
}

// sidecarSpec is what Mutate decided for egret's containers in one pod.
type sidecarSpec struct {
	uid             int64 // the sidecar's UID, let through by the rules
	transparentPort int   // the transparent listener's port
	mesh            *Mesh // a mesh whose proxy's UID and ports go direct; nil: none
}

// addSidecars puts egret's containers first in initContainers (so user init
// containers already have the proxy): the iptables init container
// (transparent mode), then the native sidecar. Existing ones are kept.
func addSidecars(spec *corev1.PodSpec, mode Mode, p *Policy, noProxy *discovery.Result, sc sidecarSpec) {
	var add []corev1.Container
	has := func(name string) bool {
		return slices.ContainsFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == name })
	}
	if mode == Transparent && !has(IptablesName) {
		add = append(add, iptablesContainer(p, excludeCIDRs(noProxy), sc))
	}
	if !has(SidecarName) {
		c := sidecarContainer(p, mode, noProxy, sc)
		if p.GatewayToken && p.UpstreamSecret == "" && p.Gateway != nil {
			addGatewayToken(spec, &c)
		}
		add = append(add, c)
	}
	if len(add) > 0 {
		spec.InitContainers = append(add, spec.InitContainers...)
	}
}

func sidecarContainer(p *Policy, mode Mode, noProxy *discovery.Result, sc sidecarSpec) corev1.Container {
	args := []string{"proxy", "--role", "sidecar",
		"--listen", "127.0.0.1:" + strconv.Itoa(SidecarProxyPort),
		// The kubelet probes the pod IP, so the admin listener (health,
		// readiness, metrics; no proxying) binds every address.
		"--admin-listen", ":" + strconv.Itoa(SidecarAdminPort)}
	if mode == Transparent {
		args = append(args, "--transparent-listen", "127.0.0.1:"+strconv.Itoa(sc.transparentPort))
	}
	probe := func(period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/readyz", Port: intstr.FromString("egret-admin")}},
			PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 1,
		}
	}
	c := corev1.Container{
		Name:          SidecarName,
		Image:         p.Image,
		Args:          args,
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports:         []corev1.ContainerPort{{Name: "egret-admin", ContainerPort: SidecarAdminPort, Protocol: corev1.ProtocolTCP}},
		// The application starts once the proxy is ready: the kubelet waits
		// for a native sidecar's startup probe before the next container.
		StartupProbe:   probe(1, 30),
		ReadinessProbe: probe(5, 3),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("20m"),
				corev1.ResourceMemory: resource.MustParse("32Mi"),
			},
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To(sc.uid),
			RunAsGroup:               ptr.To(sc.uid),
			RunAsNonRoot:             ptr.To(true),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	// The sidecar's own direct rules: the cluster goes direct, the rest to
	// its upstream (NO_PROXY is the proxy's direct list).
	np := noProxy.ProxyValue() // egret reads NO_PROXY with Go's rules: no "[::1]"
	c.Env = []corev1.EnvVar{{Name: "NO_PROXY", Value: np}, {Name: "no_proxy", Value: np}}
	switch {
	case p.UpstreamSecret != "":
		// Told otherwise: the Secret's UPSTREAM_PROXY (an env entry would
		// win over envFrom, so none is set).
		c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: p.UpstreamSecret}, Optional: ptr.To(true)}}}
	case p.Gateway != nil:
		// By default the sidecar reaches the world through the gateway,
		// which holds the upstream credentials and the egress policy.
		c.Env = append(c.Env, corev1.EnvVar{Name: "UPSTREAM_PROXY", Value: p.Gateway.String()})
	}
	return c
}

func iptablesContainer(p *Policy, exclude []string, sc sidecarSpec) corev1.Container {
	args := []string{"iptables", "apply",
		"--proxy-uid", strconv.FormatInt(sc.uid, 10),
		"--redirect-port", strconv.Itoa(sc.transparentPort)}
	if m := sc.mesh; m != nil {
		// The mesh proxy's own connections, and connections to its ports
		// (its listeners in this and other pods), are the mesh's.
		args = append(args, "--exclude-uids", strconv.FormatInt(m.ProxyUID, 10), "--exclude-ports", m.Ports)
	}
	if len(exclude) > 0 {
		args = append(args, "--exclude-cidrs", strings.Join(exclude, ","))
	}
	return corev1.Container{
		Name:  IptablesName,
		Image: p.IptablesImage,
		Args:  args,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("10m"),
				corev1.ResourceMemory: resource.MustParse("16Mi"),
			},
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		// iptables needs root and NET_ADMIN/NET_RAW in the pod's network
		// namespace, for the few milliseconds this container runs.
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To[int64](0),
			RunAsNonRoot:             ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{
				Add:  []corev1.Capability{"NET_ADMIN", "NET_RAW"},
				Drop: []corev1.Capability{"ALL"},
			},
		},
	}
}
