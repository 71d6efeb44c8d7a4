package webhook

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/lint"
	"egret.io/egret/internal/stamp"
	"egret.io/egret/internal/trust"
)

// CA injection: names and annotations.
const (
	// TrustConfigMapName is the ConfigMap egret writes into every opted-in
	// namespace: the bundle (system roots + corporate CAs) as
	// trust.BundleFile and the JVM's PKCS#12 store as trust.TrustStoreFile.
	TrustConfigMapName = "egret-trust-bundle"
	// TrustVolumeName is the volume that mounts it.
	TrustVolumeName = "egret-trust"
	// TrustAnnotation on a pod or namespace: "false" keeps the CA out of
	// its pods (the pod wins).
	TrustAnnotation = "egret.io/inject-ca"
	// TrustDigestAnnotation on egret's ConfigMap: the bundle's digest
	// (trust.Digest), so an unchanged bundle is not rewritten.
	TrustDigestAnnotation = "egret.io/trust-digest"
)

// TrustConfig is the wire form of the CA injection (flags of `egret
// webhook`). The zero value injects no CA.
type TrustConfig struct {
	// ConfigMap or Secret ([NAMESPACE/]NAME; egret's namespace when none)
	// holds the corporate CAs as PEM: a cert-manager trust-manager Bundle
	// target is the usual one. At most one of the two.
	ConfigMap, Secret string
	// Key is the key holding the PEM; "" reads every key that holds PEM
	// certificates.
	Key string
	// MountPath is where the bundle is mounted in containers; ""
	// means trust.DefaultMountDir.
	MountPath string
	// SystemRoots is the file with the system roots egret adds the
	// corporate CAs to; "" means the first of trust.SystemBundles (the
	// egret image ships /etc/ssl/certs/ca-certificates.crt).
	SystemRoots string
	// InterceptConfigMap ([NAMESPACE/]NAME) holds the certificates of
	// egret's interception CA as the gateway publishes them (the CA in
	// force and, during a rotation, the other one: docs/interception.md);
	// they join the bundle. Never the CA's Secret: the webhook has no
	// business with its key.
	InterceptConfigMap string
}

// TrustPolicy is a compiled TrustConfig.
type TrustPolicy struct {
	Kind            string // "ConfigMap" or "Secret"
	Namespace, Name string
	Key             string
	MountPath       string
	SystemRoots     string
	// InterceptNamespace and InterceptName name the ConfigMap of the
	// interception CA's certificates; "" when none.
	InterceptNamespace, InterceptName string
}

// Source names the source objects: "ConfigMap egret-system/corp-ca".
func (t *TrustPolicy) Source() string {
	var s []string
	if t.Kind != "" {
		s = append(s, t.Kind+" "+t.Namespace+"/"+t.Name)
	}
	if t.InterceptName != "" {
		s = append(s, "ConfigMap "+t.InterceptNamespace+"/"+t.InterceptName+" (the interception CA)")
	}
	return strings.Join(s, " and ")
}

// compile validates c; nil when no source is configured.
func (c TrustConfig) compile(ownNamespace string) (*TrustPolicy, error) {
	if c.ConfigMap == "" && c.Secret == "" && c.InterceptConfigMap == "" {
		if c.Key != "" || c.MountPath != "" || c.SystemRoots != "" {
			return nil, errors.New("--ca-key, --ca-mount-path and --ca-system-roots need --ca-configmap, --ca-secret or --intercept-ca-configmap")
		}
		return nil, nil
	}
	if c.ConfigMap != "" && c.Secret != "" {
		return nil, errors.New("give --ca-configmap or --ca-secret, not both")
	}
	t := &TrustPolicy{Key: c.Key, MountPath: c.MountPath, SystemRoots: c.SystemRoots}
	var errs []error
	objectRef := func(ref, flag string) (string, string) {
		ns, name, ok := strings.Cut(ref, "/")
		if !ok {
			ns, name = ownNamespace, ref
		}
		for _, m := range validation.IsDNS1123Subdomain(name) {
			errs = append(errs, fmt.Errorf("%s %q: name %s", flag, ref, m))
		}
		if ns == "" {
			errs = append(errs, fmt.Errorf("%s %q: no namespace", flag, ref))
		}
		for _, m := range validation.IsDNS1123Label(ns) {
			errs = append(errs, fmt.Errorf("%s %q: namespace %s", flag, ref, m))
		}
		return ns, name
	}
	switch {
	case c.ConfigMap != "":
		t.Kind = "ConfigMap"
		t.Namespace, t.Name = objectRef(c.ConfigMap, "--ca-configmap")
	case c.Secret != "":
		t.Kind = "Secret"
		t.Namespace, t.Name = objectRef(c.Secret, "--ca-secret")
	case c.Key != "":
		errs = append(errs, errors.New("--ca-key needs --ca-configmap or --ca-secret"))
	}
	if c.InterceptConfigMap != "" {
		t.InterceptNamespace, t.InterceptName = objectRef(c.InterceptConfigMap, "--intercept-ca-configmap")
	}
	if t.Key != "" {
		for _, m := range validation.IsConfigMapKey(t.Key) {
			errs = append(errs, fmt.Errorf("--ca-key %q: %s", t.Key, m))
		}
	}
	if t.MountPath == "" {
		t.MountPath = trust.DefaultMountDir
	}
	if !path.IsAbs(t.MountPath) || path.Clean(t.MountPath) != t.MountPath || t.MountPath == "/" {
		errs = append(errs, fmt.Errorf("--ca-mount-path %q: want a clean absolute directory, not /", t.MountPath))
	}
	return t, errors.Join(errs...)
}

