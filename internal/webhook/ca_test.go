package webhook

import (
	"path"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/stamp"
	"egret.io/egret/internal/trust"
)

func trustPolicy(t testing.TB, mut func(*Config)) *Policy {
	t.Helper()
	return testPolicy(t, func(c *Config) {
		c.Trust = TrustConfig{ConfigMap: "corp-ca", Key: "trust-bundle.pem"}
		if mut != nil {
			mut(c)
		}
	})
}

var builtTrust = &TrustState{Digest: "d1", Added: []string{"Corp Root"}, Total: 140}

// egretsBundle is builtTrust's ConfigMap in the pod's namespace, as egret
// writes it.
var egretsBundle = &TrustBundle{UID: "uid-egret", Ours: true, Annotated: "d1", Contents: trust.Contents{PEMDigest: "d1", StoreDigest: "d1"}}

func TestTrustConfigCompile(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  TrustConfig
		want string // error substring; "" = valid
		src  string
	}{
		{"none", TrustConfig{}, "", ""},
		{"own-namespace", TrustConfig{ConfigMap: "corp-ca"}, "", "ConfigMap egret-system/corp-ca"},
		{"other-namespace-secret", TrustConfig{Secret: "cert-manager/corp-ca", Key: "ca.crt"}, "", "Secret cert-manager/corp-ca"},
		{"both", TrustConfig{ConfigMap: "a", Secret: "b"}, "not both", ""},
		{"bad-name", TrustConfig{ConfigMap: "Corp_CA"}, "name", ""},
		{"bad-key", TrustConfig{ConfigMap: "corp-ca", Key: "a/b"}, "--ca-key", ""},
		{"relative-mount", TrustConfig{ConfigMap: "corp-ca", MountPath: "etc/trust"}, "--ca-mount-path", ""},
		{"options-without-source", TrustConfig{Key: "ca.crt"}, "need --ca-configmap", ""},
		{"intercept-only", TrustConfig{InterceptConfigMap: "egret-intercept-ca"}, "", "ConfigMap egret-system/egret-intercept-ca (the interception CA)"},
		{"corporate-and-intercept", TrustConfig{ConfigMap: "corp-ca", InterceptConfigMap: "gw/egret-intercept-ca"}, "",
			"ConfigMap egret-system/corp-ca and ConfigMap gw/egret-intercept-ca (the interception CA)"},
		{"intercept-bad-name", TrustConfig{InterceptConfigMap: "gw/Bad_Name"}, "--intercept-ca-configmap", ""},
		{"key-without-corporate-source", TrustConfig{InterceptConfigMap: "icpt", Key: "ca.crt"}, "--ca-key needs", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.cfg.compile("egret-system")
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want %q", err, tc.want)
			case tc.src != "" && (p == nil || p.Source() != tc.src || p.MountPath != trust.DefaultMountDir):
				t.Fatalf("policy %+v", p)
			}
		})
	}
}

