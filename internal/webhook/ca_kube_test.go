package webhook

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/stamp"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kubetest"
	"egret.io/egret/internal/testutil/tlslab"
	"egret.io/egret/internal/trust"
)

// TestTrustAgainstAPIServer runs the webhook with a CA source (a ConfigMap
// as trust-manager writes it) against the real API server: the bundle
// ConfigMap appears in the opted-in namespace (system roots plus the
// corporate CA, the PKCS#12 store holding the same, read by the real
// keytool), pods get the CA mounted and the variables set, a second
// mutation changes nothing, user values are kept and reported, and a
// changed source reaches the bundle and the store.
func TestTrustAgainstAPIServer(t *testing.T) {
	c := kubetest.Require(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pid := fmt.Sprint(os.Getpid())
	sys := c.Namespace(t, "egret-system", nil)
	corp := tlslab.NewCA(t, "Corp TLS Inspection CA")
	system := tlslab.NewCA(t, "Test Public Root")
	rootsFile := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(rootsFile, system.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "corp-ca"},
		Data: map[string]string{"trust-bundle.pem": string(corp.PEM())}}
	if _, err := c.Clientset.CoreV1().ConfigMaps(sys).Create(ctx, src, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	name := "egret-trust-test-" + pid
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"egret-trust-test": pid}}
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "inject.egret.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + MutatePath)},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector: sel, SideEffects: &none, FailurePolicy: &fail,
			AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](5),
		}}}
	if _, err := c.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Config: c.Config, Namespace: sys, Listen: fmt.Sprintf("127.0.0.1:%d", port), MetricsListen: "0",
			SecretName: "egret-webhook-tls", Hosts: []string{"127.0.0.1"}, MutatingWebhooks: []string{name},
			Policy: Config{Mode: "gateway", GatewayURL: "http://egret-gateway.egret-system.svc:3128", Validation: "warn",
				Trust: TrustConfig{ConfigMap: "corp-ca", Key: "trust-bundle.pem", SystemRoots: rootsFile, InterceptConfigMap: "egret-intercept-ca"}},
			LeaderElection: false,
			Ready:          func() { close(ready) },
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("webhook stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("webhook not ready after 60s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook: %v", err)
		}
	})

	on := c.Namespace(t, "trusted", map[string]string{"egret-trust-test": pid, discovery.InjectLabel: discovery.InjectEnabled})
	// waitBundle waits until the namespace's bundle holds want (and only
	// want) and returns the ConfigMap.
	waitBundle := func(t *testing.T, want ...*tlslab.CA) *corev1.ConfigMap {
		t.Helper()
		var certs []*x509.Certificate
		for _, ca := range want {
			certs = append(certs, ca.Cert)
		}
		digest := trust.Digest(certs)
		var cm *corev1.ConfigMap
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := c.Clientset.CoreV1().ConfigMaps(on).Get(ctx, TrustConfigMapName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			cm = got
			return got.Annotations[TrustDigestAnnotation] == digest, nil
		})
		if err != nil {
			t.Fatalf("%s/%s never held %v: %v (have %+v)", on, TrustConfigMapName, trust.Names(certs), err, cm)
		}
		pemCerts, err := trust.ParsePEM([]byte(cm.Data[trust.BundleFile]))
		if err != nil || trust.Digest(pemCerts) != digest {
			t.Fatalf("bundle PEM: %v %v", trust.Names(pemCerts), err)
		}
		store, err := trust.ReadTrustStore(cm.BinaryData[trust.TrustStoreFile], trust.TrustStorePassword)
		if err != nil || trust.Digest(store) != digest {
			t.Fatalf("trust store: %v %v", trust.Names(store), err)
		}
		return cm
	}
	keytool := func(t *testing.T, cm *corev1.ConfigMap) string {
		t.Helper()
		kt := testutil.NeedTool(t, "keytool")
		f := filepath.Join(t.TempDir(), trust.TrustStoreFile)
		if err := os.WriteFile(f, cm.BinaryData[trust.TrustStoreFile], 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(kt, "-list", "-keystore", f, "-storetype", "PKCS12", "-storepass", trust.TrustStorePassword).CombinedOutput()
		if err != nil {
			t.Fatalf("keytool -list: %v\n%s", err, out)
		}
		return string(out)
	}

	t.Run("bundle-written-with-system-roots", func(t *testing.T) {
		cm := waitBundle(t, system, corp)
		if cm.Labels[discovery.PartOfLabel] != "egret" {
			t.Errorf("labels %v", cm.Labels)
		}
		out := keytool(t, cm)
		if !strings.Contains(out, "Your keystore contains 2 entries") || strings.Count(out, "trustedCertEntry") != 2 {
			t.Errorf("keytool -list:\n%s", out)
		}
	})

	w := &warnings{}
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = w
	cs := kubernetes.NewForConfigOrDie(cfg)
	mk := func(name string, env ...corev1.EnvVar) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: on, Name: name},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "init", Image: "busybox:1"}},
				Containers:     []corev1.Container{{Name: "app", Image: "eclipse-temurin:21", Env: env}}}}
	}
	t.Run("pod-gets-the-ca", func(t *testing.T) {
		w.take()
		p, err := cs.CoreV1().Pods(on).Create(ctx, mk("app"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if warns := w.take(); len(warns) != 0 {
			t.Errorf("warnings: %q", warns)
		}
		if !slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Name == TrustVolumeName && v.ConfigMap != nil && v.ConfigMap.Name == TrustConfigMapName
		}) {
			t.Fatalf("volumes %+v", p.Spec.Volumes)
		}
		for _, ctr := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			if len(ctr.VolumeMounts) != 1 || !ctr.VolumeMounts[0].ReadOnly {
				t.Errorf("%s mounts %+v", ctr.Name, ctr.VolumeMounts)
			}
			for _, v := range trust.InjectedEnv(trust.DefaultMountDir) {
				if got, _ := env(ctr, v.Name); got != v.Value {
					t.Errorf("%s: %s = %q", ctr.Name, v.Name, got)
				}
			}
			if jto, _ := env(ctr, "JAVA_TOOL_OPTIONS"); !strings.Contains(jto, "-Djavax.net.ssl.trustStore="+trust.DefaultMountDir+"/"+trust.TrustStoreFile) {
				t.Errorf("%s: JAVA_TOOL_OPTIONS %q", ctr.Name, jto)
			}
		}
		t.Run("idempotent", func(t *testing.T) {
			again := mk("app-again")
			again.Spec = *p.Spec.DeepCopy()
			again.Annotations = p.Annotations
			w.take()
			got, err := cs.CoreV1().Pods(on).Create(ctx, again, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if warns := w.take(); len(warns) != 0 || !equality.Semantic.DeepEqual(got.Spec.Containers, p.Spec.Containers) ||
				!equality.Semantic.DeepEqual(got.Spec.Volumes, p.Spec.Volumes) {
				t.Errorf("re-mutation changed the pod or warned: %q", warns)
			}
		})
	})
	t.Run("user-values-kept", func(t *testing.T) {
		w.take()
		p, err := cs.CoreV1().Pods(on).Create(ctx, mk("mine", corev1.EnvVar{Name: "REQUESTS_CA_BUNDLE", Value: "/opt/corp.pem"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := env(p.Spec.Containers[0], "REQUESTS_CA_BUNDLE"); v != "/opt/corp.pem" {
			t.Errorf("REQUESTS_CA_BUNDLE = %q", v)
		}
		if all := strings.Join(w.take(), "\n"); !strings.Contains(all, "kept your REQUESTS_CA_BUNDLE=/opt/corp.pem") {
			t.Errorf("warnings: %s", all)
		}
	})
	// The window the real node found (1 run in 4 of TestInterceptOverlay):
	// a pod that arrives in an opted-in namespace before the writer has
	// written the namespace's bundle. It was admitted with the proxy and
	// without the CA, and failed TLS until restarted. Now the webhook writes
	// the bundle itself before it answers: every pod, created the moment its
	// namespace exists, gets the CA, and the ConfigMap is egret's bundle.
	t.Run("pod-before-the-namespace-bundle", func(t *testing.T) {
		const n = 6
		errs := make(chan error, n)
		for i := range n {
			go func() {
				fresh := fmt.Sprintf("fresh-%s-%d", pid, i)
				nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fresh,
					Labels: map[string]string{"egret-trust-test": pid, discovery.InjectLabel: discovery.InjectEnabled}}}
				if _, err := c.Clientset.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				p := mk("first")
				p.Namespace = fresh
				got, err := cs.CoreV1().Pods(fresh).Create(ctx, p, metav1.CreateOptions{})
				switch {
				case err != nil:
					errs <- fmt.Errorf("%s: %v", fresh, err)
				case !slices.ContainsFunc(got.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == TrustVolumeName }):
					errs <- fmt.Errorf("%s: pod admitted without the CA: volumes %+v", fresh, got.Spec.Volumes)
				default:
					if v, _ := env(got.Spec.Containers[0], "SSL_CERT_FILE"); v == "" {
						errs <- fmt.Errorf("%s: no SSL_CERT_FILE", fresh)
						return
					}
					cm, err := c.Clientset.CoreV1().ConfigMaps(fresh).Get(ctx, TrustConfigMapName, metav1.GetOptions{})
					if err != nil || !trustOurs(cm) || cm.Data[trust.BundleFile] == "" || len(cm.BinaryData[trust.TrustStoreFile]) == 0 {
						errs <- fmt.Errorf("%s: the mounted bundle: %v %+v", fresh, err, cm)
						return
					}
					errs <- nil
				}
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		if all := strings.Join(w.take(), "\n"); all != "" {
			t.Errorf("warnings: %s", all)
		}
	})
	// Issue 21, finding 9: a tenant who may create ConfigMaps creates
	// egret-trust-bundle before egret does, holding its own interception
	// CA in both forms. egret leaves the object alone, never mounts it, and
	// says so: a warning under warn, a refusal under enforce. A copy that
	// wears egret's labels is rewritten by egret, and pods then mount
	// egret's bundle.
	t.Run("squatted-bundle-is-never-mounted", func(t *testing.T) {
		tenant := tlslab.NewCA(t, "Tenant Intercept CA")
		tb, err := trust.Build([]*x509.Certificate{system.Cert}, []*x509.Certificate{tenant.Cert})
		if err != nil {
			t.Fatal(err)
		}
		p12, err := tb.TrustStore(nil)
		if err != nil {
			t.Fatal(err)
		}
		squat := func(t *testing.T, labels map[string]string) string {
			t.Helper()
			sq := c.Namespace(t, "squat", map[string]string{"egret-trust-test": pid})
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sq, Name: TrustConfigMapName, Labels: labels,
				Annotations: map[string]string{TrustDigestAnnotation: tb.Digest()}},
				Data: map[string]string{trust.BundleFile: string(tb.PEM())}, BinaryData: map[string][]byte{trust.TrustStoreFile: p12}}
			if _, err := c.Clientset.CoreV1().ConfigMaps(sq).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			nsObj, err := c.Clientset.CoreV1().Namespaces().Get(ctx, sq, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			nsObj.Labels[discovery.InjectLabel] = discovery.InjectEnabled
			if _, err := c.Clientset.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			return sq
		}
		t.Run("tenant-made-first", func(t *testing.T) {
			sq := squat(t, nil)
			create := func(name string) (*corev1.Pod, []string, error) {
				w.take()
				p := mk(name)
				p.Namespace = sq
				got, err := cs.CoreV1().Pods(sq).Create(ctx, p, metav1.CreateOptions{})
				return got, w.take(), err
			}
			// The webhook reads namespaces from its cache: wait for the label.
			var p *corev1.Pod
			var warns []string
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				var err error
				p, warns, err = create(fmt.Sprintf("app-%d", time.Now().UnixNano()))
				return err == nil && !slices.ContainsFunc(warns, func(s string) bool { return strings.Contains(s, "only in namespaces labelled") }), err
			})
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == TrustVolumeName }) {
				t.Fatalf("the tenant's ConfigMap is mounted as the pod's trusted CAs: %+v", p.Spec.Volumes)
			}
			for _, ctr := range append(p.Spec.InitContainers, p.Spec.Containers...) {
				if v, ok := env(ctr, "SSL_CERT_FILE"); ok {
					t.Errorf("%s: SSL_CERT_FILE=%s", ctr.Name, v)
				}
			}
			if all := strings.Join(warns, "\n"); !strings.Contains(all, "ConfigMap "+sq+"/egret-trust-bundle is not the trust bundle egret wrote (it is not labelled app.kubernetes.io/managed-by=egret") {
				t.Errorf("warnings: %s", all)
			}
			st, err := stamp.Parse(p.Annotations[stamp.Annotation])
			if err != nil || st.Trust != nil {
				t.Errorf("stamp %+v, %v", st, err)
			}
			// egret left the tenant's object alone.
			got, err := c.Clientset.CoreV1().ConfigMaps(sq).Get(ctx, TrustConfigMapName, metav1.GetOptions{})
			if err != nil || got.Data[trust.BundleFile] != string(tb.PEM()) {
				t.Errorf("the tenant's ConfigMap changed: %v", err)
			}
			// Under enforce the pod is refused.
			nsObj, err := c.Clientset.CoreV1().Namespaces().Get(ctx, sq, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			nsObj.Annotations = map[string]string{ValidationAnnotation: "enforce"}
			if _, err := c.Clientset.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				_, _, err := create(fmt.Sprintf("app-%d", time.Now().UnixNano()))
				return err != nil, nil
			})
			_, _, err = create("refused")
			if err == nil || !strings.Contains(err.Error(), "pod refused (validation enforce): ConfigMap "+sq+"/egret-trust-bundle is not the trust bundle egret wrote") {
				t.Errorf("create under enforce: %v", err)
			}
		})
		t.Run("tenant-copied-egrets-labels", func(t *testing.T) {
			sq := squat(t, map[string]string{discovery.ManagedByLabel: "egret", discovery.PartOfLabel: "egret"})
			// egret takes its name back: the writer rewrites what claims to be its own.
			cur := waitBundle(t, system, corp).Annotations[TrustDigestAnnotation]
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				got, err := c.Clientset.CoreV1().ConfigMaps(sq).Get(ctx, TrustConfigMapName, metav1.GetOptions{})
				return err == nil && got.Annotations[TrustDigestAnnotation] == cur && !strings.Contains(got.Data[trust.BundleFile], "Tenant"), nil
			})
			if err != nil {
				t.Fatalf("egret did not rewrite the labelled copy: %v", err)
			}
			var p *corev1.Pod
			err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				pp := mk(fmt.Sprintf("app-%d", time.Now().UnixNano()))
				pp.Namespace = sq
				got, err := cs.CoreV1().Pods(sq).Create(ctx, pp, metav1.CreateOptions{})
				if err != nil {
					return false, err
				}
				p = got
				return slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == TrustVolumeName }), nil
			})
			if err != nil {
				t.Fatalf("egret's rewritten bundle never mounted: %v", err)
			}
			st, err := stamp.Parse(p.Annotations[stamp.Annotation])
			if err != nil || st.Trust == nil || st.Trust.Digest != cur || st.Trust.Owner != "egret" || st.Trust.UID == "" {
				t.Errorf("stamp %+v, %v", st.Trust, err)
			}
		})
	})
	t.Run("bundle-update-reaches-the-store", func(t *testing.T) {
		second := tlslab.NewCA(t, "Corp Second Inspection CA")
		cur, err := c.Clientset.CoreV1().ConfigMaps(sys).Get(ctx, "corp-ca", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Data["trust-bundle.pem"] = string(corp.PEM()) + string(second.PEM())
		if _, err := c.Clientset.CoreV1().ConfigMaps(sys).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		cm := waitBundle(t, system, corp, second)
		if out := keytool(t, cm); strings.Count(out, "trustedCertEntry") != 3 {
			t.Errorf("keytool -list after the update:\n%s", out)
		}
	})
	// The interception CA as the gateway publishes it (no ConfigMap until
	// then: the bundle above had none): it joins the bundle, both CAs of a
	// rotation are there while it overlaps, and a deleted ConfigMap takes
	// them out again.
	t.Run("interception-ca-joins-the-bundle", func(t *testing.T) {
		ca1 := tlslab.NewCA(t, "egret interception CA 1")
		ca2 := tlslab.NewCA(t, "egret interception CA 2")
		icm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "egret-intercept-ca"},
			Data: map[string]string{"ca.crt": string(ca1.PEM())}}
		if _, err := c.Clientset.CoreV1().ConfigMaps(sys).Create(ctx, icm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cur, err := c.Clientset.CoreV1().ConfigMaps(sys).Get(ctx, "corp-ca", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		corpCerts, err := trust.ParsePEM([]byte(cur.Data["trust-bundle.pem"]))
		if err != nil {
			t.Fatal(err)
		}
		want := func(extra ...*tlslab.CA) []*tlslab.CA {
			out := []*tlslab.CA{system}
			for _, cc := range corpCerts {
				out = append(out, &tlslab.CA{Cert: cc})
			}
			return append(out, extra...)
		}
		waitBundle(t, want(ca1)...)
		icm.Data["ca.crt"] = string(ca2.PEM()) + string(ca1.PEM()) // the switch: new in force, old still trusted
		if _, err := c.Clientset.CoreV1().ConfigMaps(sys).Update(ctx, icm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		cm := waitBundle(t, want(ca1, ca2)...)
		if out := keytool(t, cm); strings.Count(out, "trustedCertEntry") != len(want(ca1, ca2)) {
			t.Errorf("keytool -list with both interception CAs:\n%s", out)
		}
		if err := c.Clientset.CoreV1().ConfigMaps(sys).Delete(ctx, "egret-intercept-ca", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitBundle(t, want()...)
	})
	t.Run("broken-source-keeps-the-last-bundle", func(t *testing.T) {
		cur, err := c.Clientset.CoreV1().ConfigMaps(sys).Get(ctx, "corp-ca", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		cur.Data["trust-bundle.pem"] = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"
		if _, err := c.Clientset.CoreV1().ConfigMaps(sys).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		got, err := c.Clientset.CoreV1().ConfigMaps(on).Get(ctx, TrustConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got.Data[trust.BundleFile], "PRIVATE KEY") {
			t.Fatal("a private key reached the pods' bundle")
		}
		certs, err := trust.ParsePEM([]byte(got.Data[trust.BundleFile]))
		if err != nil || len(certs) != 3 {
			t.Errorf("bundle changed on a broken source: %v %v", trust.Names(certs), err)
		}

	})
	t.Run("opted-out-namespace-loses-the-bundle", func(t *testing.T) {
		nsObj, err := c.Clientset.CoreV1().Namespaces().Get(ctx, on, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(nsObj.Labels, discovery.InjectLabel)
		if _, err := c.Clientset.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := c.Clientset.CoreV1().ConfigMaps(on).Get(ctx, TrustConfigMapName, metav1.GetOptions{})
			return err != nil, nil
		})
		if err != nil {
			t.Errorf("%s/%s still there after the namespace opted out", on, TrustConfigMapName)
		}
	})
}
