package deploy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kubetest"
	"egret.io/egret/internal/testutil/secretvol"
	"egret.io/egret/internal/webhook"
)

// podSpec returns the pod template of a rendered Deployment.
func podSpec(t *testing.T, objs []*unstructured.Unstructured, name string) corev1.PodSpec {
	t.Helper()
	u := find(objs, "Deployment", name)
	if u == nil {
		t.Fatalf("no Deployment %s rendered", name)
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Spec
}

// container returns the first container of a rendered Deployment.
func container(t *testing.T, objs []*unstructured.Unstructured, name string) corev1.Container {
	t.Helper()
	return podSpec(t, objs, name).Containers[0]
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podArgs expands $(VAR) in a container's args from its env, as the kubelet
// does; fieldRef metadata.namespace is the pod's namespace.
func podArgs(c corev1.Container, namespace string) ([]string, map[string]string) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = namespace
		case e.ValueFrom == nil:
			env[e.Name] = varRef.ReplaceAllStringFunc(e.Value, func(m string) string { return env[m[2:len(m)-1]] })
		}
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = varRef.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	return args, env
}

// substitute replaces the value of each --flag=value (or --flag value) in
// args; it fails the test if a flag is not there, so the manifests cannot
// drift from what the test substitutes.
func substitute(t *testing.T, args []string, repl map[string]string) []string {
	t.Helper()
	out := append([]string(nil), args...)
	for flag, v := range repl {
		found := false
		for i := range out {
			switch {
			case strings.HasPrefix(out[i], flag+"="):
				out[i], found = flag+"="+v, true
			case out[i] == flag && i+1 < len(out):
				out[i+1], found = v, true
			}
		}
		if !found {
			t.Fatalf("the manifest's args %q have no %s", args, flag)
		}
	}
	return out
}

// saKubeconfig writes a kubeconfig that acts as the webhook's
// ServiceAccount (impersonation): what the in-cluster config would be.
func saKubeconfig(t *testing.T, kc *kubetest.Cluster, namespace, sa string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kc.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = "system:serviceaccount:" + namespace + ":" + sa
		a.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func loopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEgret runs the egret binary and stops it (SIGTERM, by PID) at the end.
func startEgret(t *testing.T, bin string, args []string, env map[string]string) *testutil.SyncBuffer {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("egret %s output:\n%s", args[0], out.String())
		}
	})
	return out
}