func TestMutateInjectsTrust(t *testing.T) {
	p := trustPolicy(t, nil)
	in := Input{Policy: p, Namespace: ns("shop", optedIn, nil), Cluster: testCluster(), Trust: builtTrust, TrustBundle: egretsBundle}
	res := Mutate(pod(nil), in)
	if res.Denied != "" || len(res.Warnings) != 0 {
		t.Fatalf("denied %q, warnings %q", res.Denied, res.Warnings)
	}
	spec := res.Pod.Spec
	if len(spec.Volumes) != 1 || spec.Volumes[0].ConfigMap == nil || spec.Volumes[0].ConfigMap.Name != TrustConfigMapName {
		t.Fatalf("volumes %+v", spec.Volumes)
	}
	bundle := path.Join(trust.DefaultMountDir, trust.BundleFile)
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		if len(c.VolumeMounts) != 1 || !c.VolumeMounts[0].ReadOnly || c.VolumeMounts[0].MountPath != trust.DefaultMountDir {
			t.Errorf("%s: mounts %+v", c.Name, c.VolumeMounts)
		}
		for _, v := range trust.InjectedEnv(trust.DefaultMountDir) {
			if got, _ := env(c, v.Name); got != bundle {
				t.Errorf("%s: %s = %q", c.Name, v.Name, got)
			}
		}
		jto, _ := env(c, "JAVA_TOOL_OPTIONS")
		for _, want := range []string{"-Dhttps.proxyHost=", "-Djavax.net.ssl.trustStore=" + path.Join(trust.DefaultMountDir, trust.TrustStoreFile),
			"-Djavax.net.ssl.trustStoreType=PKCS12", "-Djavax.net.ssl.trustStorePassword=changeit"} {
			if !strings.Contains(jto, want) {
				t.Errorf("%s: JAVA_TOOL_OPTIONS %q lacks %q", c.Name, jto, want)
			}
		}
		// The model agrees: every runtime in this container reads egret's files.
		e := trust.Env{}
		for _, v := range c.Env {
			e[v.Name] = v.Value
		}
		for _, r := range trust.Runtimes() {
			if ch := trust.Resolve(r, e); !strings.HasPrefix(ch.Path, trust.DefaultMountDir+"/") {
				t.Errorf("%s: %s reads %q", c.Name, r.Name, ch.Path)
			}
		}
	}
	t.Run("idempotent", func(t *testing.T) {
		again := Mutate(res.Pod, in)
		if !equality.Semantic.DeepEqual(again.Pod, res.Pod) || len(again.Warnings) != 0 {
			a, _ := yaml.Marshal(again.Pod)
			t.Errorf("second mutation changed the pod or warned %q:\n%s", again.Warnings, a)
		}
	})
	t.Run("passes-egret-validation", func(t *testing.T) {
		v := Validate(res.Pod, in)
		for _, f := range v.Findings {
			if strings.HasPrefix(f.Rule, "tls-") || strings.HasPrefix(f.Rule, "jvm-truststore") {
				t.Errorf("finding on an injected pod: %s", findingText(f))
			}
		}
		if v.Denied != "" {
			t.Errorf("denied: %s", v.Denied)
		}
		// The same pod without the CA is what the rule is for.
		opted := pod(map[string]string{TrustAnnotation: "false"})
		bare := Mutate(opted, in).Pod
		found := false
		for _, f := range Validate(bare, in).Findings {
			found = found || f.Rule == "tls-ca-missing" && strings.Contains(f.Message, "egret-gateway.egret-system.svc:3128 intercepts TLS")
		}
		if !found {
			t.Error("a pod that uses the intercepting gateway without a CA got no tls-ca-missing finding")
		}
	})
}

