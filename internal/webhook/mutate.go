package webhook

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/noproxy"
	"egret.io/egret/internal/stamp"
)

// Input is what Mutate and Validate know besides the pod.
type Input struct {
	// Policy is the webhook's policy; required.
	Policy *Policy
	// Namespace is the pod's namespace object (labels opt it in,
	// annotations add NO_PROXY entries and pick the mode); nil: none.
	Namespace *corev1.Namespace
	// Cluster is the discovered cluster NO_PROXY; nil before discovery ran
	// (Mutate then refuses to guess and injects nothing).
	Cluster *discovery.Result
	// Trust is the CA bundle egret last published; nil before it is built
	// (Mutate then injects no CA, with a warning).
	Trust *TrustState
	// UpstreamVersion is the version of the policy's upstream Secret in the
	// pod's namespace (UpstreamVersions.Get), recorded in the stamp of a
	// pod whose sidecar reads it.
	UpstreamVersion string
	// TrustBundle is the TrustConfigMapName ConfigMap in the pod's
	// namespace as it is now; nil when there is none. Mutate mounts it
	// only when it is egret's and holds exactly Trust's bundle.
	TrustBundle *TrustBundle
}

// MutateResult is the outcome of Mutate.
type MutateResult struct {
	// Pod is the mutated pod: a copy, never the input. Equal to the input
	// when nothing changed.
	Pod *corev1.Pod
	// Mode is the mode injected; 0 when the pod was not injected.
	Mode Mode
	// Skipped says why nothing was injected ("" when injected).
	Skipped string
	// Warnings are admission warnings: kept user values, fallbacks.
	Warnings []string
	// Denied, when set, is why the pod must be refused.
	Denied string
}

// OptedIn reports whether a pod in ns gets injected, and why (or why not).
// The pod annotation wins over the namespace label; egret's own namespace,
// kube-system and other excluded namespaces are never injected.
func OptedIn(pod *corev1.Pod, ns *corev1.Namespace, p *Policy) (bool, string) {
	name := podNamespace(pod, ns)
	if p.Excluded[name] {
		return false, fmt.Sprintf("namespace %s is excluded", name)
	}
	// The label is what the webhook configurations select on (a pod outside
	// an opted-in namespace calls the webhook only with the label); the
	// annotation is read too, for pods that reach the webhook anyway.
	for _, src := range []struct {
		what string
		m    map[string]string
	}{{"label", pod.Labels}, {"annotation", pod.Annotations}} {
		switch v := src.m[InjectAnnotation]; v {
		case "true":
			return true, "pod " + src.what + " " + InjectAnnotation + "=true"
		case "false":
			return false, "pod " + src.what + " " + InjectAnnotation + "=false"
		}
	}
	if ns != nil && ns.Labels[discovery.InjectLabel] == discovery.InjectEnabled {
		return true, "namespace label " + discovery.InjectLabel + "=" + discovery.InjectEnabled
	}
	return false, "not opted in (label the namespace " + discovery.InjectLabel + "=" + discovery.InjectEnabled + " or the pod " + InjectAnnotation + `: "true")`
}

func podNamespace(pod *corev1.Pod, ns *corev1.Namespace) string {
	if ns != nil {
		return ns.Name
	}
	return pod.Namespace
}

const podSecurityEnforceLabel = "pod-security.kubernetes.io/enforce"

// podSecurityLevel is the namespace's enforced Pod Security level ("" when
// none is set: the cluster default, privileged unless configured).
func podSecurityLevel(ns *corev1.Namespace) string {
	if ns == nil {
		return ""
	}
	return strings.ToLower(strings.TrimSpace(ns.Labels[podSecurityEnforceLabel]))
}

// modeFor picks the pod's mode: pod annotation, then namespace annotation,
// then the policy.
func modeFor(pod *corev1.Pod, ns *corev1.Namespace, p *Policy) (Mode, error) {
	if v, ok := pod.Annotations[ModeAnnotation]; ok {
		return ParseMode(v)
	}
	if ns != nil {
		if v, ok := ns.Annotations[ModeAnnotation]; ok {
			return ParseMode(v)
		}
	}
	return p.Mode, nil
}