// TrustState is what the trust controller last published: nil until the
// first bundle is built.
type TrustState struct {
	Digest string   // trust.Digest of the bundle
	Added  []string // the corporate CAs' names (not among the system roots)
	Total  int      // certificates in the bundle
}

// trustOptOut reports whether the pod or its namespace keeps the CA out.
func trustOptOut(pod *corev1.Pod, ns *corev1.Namespace) (bool, string) {
	if v, ok := pod.Annotations[TrustAnnotation]; ok {
		return v == "false", "pod annotation " + TrustAnnotation + "=" + v
	}
	if ns != nil && ns.Annotations[TrustAnnotation] == "false" {
		return true, "namespace annotation " + TrustAnnotation + "=false"
	}
	return false, ""
}

// injectTrust mounts egret's trust ConfigMap into every container and init
// container and sets the variables and Java properties each runtime reads
// (trust.InjectedEnv, trust.JavaProperties); egret's sidecar also gets the
// bundle's digest to check at start. Values the user set are kept and
// reported through w. It returns what it mounted, for the pod's stamp.
//
// It mounts only a ConfigMap egret wrote: labelled as egret's and holding
// exactly the bundle egret built (TrustBundle.Matches). Anything else of
// that name — made by whoever may create ConfigMaps in the namespace — is
// never mounted: the pod is refused under validation enforce, admitted
// without the CA and warned otherwise. It does nothing without a trust
// policy or for a pod opted out, and warns instead of injecting when the
// namespace is not labelled for injection (egret writes no bundle there).
// It refuses the pod when no bundle is built yet, or the namespace's
// ConfigMap is missing or holds another of egret's bundles: a pod is never
// admitted silently without the CA it should have.
func injectTrust(out *MutateResult, in Input, w *warner) *stamp.Trust {
	tp := in.Policy.Trust
	if tp == nil {
		return nil
	}
	if off, _ := trustOptOut(out.Pod, in.Namespace); off {
		return nil
	}
	if in.Namespace == nil || in.Namespace.Labels[discovery.InjectLabel] != discovery.InjectEnabled {
		out.Warnings = append(out.Warnings, fmt.Sprintf("egret: no CA injected: egret keeps %s only in namespaces labelled %s=%s; label the namespace, or trust the corporate CA otherwise",
			TrustConfigMapName, discovery.InjectLabel, discovery.InjectEnabled))
		return nil
	}
	// The window before the bundle reaches the namespace (an install, a
	// new namespace, a change of the CAs): the pod is refused, never
	// admitted without the CA it should trust. Its controller creates it
	// again (a ReplicaSet retries with back-off); the webhook writes a
	// missing bundle itself before it gets here (Handlers.CreateTrustBundle).
	retry := fmt.Sprintf("create the pod again in a moment (a Deployment's or Job's controller retries by itself), or opt it out with annotation %s: \"false\"", TrustAnnotation)
	if in.Trust == nil {
		out.Denied = fmt.Sprintf("egret: pod refused: it should trust the corporate CA, but the trust bundle from %s is not built yet (see the webhook's log); %s", tp.Source(), retry)
		return nil
	}
	ns, b, digest := in.Namespace.Name, in.TrustBundle, in.Trust.Digest
	switch {
	case b.Matches(digest):
	case b == nil:
		out.Denied = fmt.Sprintf("egret: pod refused: it should trust the corporate CA, but ConfigMap %s/%s is not written yet and the webhook could not write it (see its log); %s", ns, TrustConfigMapName, retry)
		return nil
	case b.updating():
		out.Denied = fmt.Sprintf("egret: pod refused: it should trust the corporate CA, but ConfigMap %s/%s holds bundle %s and egret's current one is %s (the writer is catching up); %s",
			ns, TrustConfigMapName, shortDigest(b.PEMDigest), shortDigest(digest), retry)
		return nil
	default:
		msg := fmt.Sprintf("ConfigMap %s/%s is not the trust bundle egret wrote (%s), so egret does not mount it as this pod's trusted CAs. "+
			"Delete it (egret then writes its own) or find who made it; or opt the pod out with annotation %s: \"false\"",
			ns, TrustConfigMapName, b.why(digest), TrustAnnotation)
		if level, _ := enforcement(in); level == Enforce {
			out.Denied = "egret: pod refused (validation enforce): " + msg
			return nil
		}
		out.Warnings = append(out.Warnings, "egret: no CA injected: "+msg)
		return nil
	}
	spec := &out.Pod.Spec
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == TrustVolumeName }) {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: TrustVolumeName, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: TrustConfigMapName},
				DefaultMode:          ptr.To[int32](0o444),
			}}})
	}
	var env []envWant
	for _, v := range trust.InjectedEnv(tp.MountPath) {
		env = append(env, envWant{v.Name, v.Value})
	}
	var props []javaProp
	for _, p := range trust.JavaProperties(tp.MountPath) {
		props = append(props, javaProp{p.Key, p.Value})
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			c := &cs[i]
			if !injectTrustContainer(c, tp.MountPath, env, props, w) || c.Name != SidecarName {
				continue
			}
			// egret's sidecar refuses to start on any other bundle.
			setEnv(c, "EGRET_TRUST_DIR", tp.MountPath)
			setEnv(c, "EGRET_TRUST_DIGEST", digest)
		}
	}
	return &stamp.Trust{ConfigMap: TrustConfigMapName, Owner: egretOwner, UID: b.UID, Digest: digest}
}