func TestMutateTrustKeepsUserValues(t *testing.T) {
	p := trustPolicy(t, nil)
	in := Input{Policy: p, Namespace: ns("shop", optedIn, nil), Cluster: testCluster(), Trust: builtTrust, TrustBundle: egretsBundle}
	mine := pod(nil,
		corev1.EnvVar{Name: "SSL_CERT_FILE", Value: "/opt/certs/corp.pem"},
		corev1.EnvVar{Name: "JAVA_TOOL_OPTIONS", Value: "-Djavax.net.ssl.trustStore=/opt/certs/app.jks -Djavax.net.ssl.trustStorePassword=secret"},
		corev1.EnvVar{Name: "AWS_CA_BUNDLE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "aws"}, Key: "ca"}}})
	res := Mutate(mine, in)
	app := res.Pod.Spec.Containers[0]
	if v, _ := env(app, "SSL_CERT_FILE"); v != "/opt/certs/corp.pem" {
		t.Errorf("SSL_CERT_FILE overwritten: %q", v)
	}
	jto, _ := env(app, "JAVA_TOOL_OPTIONS")
	if strings.Contains(jto, "PKCS12") || strings.Contains(jto, "changeit") || strings.Count(jto, "trustStore=") != 1 {
		t.Errorf("egret's store properties added beside the user's store: %q", jto)
	}
	all := strings.Join(res.Warnings, "\n")
	for _, want := range []string{"kept your SSL_CERT_FILE=/opt/certs/corp.pem", "kept your -Djavax.net.ssl.trustStore=/opt/certs/app.jks",
		"kept your AWS_CA_BUNDLE (from a ConfigMap or Secret"} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "secret") && !strings.Contains(all, "Secret") {
		t.Errorf("a password reached a warning:\n%s", all)
	}
	// The other containers get everything.
	if v, _ := env(res.Pod.Spec.Containers[1], "SSL_CERT_FILE"); v != path.Join(trust.DefaultMountDir, trust.BundleFile) {
		t.Errorf("worker SSL_CERT_FILE = %q", v)
	}
}

func TestMutateTrustSkips(t *testing.T) {
	p := trustPolicy(t, nil)
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		ns      *corev1.Namespace
		trust   *TrustState
		warning string // substring; "" = no warning
	}{
		{"pod-opts-out", pod(map[string]string{TrustAnnotation: "false"}), ns("shop", optedIn, nil), builtTrust, ""},
		{"namespace-opts-out", pod(nil), ns("shop", optedIn, map[string]string{TrustAnnotation: "false"}), builtTrust, ""},
		{"unlabelled-namespace", pod(map[string]string{InjectAnnotation: "true"}), ns("shop", nil, nil), builtTrust, "only in namespaces labelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Mutate(tc.pod, Input{Policy: p, Namespace: tc.ns, Cluster: testCluster(), Trust: tc.trust, TrustBundle: egretsBundle})
			if len(res.Pod.Spec.Volumes) != 0 {
				t.Errorf("CA injected: %+v", res.Pod.Spec.Volumes)
			}
			if _, ok := env(res.Pod.Spec.Containers[0], "SSL_CERT_FILE"); ok {
				t.Error("SSL_CERT_FILE set")
			}
			if res.Mode == 0 {
				t.Fatalf("proxy injection skipped: %s", res.Skipped)
			}
			all := strings.Join(res.Warnings, "\n")
			if (tc.warning == "") != (all == "") || !strings.Contains(all, tc.warning) {
				t.Errorf("warnings %q, want %q", all, tc.warning)
			}
		})
	}
	// A pod that should trust the CA is refused, never admitted without it,
	// while the bundle is not built yet.
	res := Mutate(pod(nil), Input{Policy: p, Namespace: ns("shop", optedIn, nil), Cluster: testCluster(), TrustBundle: egretsBundle})
	if !strings.Contains(res.Denied, "it should trust the corporate CA, but the trust bundle from ConfigMap egret-system/corp-ca is not built yet") ||
		!strings.Contains(res.Denied, "create the pod again in a moment") || res.Mode != 0 {
		t.Errorf("bundle not built: denied %q, mode %v", res.Denied, res.Mode)
	}
	// Without a trust policy nothing changes (the existing goldens hold).
	plain := Mutate(pod(nil), Input{Policy: testPolicy(t, nil), Namespace: ns("shop", optedIn, nil), Cluster: testCluster(), Trust: builtTrust, TrustBundle: egretsBundle})
	if len(plain.Pod.Spec.Volumes) != 0 {
		t.Error("CA injected without a trust policy")
	}
}