// Mutate returns pod with egret's proxy settings injected. It never changes
// its input, never overwrites a value the user set (a differing value is a
// warning), and is idempotent: Mutate(Mutate(p).Pod) changes nothing.
func Mutate(pod *corev1.Pod, in Input) MutateResult {
	out := MutateResult{Pod: pod.DeepCopy()}
	ok, why := OptedIn(pod, in.Namespace, in.Policy)
	if !ok {
		out.Skipped = why
		return out
	}
	if in.Cluster == nil {
		out.Skipped = "cluster NO_PROXY not discovered yet"
		out.Warnings = append(out.Warnings, "egret: pod not injected: the cluster NO_PROXY is not discovered yet")
		return out
	}
	mode, err := modeFor(pod, in.Namespace, in.Policy)
	if err != nil {
		out.Denied = fmt.Sprintf("egret: annotation %s: %v", ModeAnnotation, err)
		return out
	}
	p := in.Policy
	if mode != Gateway && p.Image == "" {
		out.Denied = fmt.Sprintf("egret: %s mode asked for, but the webhook has no --image for the sidecar", mode)
		return out
	}
	if mode == Transparent && p.IptablesImage == "" {
		_, why := iptablesVariant(p.Image)
		out.Denied = fmt.Sprintf("egret: transparent mode asked for, but the webhook has no image for the iptables init container: %v", why)
		return out
	}
	if mode != Gateway && !p.NativeSidecars {
		if p.FallbackRefuse || p.Gateway == nil {
			out.Denied = fmt.Sprintf("egret: %s mode needs native sidecars (Kubernetes 1.29 or later); this API server has none. Use %s: gateway or upgrade the cluster", mode, ModeAnnotation)
			return out
		}
		out.Warnings = append(out.Warnings, fmt.Sprintf("egret: %s mode needs native sidecars (Kubernetes 1.29 or later); using the gateway %s instead", mode, p.Gateway.Host))
		mode = Gateway
	}
	if mode == Gateway && p.Gateway == nil {
		out.Denied = "egret: gateway mode asked for, but the webhook has no --gateway-url"
		return out
	}
	if mode == Transparent {
		if level := podSecurityLevel(in.Namespace); level == "baseline" || level == "restricted" {
			out.Denied = fmt.Sprintf("egret: transparent mode needs the %s init container with NET_ADMIN and NET_RAW as root, which namespace %s's Pod Security level %q (label %s) forbids. "+
				"Use %s: gateway or sidecar, with a NetworkPolicy that lets the pods reach only the gateway (label the namespace egret.io/egress-policy=enabled), or set the namespace's level to privileged",
				IptablesName, podNamespace(pod, in.Namespace), level, podSecurityEnforceLabel, ModeAnnotation)
			return out
		}
	}
	sc, meshNote, denied := sidecarFor(pod, in, mode)
	if denied != "" {
		out.Denied = denied
		return out
	}
	if mode == Transparent {
		if names := runsAs(pod, sc.uid); len(names) > 0 {
			out.Warnings = append(out.Warnings, fmt.Sprintf("egret: container %s runs as UID %d, egret's sidecar's: egret's rules let its traffic through unproxied. Run it as another UID, or set %s",
				strings.Join(names, ", "), sc.uid, SidecarUIDAnnotation))
		}
	}
	out.Mode = mode

	nsAdds, err := discovery.NamespaceAdditions(in.Namespace)
	if err != nil {
		out.Warnings = append(out.Warnings, fmt.Sprintf("egret: namespace annotation %s: %v (ignored)", discovery.NoProxyAnnotation, err))
	}
	noProxy := in.Cluster.With(nsAdds)
	proxyURL, host, port := p.proxyFor(mode)
	w := &warner{}
	want := desiredEnv(proxyURL, host, port, noProxy)
	spec := &out.Pod.Spec
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if c.Name != SidecarName && c.Name != IptablesName {
			injectEnv(c, want, w)
		}
	}
	for i := range spec.Containers {
		injectEnv(&spec.Containers[i], want, w)
	}
	if mode != Gateway {
		if sc.mesh != nil {
			dropStaleSidecars(spec, p)
		}
		had := slices.ContainsFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == SidecarName })
		addSidecars(spec, mode, p, noProxy, sc)
		if !had {
			if why := customizeSidecar(out.Pod, p); why != "" {
				return MutateResult{Pod: pod.DeepCopy(), Denied: why}
			}
		}
	}
	if out.Pod.Annotations[InjectedAnnotation] != mode.String() {
		if out.Pod.Annotations == nil {
			out.Pod.Annotations = map[string]string{}
		}
		out.Pod.Annotations[InjectedAnnotation] = mode.String()
	}
	if out.Pod.Labels[stamp.Label] != mode.String() {
		if out.Pod.Labels == nil {
			out.Pod.Labels = map[string]string{}
		}
		out.Pod.Labels[stamp.Label] = mode.String()
	}
	st := stamp.Stamp{Mode: mode.String(), NoProxy: stamp.Hash(noProxy.Value()), Proxy: proxyURL}
	if mode != Gateway {
		st.Image, st.ProxyUID, st.Mesh = p.Image, stamp.UID(sc.uid), meshNote
		if p.UpstreamSecret != "" {
			st.Upstream = &stamp.Upstream{Secret: p.UpstreamSecret, Version: in.UpstreamVersion}
		}
	}
	if mode == Transparent {
		st.IptablesImage = p.IptablesImage
	}
	st.Trust = injectTrust(&out, in, w)
	if out.Denied != "" {
		out.Pod, out.Mode = pod.DeepCopy(), 0
		return out
	}
	out.Pod.Annotations[stamp.Annotation] = st.Encode()
	out.Warnings = append(out.Warnings, w.list()...)
	return out
}

