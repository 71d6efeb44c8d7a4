package webhook

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/drift"
	"egret.io/egret/internal/stamp"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kubetest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// warnings collects the admission warnings the API server returns.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	p, _ := strconv.Atoi(testutil.FreePort(t))
	return p
}

// TestWebhookAgainstAPIServer runs `egret webhook` (Run) in-process on
// loopback, registers it with the real API server through
// Mutating/ValidatingWebhookConfigurations whose caBundle the self-managed CA
// fills in, and creates pods.
func TestWebhookAgainstAPIServer(t *testing.T) {
	c := kubetest.Require(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pid := fmt.Sprint(os.Getpid())
	sys := c.Namespace(t, "egret-system", nil)
	for i, cidr := range []string{"10.244.0.0/24", "10.244.1.0/24"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("wh-node-%d-%s", i, pid)}, Spec: corev1.NodeSpec{PodCIDRs: []string{cidr}}}
		if _, err := c.Clientset.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Clientset.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	}

	port := freePort(t)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	name := "egret-test-" + pid
	// Only namespaces of this test: the API server is shared by the package.
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"egret-test": pid}}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
	}}
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "inject.egret.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + MutatePath)},
			Rules: rules, NamespaceSelector: sel, SideEffects: &none, FailurePolicy: &fail,
			AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](5),
			ReinvocationPolicy: ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		}}}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "validate.egret.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + ValidatePath)},
			Rules: rules, NamespaceSelector: sel, SideEffects: &none, FailurePolicy: &fail,
			AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](5),
		}}}
	if _, err := c.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = c.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(bg, name, metav1.DeleteOptions{})
		_ = c.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(bg, name, metav1.DeleteOptions{})
	})

	ready := make(chan struct{})
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- Run(ctx, Options{
			Config: c.Config, Namespace: sys, Listen: fmt.Sprintf("127.0.0.1:%d", port), MetricsListen: "0",
			SecretName: "egret-webhook-tls", Hosts: []string{"127.0.0.1"},
			MutatingWebhooks: []string{name}, ValidatingWebhooks: []string{name},
			Policy: Config{Mode: "gateway", GatewayURL: "http://egret-gateway.egret-system.svc:3128",
				Image: "egret:test", Validation: "warn"},
			LeaderElection: true,
			Ready:          func() { close(ready) },
		})
	}()
	select {
	case <-ready:
		t.Logf("webhook ready in %s", time.Since(start).Round(time.Millisecond))
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

	// The self-managed CA wrote its Secret and the caBundles.
	sec, err := c.Clientset.CoreV1().Secrets(sys).Get(ctx, "egret-webhook-tls", metav1.GetOptions{})
	if err != nil || len(sec.Data[SecretCACert]) == 0 {
		t.Fatalf("ca secret: %v", err)
	}
	got, err := c.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil || !strings.Contains(string(got.Webhooks[0].ClientConfig.CABundle), strings.TrimSpace(string(sec.Data[SecretCACert]))) {
		t.Fatalf("caBundle not patched: %v", err)
	}

	w := &warnings{}
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = w
	cs := kubernetes.NewForConfigOrDie(cfg)
	on := c.Namespace(t, "shop", map[string]string{"egret-test": pid, discovery.InjectLabel: discovery.InjectEnabled})
	off := c.Namespace(t, "plain", map[string]string{"egret-test": pid})
	strict := c.Namespace(t, "strict", map[string]string{"egret-test": pid})
	nsObj, _ := c.Clientset.CoreV1().Namespaces().Get(ctx, strict, metav1.GetOptions{})
	nsObj.Annotations = map[string]string{ValidationAnnotation: "enforce"}
	if _, err := c.Clientset.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No wait: the webhook reads the namespace live at admission, so the
	// annotation set just now applies to the next pod (the informer cache
	// may not have it yet).

	mk := func(ns, name string, ann map[string]string, env ...corev1.EnvVar) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1", Env: env}}}}
	}
	create := func(t *testing.T, p *corev1.Pod) (*corev1.Pod, []string, error) {
		t.Helper()
		w.take()
		out, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		return out, w.take(), err
	}

	t.Run("opted-in-namespace-gets-proxy-env", func(t *testing.T) {
		p, warns, err := create(t, mk(on, "app", nil))
		if err != nil {
			t.Fatal(err)
		}
		if len(warns) != 0 {
			t.Errorf("warnings for a clean pod: %q", warns)
		}
		ctr := p.Spec.Containers[0]
		for _, n := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
			if v, _ := env(ctr, n); v != "http://egret-gateway.egret-system.svc:3128" {
				t.Errorf("%s = %q", n, v)
			}
		}
		np, _ := env(ctr, "NO_PROXY")
		lower, _ := env(ctr, "no_proxy")
		if np != lower {
			t.Errorf("NO_PROXY and no_proxy differ")
		}
		// The cluster's real ranges: the ServiceCIDR of the API server and
		// the two Nodes' podCIDRs (aggregated).
		for _, want := range []string{kubetest.ServiceCIDR, "10.244.0.0/23", "10.96.0.1", ".svc", ".cluster.local", "kubernetes.default.svc", "169.254.169.254"} {
			if !slices.Contains(strings.Split(np, ","), want) {
				t.Errorf("NO_PROXY lacks %s: %s", want, np)
			}
		}
		if v, _ := env(ctr, "JAVA_TOOL_OPTIONS"); !strings.Contains(v, "-Dhttp.proxyHost=egret-gateway.egret-system.svc") || !strings.Contains(v, "|10.244.0.*|10.244.1.*|") {
			t.Errorf("JAVA_TOOL_OPTIONS = %q", v)
		}
		if v, _ := env(ctr, "NODE_USE_ENV_PROXY"); v != "1" {
			t.Errorf("NODE_USE_ENV_PROXY = %q", v)
		}
		if p.Annotations[InjectedAnnotation] != "gateway" {
			t.Errorf("annotations %v", p.Annotations)
		}

		t.Run("idempotent", func(t *testing.T) {
			again := mk(on, "app-again", nil)
			again.Annotations = p.Annotations
			again.Spec.Containers = p.Spec.Containers
			got, warns, err := create(t, again)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got.Spec.Containers[0].Env, p.Spec.Containers[0].Env) || len(warns) != 0 {
				t.Errorf("re-mutation changed the pod or warned: %q", warns)
			}
		})
	})

	t.Run("native-sidecar-when-asked", func(t *testing.T) {
		p, _, err := create(t, mk(on, "sidecar", map[string]string{ModeAnnotation: "sidecar"}))
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.InitContainers) != 1 || p.Spec.InitContainers[0].Name != SidecarName ||
			p.Spec.InitContainers[0].RestartPolicy == nil || *p.Spec.InitContainers[0].RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Fatalf("no native sidecar: %+v", p.Spec.InitContainers)
		}
		sc := p.Spec.InitContainers[0]
		if sc.ReadinessProbe == nil || sc.StartupProbe == nil || *sc.SecurityContext.RunAsUser != DefaultSidecarUID || sc.Resources.Requests.Cpu().IsZero() {
			t.Errorf("sidecar lacks probes, user or resources: %+v", sc)
		}
		if v, _ := env(p.Spec.Containers[0], "HTTP_PROXY"); v != "http://127.0.0.1:3128" {
			t.Errorf("HTTP_PROXY = %q, want the sidecar", v)
		}
	})

	// A namespace's mode changed a moment before each pod: every pod gets
	// the new one. With the informer cache (before LiveNamespaces) the
	// real node saw the old mode.
	t.Run("namespace-mode-changed-just-before", func(t *testing.T) {
		flip := c.Namespace(t, "flip", map[string]string{"egret-test": pid, discovery.InjectLabel: discovery.InjectEnabled})
		for i := range 10 {
			mode := []string{"sidecar", "gateway"}[i%2]
			nsObj, err := c.Clientset.CoreV1().Namespaces().Get(ctx, flip, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			nsObj.Annotations = map[string]string{ModeAnnotation: mode}
			if _, err := c.Clientset.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			p, _, err := create(t, mk(flip, fmt.Sprintf("p%d", i), nil))
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Annotations[InjectedAnnotation]; got != mode {
				t.Fatalf("pod %d created right after the namespace's mode became %s was injected in mode %q", i, mode, got)
			}
		}
	})

	t.Run("transparent-adds-iptables-init", func(t *testing.T) {
		p, _, err := create(t, mk(on, "transparent", map[string]string{ModeAnnotation: "transparent"}))
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.InitContainers) != 2 || p.Spec.InitContainers[0].Name != IptablesName {
			t.Fatalf("init containers: %+v", p.Spec.InitContainers)
		}
		args := strings.Join(p.Spec.InitContainers[0].Args, " ")
		if !strings.Contains(args, "iptables apply --proxy-uid 15337 --redirect-port 15001 --exclude-cidrs 10.96.0.0/16,") {
			t.Errorf("iptables args: %s", args)
		}
	})

	// Beside a mesh (issue 24, item 4): Istio's injection label on the
	// namespace refuses transparent mode unless the pod (or namespace)
	// chooses exclude; then the mesh proxy's UID and ports go direct.
	t.Run("transparent-beside-istio", func(t *testing.T) {
		meshed := c.Namespace(t, "meshed", map[string]string{"egret-test": pid, discovery.InjectLabel: discovery.InjectEnabled, "istio-injection": "enabled"})
		var err error
		for range 50 { // the webhook reads namespaces from its cache
			if _, _, err = create(t, mk(meshed, fmt.Sprintf("t-%d", time.Now().UnixNano()), map[string]string{ModeAnnotation: "transparent"})); err != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err == nil || !strings.Contains(err.Error(), "transparent mode refused: the pod has an Istio sidecar (namespace label istio-injection=enabled)") {
			t.Fatalf("create: %v", err)
		}
		p, _, err := create(t, mk(meshed, "excluded", map[string]string{ModeAnnotation: "transparent", MeshAnnotation: "exclude"}))
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Join(p.Spec.InitContainers[0].Args, " ")
		if !strings.Contains(args, "--proxy-uid 15337 --redirect-port 15401 --exclude-uids 1337 --exclude-ports 15000-15090 --exclude-cidrs ") {
			t.Errorf("iptables args: %s", args)
		}
		if st, err := stamp.Parse(p.Annotations[stamp.Annotation]); err != nil || st.Mesh != "istio/exclude" {
			t.Errorf("stamp %+v %v", st, err)
		}
	})

	t.Run("unlabelled-namespace-untouched", func(t *testing.T) {
		p, _, err := create(t, mk(off, "plain", nil))
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.Containers[0].Env) != 0 || p.Annotations[InjectedAnnotation] != "" {
			t.Errorf("pod in an unlabelled namespace was mutated: %v", p.Spec.Containers[0].Env)
		}
	})

	t.Run("pod-annotation-opts-in", func(t *testing.T) {
		p, _, err := create(t, mk(off, "annotated", map[string]string{InjectAnnotation: "true"}))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := env(p.Spec.Containers[0], "HTTPS_PROXY"); !ok {
			t.Error("annotated pod not injected")
		}
	})

	bad := []corev1.EnvVar{{Name: "HTTP_PROXY", Value: "http://proxy.corp:3128"}, {Name: "http_proxy", Value: "http://proxy.corp:3128"},
		{Name: "HTTPS_PROXY", Value: "http://proxy.corp:3128"}, {Name: "https_proxy", Value: "http://proxy.corp:3128"},
		{Name: "NO_PROXY", Value: "localhost"}, {Name: "no_proxy", Value: "localhost"}}

	t.Run("incomplete-no-proxy-warned", func(t *testing.T) {
		p, warns, err := create(t, mk(on, "warned", nil, bad...))
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := env(p.Spec.Containers[0], "NO_PROXY"); v != "localhost" {
			t.Errorf("user NO_PROXY overwritten: %q", v)
		}
		all := strings.Join(warns, "\n")
		for _, want := range []string{"kept your NO_PROXY; it lacks", "kept your HTTP_PROXY=http://proxy.corp:3128", "no-proxy-incomplete", ".svc", "10.96.0.0/16"} {
			if !strings.Contains(all, want) {
				t.Errorf("warnings lack %q:\n%s", want, all)
			}
		}
	})

	t.Run("incomplete-no-proxy-denied-under-enforce", func(t *testing.T) {
		_, _, err := create(t, mk(strict, "denied", nil, bad...))
		if err == nil {
			t.Fatal("pod with NO_PROXY=localhost admitted under enforce")
		}
		for _, want := range []string{"denied the request", "no-proxy-incomplete", "container app", "add .svc,.cluster.local,kubernetes", "169.254.169.254", "10.96.0.0/16", "10.244.0.0/23"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("denial lacks %q: %v", want, err)
			}
		}
		good := mk(strict, "fixed", nil, bad...)
		full := "localhost,127.0.0.1,::1,[::1],.svc,.cluster.local,kubernetes,kubernetes.default,kubernetes.default.svc,kubernetes.default.svc.cluster.local,169.254.169.254,10.96.0.1,10.96.0.0/16,10.244.0.0/23"
		// Plus the API server's own addresses, as its EndpointSlice lists them.
		eps, err := c.Clientset.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range eps.Items {
			for _, e := range s.Endpoints {
				full += "," + strings.Join(e.Addresses, ",")
			}
		}
		for i := range good.Spec.Containers[0].Env {
			if strings.EqualFold(good.Spec.Containers[0].Env[i].Name, "no_proxy") {
				good.Spec.Containers[0].Env[i].Value = full
			}
		}
		if _, _, err := create(t, good); err != nil {
			t.Errorf("fixed pod refused: %v", err)
		}
	})

	t.Run("server-side-dry-run", func(t *testing.T) {
		w.take()
		p, err := cs.CoreV1().Pods(on).Create(ctx, mk(on, "dry", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := env(p.Spec.Containers[0], "NO_PROXY"); !ok {
			t.Error("dry run not mutated")
		}
	})

	t.Run("configmap-in-opted-in-namespace", func(t *testing.T) {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
			cm, err := c.Clientset.CoreV1().ConfigMaps(on).Get(ctx, discovery.ConfigMapName, metav1.GetOptions{})
			return err == nil && strings.Contains(cm.Data["NO_PROXY"], "10.244.0.0/23"), nil
		})
		if err != nil {
			t.Errorf("configmap %s/%s: %v", on, discovery.ConfigMapName, err)
		}
	})
	// Issue 24, item 1: the leader's drift report holds the pods injected
	// above as fresh; a Node joining changes the cluster NO_PROXY, and they
	// become stale on part noproxy.
	t.Run("drift-report-follows-no-proxy", func(t *testing.T) {
		staleIn := func(r *drift.Report) (n int) {
			for _, p := range r.Pods {
				if p.Namespace == on && slices.Contains(p.Parts, stamp.PartNoProxy) {
					n++
				}
			}
			return n
		}
		waitReport := func(what string, cond func(*drift.Report) bool) *drift.Report {
			var r *drift.Report
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
				var err error
				r, err = drift.ReadReport(ctx, directReader(t, c), sys)
				return err == nil && cond(r), nil
			})
			if err != nil {
				t.Fatalf("%s: %v (last %+v)", what, err, r)
			}
			return r
		}
		waitReport("a report with this test's pods fresh", func(r *drift.Report) bool { return r.InjectedPods > 0 && staleIn(r) == 0 })
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "wh-node-9-" + pid}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.9.0/24"}}}
		if _, err := c.Clientset.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Clientset.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
		r := waitReport("this test's pods stale on noproxy", func(r *drift.Report) bool { return staleIn(r) > 0 })
		if r.ByPart[stamp.PartNoProxy] < staleIn(r) || r.Restarts.Mode != drift.ModeOn {
			t.Errorf("report %+v", r)
		}
	})
}

