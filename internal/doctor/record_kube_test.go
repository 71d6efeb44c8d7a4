package doctor

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/testutil/kubetest"
)

// TestRecordFromAPIServer: the run record reads the pod's own object from
// a real API server with the pod's service-account token (node, UID,
// images, the egret.io/ annotations and the injected state's hashes); a
// service account that may not get pods leaves the record with what the
// downward API gives, and says why. The token never appears in the report.
func TestRecordFromAPIServer(t *testing.T) {
	c := kubetest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := c.Namespace(t, "doctor", nil)
	cs := c.Clientset
	for _, sa := range []string{"app", "nobody"} {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "self"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}, ResourceNames: []string{"orders-1"}}}}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "self"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "self"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "app", Namespace: ns}}}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	state := `{"no_proxy":"sha256:1f2e","ca_bundle":"sha256:9a8b","upstream_secret":"rv-4711","sidecar_image":"sha256:77aa"}`
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-1", Annotations: map[string]string{
			InjectedStateAnnotation: state, "egret.io/mode": "sidecar", "other.io/x": "not recorded"}},
		Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "app",
			InitContainers: []corev1.Container{{Name: "egret-proxy", Image: "ghcr.io/egret-io/egret:v0.3.0"}},
			Containers:     []corev1.Container{{Name: "app", Image: "registry.example/orders:1.2"}}},
	}
	created, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	h, p, _ := net.SplitHostPort(host.Host)

	record := func(t *testing.T, sa string) (Record, string) {
		t.Helper()
		tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		for f, b := range map[string][]byte{"token": []byte(tok.Status.Token), "ca.crt": c.Config.CAData, "namespace": []byte(ns)} {
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		d := offline(t, "KUBERNETES_SERVICE_HOST="+h, "KUBERNETES_SERVICE_PORT="+p, "POD_NAME=orders-1")
		var nd net.Dialer
		d.Dial = nd.DialContext
		d.ServiceAccount = dir
		rep, err := RunReport(ctx, Options{Internal: []string{"kubernetes.default.svc"}, Timeout: 3 * time.Second}, d)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(rep)
		if strings.Contains(string(b), tok.Status.Token) {
			t.Error("the service-account token appears in the report")
		}
		return rep.Record, string(b)
	}

	t.Run("allowed", func(t *testing.T) {
		rec, js := record(t, "app")
		pr := rec.Pod
		if pr.Name != "orders-1" || pr.Namespace != ns || pr.Node != "node-a" || pr.UID != string(created.UID) {
			t.Errorf("pod record %+v", pr)
		}
		want := []ContainerImage{{Name: "egret-proxy", Kind: "init", Image: "ghcr.io/egret-io/egret:v0.3.0"}, {Name: "app", Kind: "container", Image: "registry.example/orders:1.2"}}
		if len(pr.Containers) != 2 || pr.Containers[0] != want[0] || pr.Containers[1] != want[1] {
			t.Errorf("containers %+v, want %+v", pr.Containers, want)
		}
		if pr.ConfigHashes["no_proxy"] != "sha256:1f2e" || pr.ConfigHashes["upstream_secret"] != "rv-4711" || len(pr.ConfigHashes) != 4 {
			t.Errorf("config hashes %v", pr.ConfigHashes)
		}
		if pr.Annotations["egret.io/mode"] != "sidecar" || pr.Annotations["other.io/x"] != "" {
			t.Errorf("annotations %v", pr.Annotations)
		}
		if !strings.Contains(strings.Join(pr.Sources, "; "), "api-server: the pod's own object") {
			t.Errorf("sources %q", pr.Sources)
		}
		if !strings.Contains(js, `"config_hashes":{`) || !strings.Contains(js, `"egret_version":`) {
			t.Errorf("JSON record lacks fields: %s", js)
		}
	})
	t.Run("forbidden-says-why", func(t *testing.T) {
		rec, _ := record(t, "nobody")
		if rec.Pod.Name != "orders-1" || rec.Pod.Namespace != ns || rec.Pod.Node != "" {
			t.Errorf("pod record %+v", rec.Pod)
		}
		if !strings.Contains(strings.Join(rec.Pod.Sources, "; "), "api-server: 403: the service account may not get pods/orders-1") {
			t.Errorf("sources %q", rec.Pod.Sources)
		}
	})
}

// TestDownwardAPIAnnotations: the downward API volume's annotations file
// (key="quoted value" lines) feeds the record without the API server.
func TestDownwardAPIAnnotations(t *testing.T) {
	dir := t.TempDir()
	content := "egret.io/injected-state=\"{\\\"no_proxy\\\":\\\"sha256:abcd\\\"}\"\nkubernetes.io/config.seen=\"2026-12-06T04:00:00Z\"\negret.io/mode=\"gateway\"\n"
	if err := os.WriteFile(filepath.Join(dir, "annotations"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	d := offline(t, "POD_NAME=web-0", "POD_NAMESPACE=shop", "NODE_NAME=node-b")
	d.PodInfo = dir
	rep, err := RunReport(context.Background(), Options{Timeout: time.Second}, d)
	if err != nil {
		t.Fatal(err)
	}
	pr := rep.Record.Pod
	if pr.Name != "web-0" || pr.Namespace != "shop" || pr.Node != "node-b" {
		t.Errorf("pod %+v", pr)
	}
	if pr.ConfigHashes["no_proxy"] != "sha256:abcd" || pr.Annotations["egret.io/mode"] != "gateway" || len(pr.Annotations) != 2 {
		t.Errorf("annotations %v hashes %v", pr.Annotations, pr.ConfigHashes)
	}
	if !strings.Contains(strings.Join(pr.Sources, "; "), "environment: POD_NAME, POD_NAMESPACE, NODE_NAME") {
		t.Errorf("sources %q", pr.Sources)
	}
}