// sidecarFor decides the UID and transparent port of egret's sidecar in
// pod, beside a service mesh if there is one. It returns the stamp's mesh
// note ("istio/exclude"), and why the pod must be refused, if it must.
// Warnings for the pod go to out.
func sidecarFor(pod *corev1.Pod, in Input, mode Mode) (sidecarSpec, string, string) {
	sc := sidecarSpec{transparentPort: SidecarTransparentPort}
	if mode == Gateway {
		return sc, "", ""
	}
	uid, err := sidecarUID(pod, in.Policy)
	if err != nil {
		return sc, "", fmt.Sprintf("egret: annotation %s: %v", SidecarUIDAnnotation, err)
	}
	sc.uid = uid
	m := DetectMesh(pod, in.Namespace)
	if m == nil {
		return sc, "", ""
	}
	if mode == Sidecar {
		// egret's variables beside the mesh: no rules of egret's. The mesh
		// captures egret's own connections unless egret runs as its proxy.
		if uid == m.ProxyUID {
			return sc, "", fmt.Sprintf("egret: the sidecar's UID %d is %s's proxy UID (%s): the mesh would let egret's traffic bypass it. Set %s or --sidecar-uid to another UID",
				uid, m.Name, m.Why, SidecarUIDAnnotation)
		}
		return sc, m.Name + "/beside", ""
	}
	action, err := meshAction(pod, in.Namespace, in.Policy)
	if err != nil {
		return sc, "", fmt.Sprintf("egret: annotation %s: %v", MeshAnnotation, err)
	}
	alt := fmt.Sprintf("Use %s: sidecar (egret's variables beside the mesh; docs/mesh.md)", ModeAnnotation)
	switch {
	case m.Ambient:
		return sc, "", fmt.Sprintf("egret: transparent mode refused: the pod is in Istio's ambient mesh (%s), whose ztunnel redirects the pod's traffic itself; two redirections in one network namespace capture each other. %s",
			m.Why, alt)
	case action == MeshRefuse:
		return sc, "", fmt.Sprintf("egret: transparent mode refused: the pod has %s sidecar (%s), and two transparent proxies in one pod capture each other's traffic. %s, "+
			"or %s: exclude to let %s's proxy (UID %d, ports %s) through egret's rules (--mesh sets the default)",
			m.article(), m.Why, alt, MeshAnnotation, m.Name, m.ProxyUID, m.Ports)
	case uid == m.ProxyUID:
		return sc, "", fmt.Sprintf("egret: transparent mode refused: the sidecar's UID %d is %s's proxy UID (%s); set %s or --sidecar-uid to another UID",
			uid, m.Name, m.Why, SidecarUIDAnnotation)
	}
	sc.mesh, sc.transparentPort = m, MeshTransparentPort
	return sc, m.Name + "/" + action.String(), ""
}