func directReader(t *testing.T, c *kubetest.Cluster) client.Reader {
	t.Helper()
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestAdmissionSurvivesLostLease runs the webhook with leader election, takes
// its Lease away (another holder, renewed far ahead) and checks that the
// replica keeps admitting and injecting pods and keeps running, and that it
// writes the NO_PROXY ConfigMaps again once it wins the Lease back.
func TestAdmissionSurvivesLostLease(t *testing.T) {
	c := kubetest.Require(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pid := fmt.Sprint(os.Getpid())
	sys := c.Namespace(t, "egret-lease", nil)
	port := freePort(t)
	name := "egret-lease-" + pid
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"egret-lease-test": pid}}
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "inject.egret.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(fmt.Sprintf("https://127.0.0.1:%d%s", port, MutatePath))},
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
			SecretName: "egret-webhook-tls", Hosts: []string{"127.0.0.1"},
			MutatingWebhooks: []string{name},
			Policy:           Config{Mode: "gateway", GatewayURL: "http://egret-gateway.egret-system.svc:3128"},
			LeaderElection:   true, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond,
			Ready: func() { close(ready) },
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
	leases := c.Clientset.CoordinationV1().Leases(sys)
	holder := func() string {
		l, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return holder() != "", nil
	}); err != nil {
		t.Fatal("the webhook never took the Lease")
	}
	ours := holder()
	// Another replica takes the Lease for an hour.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptr.To("another-replica")
		l.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // past the renew deadline: leadership is lost
	select {
	case err := <-done:
		t.Fatalf("the webhook stopped when it lost the Lease: %v", err)
	default:
	}
	if h := holder(); h != "another-replica" {
		t.Fatalf("Lease holder %q: the webhook took it back while another replica held it", h)
	}
	on := c.Namespace(t, "lease-app", map[string]string{"egret-lease-test": pid, discovery.InjectLabel: discovery.InjectEnabled})
	p, err := c.Clientset.CoreV1().Pods(on).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("admission failed after the lease was lost: %v", err)
	}
	if v, _ := env(p.Spec.Containers[0], "HTTPS_PROXY"); v == "" {
		t.Error("pod not injected after the lease was lost")
	}
	// Not the leader: no ConfigMap in the new namespace.
	time.Sleep(time.Second)
	if _, err := c.Clientset.CoreV1().ConfigMaps(on).Get(ctx, discovery.ConfigMapName, metav1.GetOptions{}); err == nil {
		t.Error("a replica without the Lease wrote a ConfigMap")
	}
	// The other replica goes away: ours wins again and writes.
	if err := leases.Delete(ctx, LeaseName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Clientset.CoreV1().ConfigMaps(on).Get(ctx, discovery.ConfigMapName, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Errorf("no ConfigMap after winning the Lease back (holder %q, was %q): %v", holder(), ours, err)
	}
}