// egretOwner is the owner a stamp names for a bundle egret wrote (the
// value of its managed-by label).
const egretOwner = "egret"

// why says how b differs from egret's bundle of digest.
func (b *TrustBundle) why(digest string) string {
	switch {
	case !b.Ours:
		return "it is not labelled " + discovery.ManagedByLabel + "=egret: egret did not create it"
	case b.Problem != "":
		return "its content cannot be read: " + b.Problem
	default:
		return fmt.Sprintf("it holds certificates of digest %s (store %s), not egret's %s", shortDigest(b.PEMDigest), shortDigest(b.StoreDigest), shortDigest(digest))
	}
}

func shortDigest(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	if d == "" {
		return "(none)"
	}
	return d
}

// setEnv sets a variable egret owns in its own container.
func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i] = corev1.EnvVar{Name: name, Value: value}
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}

// injectTrustContainer mounts the bundle into c and sets its variables;
// false when c already mounts something else where the bundle goes.
func injectTrustContainer(c *corev1.Container, dir string, env []envWant, props []javaProp, w *warner) bool {
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == TrustVolumeName {
			mounted = true
			break
		}
		if path.Clean(m.MountPath) == dir {
			w.add("trust-mount", c.Name, fmt.Sprintf("%s already mounts %s here; egret's CA bundle is not mounted and its CA variables are not set", m.Name, dir))
			return false
		}
	}
	if !mounted {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: TrustVolumeName, MountPath: dir, ReadOnly: true})
	}
	for _, e := range env {
		i := slices.IndexFunc(c.Env, func(v corev1.EnvVar) bool { return v.Name == e.name })
		if i < 0 {
			c.Env = append(c.Env, corev1.EnvVar{Name: e.name, Value: e.value})
			continue
		}
		have := c.Env[i]
		if have.Value == e.value {
			continue
		}
		if have.ValueFrom != nil {
			w.add("kept:"+e.name, c.Name, fmt.Sprintf("kept your %s (from a ConfigMap or Secret; egret would set %s)", e.name, e.value))
			continue
		}
		w.add("kept:"+e.name, c.Name, fmt.Sprintf("kept your %s=%s (egret would set %s)", e.name, shortValue(have.Value), e.value))
	}
	// The three trust store properties go together: a store of the user's
	// is kept with its own type and password.
	if have := containerJavaProps(c)[props[0].key]; have != "" && have != props[0].value {
		w.add("kept:"+props[0].key, c.Name, fmt.Sprintf("kept your -D%s=%s (egret would set %s with its PKCS#12 store)", props[0].key, shortValue(have), props[0].value))
		return true
	}
	injectJava(c, props, w)
	return true
}

// containerJavaProps returns the -D properties the container's JVM sees
// from its literal option variables, command and arguments.
func containerJavaProps(c *corev1.Container) map[string]string {
	env := trust.Env{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return trust.JavaProps(env, append(append([]string{}, c.Command...), c.Args...)...)
}

// trustCluster tells lint's rules which proxies intercept TLS: with a CA
// source configured, the corporate proxy behind egret intercepts, so pods
// that use the gateway or the sidecar need the CA (rule tls-ca-missing).
func trustCluster(c lint.Cluster, p *Policy) lint.Cluster {
	if p.Trust == nil {
		return c
	}
	c.InterceptingProxies = append(c.InterceptingProxies, "127.0.0.1:"+strconv.Itoa(SidecarProxyPort))
	if p.Gateway != nil {
		c.InterceptingProxies = append(c.InterceptingProxies, p.Gateway.Host)
	}
	return c
}