// dropStaleSidecars removes egret's own containers (its images) that were
// added before a mesh was seen — the mesh's webhook ran after egret's and
// egret is invoked again — so they are added again with the mesh's
// exclusions. Containers of those names that are not egret's are kept.
func dropStaleSidecars(spec *corev1.PodSpec, p *Policy) {
	i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == IptablesName })
	if i < 0 || spec.InitContainers[i].Image != p.IptablesImage || slices.Contains(spec.InitContainers[i].Args, "--exclude-uids") {
		return
	}
	spec.InitContainers = slices.DeleteFunc(spec.InitContainers, func(c corev1.Container) bool {
		return (c.Name == IptablesName && c.Image == p.IptablesImage) || (c.Name == SidecarName && c.Image == p.Image)
	})
}

// envWant is one variable egret sets.
type envWant struct {
	name  string
	value string
}

// javaProp is one -D property egret adds to JAVA_TOOL_OPTIONS.
type javaProp struct{ key, value string }

type desired struct {
	env     []envWant
	java    []javaProp
	noProxy []string
}

func desiredEnv(proxyURL, host string, port int, noProxy *discovery.Result) desired {
	np := noProxy.Value()
	d := desired{noProxy: noProxy.Values()}
	d.env = []envWant{
		{"HTTP_PROXY", proxyURL}, {"http_proxy", proxyURL},
		{"HTTPS_PROXY", proxyURL}, {"https_proxy", proxyURL},
		{"NO_PROXY", np}, {"no_proxy", np},
		{"NODE_USE_ENV_PROXY", "1"},
	}
	ps := strconv.Itoa(port)
	// noproxy splits CIDRs off an octet boundary into exact octet wildcards.
	nonProxyHosts, _ := noproxy.JavaNonProxyHosts(strings.Join(noProxy.Values(), ","))
	d.java = []javaProp{
		{"http.proxyHost", host}, {"http.proxyPort", ps},
		{"https.proxyHost", host}, {"https.proxyPort", ps},
		{"http.nonProxyHosts", nonProxyHosts},
	}
	return d
}

// warner collects conflicts per variable across containers, so a pod with
// ten containers gets one warning per variable, not ten.
type warner struct {
	order []string
	by    map[string][]string
	text  map[string]string
}

func (w *warner) add(key, container, text string) {
	if w.by == nil {
		w.by, w.text = map[string][]string{}, map[string]string{}
	}
	if _, ok := w.by[key]; !ok {
		w.order = append(w.order, key)
		w.text[key] = text
	}
	w.by[key] = append(w.by[key], container)
}

func (w *warner) list() []string {
	out := make([]string, 0, len(w.order))
	for _, k := range w.order {
		out = append(out, fmt.Sprintf("egret: container %s: %s", strings.Join(w.by[k], ", "), w.text[k]))
	}
	return out
}