// TestShippedInstall is the install as shipped: the egret binary run with
// exactly the container args and env of the rendered default install
// (kustomize; the chart renders the same objects, TestHelmMatchesKustomize),
// only addresses and paths put where a pod would have them: a kubeconfig
// acting as the ServiceAccount for the in-cluster config, ports on
// loopback. The webhook configurations are the rendered ones, their Service
// reference replaced with the loopback URL; the caBundle is what the binary
// writes. Then pods are created in an opted-in namespace and elsewhere, and
// the gateway serves a request.
func TestShippedInstall(t *testing.T) {
	kc := kubetest.Require(t)
	bin := testutil.BuildEgret(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "egret-system"
	objs, _ := render(t, "overlays/default")
	c, err := client.New(kc.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Install (idempotent after TestApplyToAPIServer) and point the
	// webhook configurations at the loopback port.
	port := loopbackPort(t)
	var hooks []*unstructured.Unstructured
	var rest []*unstructured.Unstructured
	for _, o := range objs {
		if strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
			o = o.DeepCopy()
			ws, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, w := range ws {
				cc := w.(map[string]any)["clientConfig"].(map[string]any)
				svc := cc["service"].(map[string]any)
				if svc["name"] != "egret-webhook" || svc["namespace"] != ns {
					t.Fatalf("webhook %v calls %v, not the egret-webhook Service", w.(map[string]any)["name"], svc)
				}
				delete(cc, "service")
				cc["url"] = fmt.Sprintf("https://127.0.0.1:%d%s", port, svc["path"])
			}
			_ = unstructured.SetNestedSlice(o.Object, ws, "webhooks")
			hooks = append(hooks, o)
			continue
		}
		rest = append(rest, o)
	}
	applyAll(t, c, rest, "", false)
	applyAll(t, c, hooks, "", false)
	t.Cleanup(func() {
		for _, h := range hooks {
			_ = c.Delete(context.Background(), h)
		}
	})

	// The webhook, as its Deployment runs it.
	wc := container(t, objs, "egret-webhook")
	args, env := podArgs(wc, ns)
	if env["EGRET_SIDECAR_IMAGE"] != wc.Image {
		t.Errorf("sidecar image %q is not the webhook's image %q", env["EGRET_SIDECAR_IMAGE"], wc.Image)
	}
	metricsPort := loopbackPort(t)
	args = substitute(t, args, map[string]string{
		"--listen":         fmt.Sprintf("127.0.0.1:%d", port),
		"--metrics-listen": fmt.Sprintf("127.0.0.1:%d", metricsPort),
	})
	// In a pod: the in-cluster config, and the API server calls the
	// Service name the certificate holds; here the kubeconfig and 127.0.0.1.
	args = append(args, "--kubeconfig="+saKubeconfig(t, kc, ns, "egret-webhook"), "--host=127.0.0.1")
	start := time.Now()
	whOut := startEgret(t, bin, args, env)

	// Ready: /readyz over TLS with the CA the binary wrote to its Secret.
	var pool *x509.CertPool
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		var s corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "egret-webhook-tls"}, &s); err != nil {
			return false, nil
		}
		pool = x509.NewCertPool()
		pool.AppendCertsFromPEM(s.Data[webhook.SecretCACert])
		hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/readyz", port))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	})
	if err != nil {
		t.Fatalf("the shipped webhook never served /readyz on its TLS port: %v\n%s", err, whOut.String())
	}
	t.Logf("shipped webhook ready in %s", time.Since(start).Round(time.Millisecond))
	// The caBundle of every rendered webhook is the binary's CA.
	for _, h := range hooks {
		got := h.DeepCopy()
		if err := c.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
			t.Fatal(err)
		}
		ws, _, _ := unstructured.NestedSlice(got.Object, "webhooks")
		for _, w := range ws {
			b, _, _ := unstructured.NestedString(w.(map[string]any), "clientConfig", "caBundle")
			if b == "" {
				t.Errorf("%s %s: no caBundle written", got.GetKind(), w.(map[string]any)["name"])
			}
		}
	}

	mutateCalls := func() int {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
		if err != nil {
			t.Fatalf("webhook metrics: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		n := 0
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "controller_runtime_webhook_requests_total{") && strings.Contains(l, `webhook="/mutate"`) {
				var v float64
				fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
				n += int(v)
			}
		}
		return n
	}
	on := kc.Namespace(t, "shipped-on", map[string]string{discovery.InjectLabel: discovery.InjectEnabled})
	off := kc.Namespace(t, "shipped-off", nil)
	mk := func(ns, name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
	}
	create := func(p *corev1.Pod) *corev1.Pod {
		t.Helper()
		if _, err := kc.Clientset.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
		}
		got, err := kc.Clientset.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	envOf := func(p *corev1.Pod, name string) string {
		for _, e := range p.Spec.Containers[0].Env {
			if e.Name == name {
				return e.Value
			}
		}
		return ""
	}
	gatewayURL := "http://egret-gateway." + ns + ".svc:3128"
	// Discovery must have run before the webhook injects (it is ready).
	if p := create(mk(on, "app", nil)); envOf(p, "HTTPS_PROXY") != gatewayURL || envOf(p, "NO_PROXY") == "" {
		t.Errorf("pod in an opted-in namespace not injected: %v", p.Spec.Containers[0].Env)
	}
	if p := create(mk(on, "sidecar", nil)); len(p.Spec.InitContainers) != 0 {
		t.Errorf("gateway mode added init containers")
	}
	before := mutateCalls()
	if p := create(mk(off, "plain", nil)); len(p.Spec.Containers[0].Env) != 0 {
		t.Errorf("pod in another namespace mutated: %v", p.Spec.Containers[0].Env)
	}
	if p := create(mk(on, "opted-out", map[string]string{webhook.InjectAnnotation: "false"})); len(p.Spec.Containers[0].Env) != 0 {
		t.Errorf("pod labelled egret.io/inject=false mutated")
	}
	if n := mutateCalls(); n != before {
		t.Errorf("pods that are not opted in called the webhook (%d calls)", n-before)
	}
	if p := create(mk(off, "labelled", map[string]string{webhook.InjectAnnotation: "true"})); envOf(p, "HTTP_PROXY") != gatewayURL {
		t.Errorf("pod labelled egret.io/inject=true not injected: %v", p.Spec.Containers[0].Env)
	}
	// egret's own namespace never calls its webhook.
	before = mutateCalls()
	own := mk(ns, "own", map[string]string{webhook.InjectAnnotation: "true"})
	// egret's namespace enforces Pod Security restricted.
	own.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	own.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	if p := create(own); len(p.Spec.Containers[0].Env) != 0 {
		t.Errorf("pod in egret's own namespace mutated")
	}
	if n := mutateCalls(); n != before {
		t.Errorf("a pod in egret's own namespace called the webhook")
	}
	// The sidecar the webhook injects is the rendered image.
	if p := create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: on, Name: "sc", Annotations: map[string]string{webhook.ModeAnnotation: "sidecar"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}); len(p.Spec.InitContainers) != 1 || p.Spec.InitContainers[0].Image != wc.Image {
		t.Errorf("sidecar: %+v", p.Spec.InitContainers)
	} else if up := func() string {
		for _, e := range p.Spec.InitContainers[0].Env {
			if e.Name == "UPSTREAM_PROXY" {
				return e.Value
			}
		}
		return ""
	}(); up != gatewayURL {
		t.Errorf("the injected sidecar does not reach the gateway: UPSTREAM_PROXY=%q", up)
	}

	// The gateway, as its Deployment runs it. Its settings directory
	// (EGRET_ENV_DIR) is the projected volume the kubelet would mount: the
	// upstream Secret (not created yet, as a newcomer following the docs
	// has it) and the NO_PROXY the webhook wrote into egret's own namespace.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: discovery.ConfigMapName}, &corev1.ConfigMap{}) == nil, nil
	})
	if err != nil {
		t.Fatalf("no %s in egret's own namespace: the gateway has no direct rules", discovery.ConfigMapName)
	}
	gps := podSpec(t, objs, "egret-gateway")
	gc := gps.Containers[0]
	gargs, genv := podArgs(gc, ns)
	if len(gc.EnvFrom) > 0 || slices.ContainsFunc(gc.Env, func(e corev1.EnvVar) bool { return e.ValueFrom != nil }) {
		t.Fatalf("gateway env from Secrets or ConfigMaps (%v, %v): the test mounts them as the settings volume only", gc.EnvFrom, gc.Env)
	}
	settings := kubeletVolume(t, c, ns, gps, gc, genv["EGRET_ENV_DIR"])
	genv["EGRET_ENV_DIR"] = settings.vol.Dir
	if np := readFile(t, filepath.Join(settings.vol.Dir, "NO_PROXY")); !strings.Contains(np, ".svc") {
		t.Fatalf("the settings volume's NO_PROXY %q is not the cluster's", np)
	}
	// Names the test asks for resolve from a hosts file, never from DNS.
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.2 partner.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	genv["EGRET_HOSTS_FILE"], genv["EGRET_DNS_SERVERS"] = hosts, "127.0.0.1:1"
	pport, aport := loopbackPort(t), loopbackPort(t)
	gargs = substitute(t, gargs, map[string]string{"--listen": fmt.Sprintf("127.0.0.1:%d", pport), "--admin-listen": fmt.Sprintf("127.0.0.1:%d", aport)})
	// The test's origin is on loopback, which the gateway's SSRF guard
	// refuses by default: allow exactly it.
	genv["EGRET_SSRF_ALLOW_CIDRS"] = "127.0.0.1/32"
	gwOut := startEgret(t, bin, gargs, genv)
	origin := testutil.TCPServer(t, func(conn net.Conn) {
		defer conn.Close()
		buf := make([]byte, 4096)
		_, _ = conn.Read(buf)
		_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nshipped")
	})
	proxy, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pport))
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	var body []byte
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := hc.Get("http://" + origin + "/")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, _ = io.ReadAll(resp.Body)
		return resp.StatusCode == 200, nil
	})
	if err != nil || string(body) != "shipped" {
		t.Fatalf("the shipped gateway did not proxy a request (%v, %q):\n%s", err, body, gwOut.String())
	}

	// docs/kubernetes.md's next step: the upstream Secret, created after
	// the install. The running gateway takes it up when the kubelet
	// updates the volume, without a restart.
	upstream := testutil.TCPServer(t, func(conn net.Conn) {
		defer conn.Close()
		req, err := http.ReadRequest(bufio.NewReader(conn))
		if err != nil {
			return
		}
		body := "via upstream " + req.URL.Host
		fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	})
	via := func() string {
		resp, err := hc.Get("http://partner.example/")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := via(); strings.HasPrefix(got, "via upstream") {
		t.Fatalf("through an upstream before the Secret exists: %q", got)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "egret-upstream"},
		StringData: map[string]string{"UPSTREAM_PROXY": "http://egret:s3cret@" + upstream}}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), secret) })
	settings.sync(t)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return via() == "via upstream partner.example", nil
	})
	if err != nil {
		t.Fatalf("the gateway did not take up the upstream Secret created after it started (%q):\n%s", via(), gwOut.String())
	}
	// The cluster stays direct.
	if resp, err := hc.Get("http://" + origin + "/"); err != nil {
		t.Errorf("direct after the Secret: %v", err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "shipped" {
			t.Errorf("the origin on loopback (in NO_PROXY) through the upstream: %q", b)
		}
	}
	if strings.Contains(gwOut.String(), "s3cret") {
		t.Error("the upstream password is in the gateway's log")
	}
	t.Run("no-alert-on-a-healthy-install", func(t *testing.T) {
		healthyAlerts(t, map[string]string{"egret-gateway": fmt.Sprintf("127.0.0.1:%d", aport), "egret-webhook": fmt.Sprintf("127.0.0.1:%d", metricsPort)})
	})
}