// TestMutateTrustOnlyEgretsBundle is issue 21's finding 9 at the pure
// level: a ConfigMap named egret-trust-bundle that egret did not write —
// made first by a tenant, labelled like egret's, edited after egret wrote
// it — is never mounted; validation enforce refuses the pod, warn admits
// it without the CA. Only egret's exact bundle is mounted, and the pod's
// stamp and its sidecar carry that bundle's owner, UID and digest.
func TestMutateTrustOnlyEgretsBundle(t *testing.T) {
	contents := func(pem, store string) trust.Contents { return trust.Contents{PEMDigest: pem, StoreDigest: store} }
	for _, tc := range []struct {
		name    string
		bundle  *TrustBundle
		level   string
		mounted bool
		denied  string
		warning string
	}{
		{"egrets", egretsBundle, "warn", true, "", ""},
		{"egrets-under-enforce", egretsBundle, "enforce", true, "", ""},
		{"tenant-made-first", &TrustBundle{UID: "t", Contents: contents("evil", "evil")}, "warn", false, "",
			"is not the trust bundle egret wrote (it is not labelled app.kubernetes.io/managed-by=egret: egret did not create it)"},
		{"tenant-made-first-enforce", &TrustBundle{UID: "t", Contents: contents("evil", "evil")}, "enforce", false,
			"pod refused (validation enforce): ConfigMap shop/egret-trust-bundle is not the trust bundle egret wrote", ""},
		{"tenant-copied-egrets-label", &TrustBundle{UID: "t", Ours: true, Annotated: "d1", Contents: contents("evil", "evil")}, "warn", false, "",
			"holds certificates of digest evil (store evil), not egret's d1"},
		{"tenant-replaced-store-only", &TrustBundle{UID: "u", Ours: true, Annotated: "d1", Contents: contents("d1", "evil")}, "enforce", false,
			"store evil", ""},
		{"tenant-made-unreadable", &TrustBundle{UID: "u", Ours: true, Annotated: "d1", Contents: trust.Contents{Problem: "ca-bundle.pem: no certificate"}}, "warn", false, "",
			"its content cannot be read: ca-bundle.pem: no certificate"},
		// The window before egret's bundle reaches the namespace refuses the
		// pod under any validation level: never admitted without the CA.
		{"egrets-previous-bundle", &TrustBundle{UID: "u", Ours: true, Annotated: "d0", Contents: contents("d0", "d0")}, "warn", false,
			"pod refused: it should trust the corporate CA, but ConfigMap shop/egret-trust-bundle holds bundle d0 and egret's current one is d1 (the writer is catching up)", ""},
		{"not-written-yet", nil, "warn", false, "pod refused: it should trust the corporate CA, but ConfigMap shop/egret-trust-bundle is not written yet", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := trustPolicy(t, func(c *Config) { c.Mode, c.Image = "sidecar", "egret:test" })
			in := Input{Policy: p, Namespace: ns("shop", optedIn, map[string]string{ValidationAnnotation: tc.level}), Cluster: testCluster(),
				Trust: builtTrust, TrustBundle: tc.bundle}
			res := Mutate(pod(nil), in)
			if res.Denied != "" || tc.denied != "" {
				if tc.denied == "" || !strings.Contains(res.Denied, tc.denied) {
					t.Fatalf("denied %q, want %q", res.Denied, tc.denied)
				}
				if res.Mode != 0 || !equality.Semantic.DeepEqual(res.Pod, pod(nil)) {
					t.Error("a refused pod came back mutated")
				}
				return
			}
			all := strings.Join(res.Warnings, "\n")
			if (tc.warning == "") != (all == "") || !strings.Contains(all, tc.warning) {
				t.Errorf("warnings %q, want %q", all, tc.warning)
			}
			st, err := stamp.Parse(res.Pod.Annotations[stamp.Annotation])
			if err != nil {
				t.Fatal(err)
			}
			var sidecar corev1.Container
			for _, c := range res.Pod.Spec.InitContainers {
				if c.Name == SidecarName {
					sidecar = c
				}
			}
			digest, hasDigest := env(sidecar, "EGRET_TRUST_DIGEST")
			if !tc.mounted {
				if len(res.Pod.Spec.Volumes) != 0 || st.Trust != nil || hasDigest {
					t.Errorf("foreign bundle used: volumes %+v, stamp %+v, sidecar digest %q", res.Pod.Spec.Volumes, st.Trust, digest)
				}
				for _, c := range res.Pod.Spec.Containers {
					if v, ok := env(c, "SSL_CERT_FILE"); ok {
						t.Errorf("%s: SSL_CERT_FILE=%s", c.Name, v)
					}
				}
				return
			}
			if len(res.Pod.Spec.Volumes) != 1 || st.Trust == nil || *st.Trust != (stamp.Trust{ConfigMap: TrustConfigMapName, Owner: "egret", UID: "uid-egret", Digest: "d1"}) {
				t.Fatalf("volumes %+v, stamp %+v", res.Pod.Spec.Volumes, st.Trust)
			}
			if dir, _ := env(sidecar, "EGRET_TRUST_DIR"); digest != "d1" || dir != trust.DefaultMountDir {
				t.Errorf("sidecar checks %q in %q", digest, dir)
			}
		})
	}
}