func injectEnv(c *corev1.Container, d desired, w *warner) {
	idx := func(name string) int {
		return slices.IndexFunc(c.Env, func(v corev1.EnvVar) bool { return v.Name == name })
	}
	for _, e := range d.env {
		i := idx(e.name)
		if i < 0 {
			// The user set only the other case of this variable: give this
			// case the user's value too, or the two cases would disagree
			// (one client through egret, another the user's way).
			if o := idx(otherCase(e.name)); o >= 0 && otherCase(e.name) != e.name {
				have := c.Env[o]
				c.Env = append(c.Env, corev1.EnvVar{Name: e.name, Value: have.Value, ValueFrom: have.ValueFrom.DeepCopy()})
				continue
			}
			c.Env = append(c.Env, corev1.EnvVar{Name: e.name, Value: e.value})
			continue
		}
		have := c.Env[i]
		if have.ValueFrom != nil || have.Value == e.value {
			continue // from a Secret or ConfigMap, or already ours: keep
		}
		if up := strings.ToUpper(e.name); up != e.name {
			if j := idx(up); j >= 0 && c.Env[j].ValueFrom == nil && c.Env[j].Value == have.Value {
				continue // both cases agree: one warning, for the upper case
			}
		}
		if strings.EqualFold(e.name, "NO_PROXY") {
			if missing := missingEntries(have.Value, d.noProxy); len(missing) > 0 {
				w.add("kept:"+e.name, c.Name, fmt.Sprintf("kept your %s; it lacks %s", e.name, shortList(missing, 8)))
			}
			continue
		}
		w.add("kept:"+e.name, c.Name, fmt.Sprintf("kept your %s=%s (egret would set %s)", e.name, redact(have.Value), redact(e.value)))
	}
	injectJava(c, d.java, w)
}

// otherCase returns the other-case name of a proxy variable (HTTP_PROXY ↔
// http_proxy); a variable with one case only (NODE_USE_ENV_PROXY) is its own.
func otherCase(name string) string {
	switch name {
	case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY":
		return strings.ToLower(name)
	case "http_proxy", "https_proxy", "no_proxy":
		return strings.ToUpper(name)
	}
	return name
}

// injectJava appends egret's -D properties to JAVA_TOOL_OPTIONS, keeping
// every property the user set.
func injectJava(c *corev1.Container, props []javaProp, w *warner) {
	const name = "JAVA_TOOL_OPTIONS"
	i := slices.IndexFunc(c.Env, func(v corev1.EnvVar) bool { return v.Name == name })
	if i >= 0 && c.Env[i].ValueFrom != nil {
		w.add("java-from", c.Name, name+" comes from a ConfigMap or Secret; egret cannot append the JVM proxy properties")
		return
	}
	have := ""
	if i >= 0 {
		have = c.Env[i].Value
	}
	set := map[string]string{}
	for _, f := range strings.Fields(have) {
		if k, v, ok := strings.Cut(strings.TrimPrefix(f, "-D"), "="); ok && strings.HasPrefix(f, "-D") {
			set[k] = v
		}
	}
	var add []string
	for _, p := range props {
		v, ok := set[p.key]
		switch {
		case !ok:
			add = append(add, "-D"+p.key+"="+p.value)
		case v != p.value:
			w.add("java:"+p.key, c.Name, fmt.Sprintf("kept your -D%s in %s (egret would set %s)", p.key, name, shortValue(p.value)))
		}
	}
	if len(add) == 0 {
		return
	}
	v := strings.Join(add, " ")
	if have != "" {
		v = have + " " + v
	}
	if i < 0 {
		c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: v})
	} else {
		c.Env[i].Value = v
	}
}

// missingEntries returns the entries of want not literally in have.
func missingEntries(have string, want []string) []string {
	got := map[string]bool{}
	for _, e := range strings.Split(have, ",") {
		got[strings.ToLower(strings.TrimSpace(e))] = true
	}
	var out []string
	for _, e := range want {
		if !got[strings.ToLower(e)] {
			out = append(out, e)
		}
	}
	return out
}

func shortList(es []string, n int) string {
	if len(es) <= n {
		return strings.Join(es, ",")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(es[:n], ","), len(es)-n)
}

func shortValue(v string) string {
	if len(v) > 60 {
		return v[:57] + "..."
	}
	return v
}

// redact hides the password of a proxy URL (warnings end up in kubectl
// output and audit logs).
func redact(v string) string {
	u, err := url.Parse(v)
	if err != nil || u.User == nil {
		if strings.Contains(v, "@") {
			return "(a value with credentials)"
		}
		return shortValue(v)
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return shortValue(u.String())
}

// excludeCIDRs are the ranges transparent mode keeps away from the proxy:
// the cluster's ranges and addresses, without loopback (always excluded).
func excludeCIDRs(r *discovery.Result) []string {
	var out []string
	for _, p := range r.Prefixes() {
		if p.Addr().IsLoopback() {
			continue
		}
		out = append(out, p.String())
	}
	return out
}