// projectedVolume is a projected volume as the kubelet lays it out.
type projectedVolume struct {
	c      client.Client
	ns     string
	source corev1.Volume
	vol    *secretvol.Volume
}

// kubeletVolume finds the volume mounted at mountPath in the rendered pod
// and lays it out from the API server's objects as the kubelet does.
func kubeletVolume(t *testing.T, c client.Client, ns string, ps corev1.PodSpec, ctr corev1.Container, mountPath string) *projectedVolume {
	t.Helper()
	var name string
	for _, m := range ctr.VolumeMounts {
		if m.MountPath == mountPath {
			name = m.Name
		}
	}
	i := slices.IndexFunc(ps.Volumes, func(v corev1.Volume) bool { return v.Name == name })
	if i < 0 || ps.Volumes[i].Projected == nil {
		t.Fatalf("no projected volume mounted at %s: %v", mountPath, ps.Volumes)
	}
	p := &projectedVolume{c: c, ns: ns, source: ps.Volumes[i]}
	p.vol = secretvol.New(t, p.files(t))
	return p
}

// files reads the volume's sources: a missing optional one adds nothing.
func (p *projectedVolume) files(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, src := range p.source.Projected.Sources {
		var data map[string]string
		var items []corev1.KeyToPath
		var optional bool
		var key client.ObjectKey
		switch {
		case src.Secret != nil:
			key, items, optional = client.ObjectKey{Namespace: p.ns, Name: src.Secret.Name}, src.Secret.Items, ptr.Deref(src.Secret.Optional, false)
			var s corev1.Secret
			if err := p.c.Get(ctx, key, &s); err == nil {
				data = map[string]string{}
				for k, v := range s.Data {
					data[k] = string(v)
				}
			}
		case src.ConfigMap != nil:
			key, items, optional = client.ObjectKey{Namespace: p.ns, Name: src.ConfigMap.Name}, src.ConfigMap.Items, ptr.Deref(src.ConfigMap.Optional, false)
			var cm corev1.ConfigMap
			if err := p.c.Get(ctx, key, &cm); err == nil {
				data = cm.Data
			}
		default:
			t.Fatalf("projected source %+v: the test knows Secrets and ConfigMaps", src)
		}
		if data == nil {
			if !optional {
				t.Fatalf("%s is missing and not optional: the pod would not start", key)
			}
			continue
		}
		if len(items) == 0 {
			maps.Copy(out, data)
			continue
		}
		for _, it := range items {
			if v, ok := data[it.Key]; ok {
				out[it.Path] = v
			} else if !optional {
				t.Fatalf("%s has no key %s", key, it.Key)
			}
		}
	}
	return out
}

// sync is the kubelet's periodic update of the volume.
func (p *projectedVolume) sync(t *testing.T) { p.vol.Update(t, p.files(t)) }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
