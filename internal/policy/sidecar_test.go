package policy_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"egret.io/egret/internal/testutil"
)

// TestTokenThroughSidecar runs the built egret twice, as a gateway with
// EGRET_POLICY against the real API server and as a pod's sidecar chained
// to it with EGRET_UPSTREAM_TOKEN_FILE holding the pod's projected token
// (audience egret, bound to the pod). The sidecar connects from an address
// no pod has, so only the token, checked by TokenReview, can name the pod:
// the pod's policy decides, and a new token in the file (the kubelet's
// refresh) for another pod changes the verdict without a restart.
func TestTokenThroughSidecar(t *testing.T) {
	c := requireCluster(t)
	bin := testutil.BuildEgret(t)
	curl := testutil.NeedTool(t, "curl")
	ctx := context.Background()
	dir := t.TempDir()

	// The origin, on 127.0.0.2 (the gateway's guard refuses its own
	// address, 127.0.0.1).
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.Host)
		fmt.Fprintf(w, "hello from %s", host)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	hostsFile := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hostsFile, []byte("127.0.0.2 allowed.test other.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	ns := c.Namespace(t, "side", nil)
	for _, sa := range []string{"api", "batch"} {
		if _, err := c.Clientset.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.apply(t, fmt.Sprintf(`
metadata: {name: api, namespace: %s}
spec:
  podSelector: {matchLabels: {app: api}}
  egress:
  - {name: the-api, action: allow, hosts: [allowed.test]}`, ns))
	c.apply(t, fmt.Sprintf(`
metadata: {name: batch, namespace: %s}
spec:
  podSelector: {matchLabels: {app: batch}}
  egress:
  - {action: allow, hosts: [other.test]}`, ns))
	// Clients the gateway cannot name get nothing.
	c.apply(t, `
metadata: {name: default}
spec: {}`)
	t.Cleanup(func() { c.remove(t, "", "default") })
	api, _ := c.pod(t, ns, "api", "api", map[string]string{"app": "api"})
	batch, _ := c.pod(t, ns, "batch", "batch", map[string]string{"app": "batch"})
	token := func(p *corev1.Pod) string {
		tr, err := c.Clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, p.Spec.ServiceAccountName, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			Audiences: []string{"egret"}, ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest: %v", err)
		}
		return tr.Status.Token
	}
	tokenFile := filepath.Join(dir, "token")
	writeToken := func(tok string) {
		// As the kubelet does: a new file renamed over the old.
		if err := os.WriteFile(tokenFile+".new", []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tokenFile+".new", tokenFile); err != nil {
			t.Fatal(err)
		}
	}
	apiToken := token(api)
	writeToken(apiToken)

	gwPort, sidePort := freePort(t), freePort(t)
	gwLog := &testutil.SyncBuffer{}
	run := func(name string, out *testutil.SyncBuffer, env ...string) {
		cmd := exec.Command(bin, "proxy")
		cmd.Env = append(os.Environ(), append([]string{"ADMIN_LISTEN_ADDR=off", "EGRET_LOG_LEVEL=info"}, env...)...)
		if out == nil {
			out = &testutil.SyncBuffer{}
		}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-done
			if t.Failed() {
				t.Logf("%s output:\n%s", name, out.String())
			}
		})
	}
	run("gateway", gwLog, "EGRET_ROLE=gateway", "EGRET_VIA=gateway", "LISTEN_ADDR=127.0.0.1:"+strconv.Itoa(gwPort),
		"DEFAULT_ROUTE=direct", "EGRET_SSRF_ALLOW_CIDRS=127.0.0.0/8", "EGRET_HOSTS_FILE="+hostsFile,
		"EGRET_POLICY=true", "EGRET_POLICY_KUBECONFIG="+c.Kubeconfig)
	run("sidecar", nil, "EGRET_VIA=sidecar", "LISTEN_ADDR=127.0.0.1:"+strconv.Itoa(sidePort),
		"UPSTREAM_PROXY=http://127.0.0.1:"+strconv.Itoa(gwPort), "EGRET_UPSTREAM_TOKEN_FILE="+tokenFile,
		"EGRET_CREDENTIALS_CHECK_INTERVAL=200ms")

	get := func(host string) string {
		out, _ := exec.Command(curl, "-s", "--max-time", "10", "-o", "-", "-w", " %{http_code}",
			"--proxy", "http://127.0.0.1:"+strconv.Itoa(sidePort), "http://"+host+":"+port+"/").CombinedOutput()
		return string(out)
	}
	eventually(t, 60*time.Second, "the gateway serves", func() bool {
		return strings.HasSuffix(get("allowed.test"), " 200")
	})

	for _, tc := range []struct{ host, want string }{
		{"allowed.test", "hello from allowed.test 200"},
		{"other.test", " 403"},
	} {
		if got := get(tc.host); !strings.HasSuffix(got, tc.want) {
			t.Errorf("api pod → %s: %q, want …%q", tc.host, got, tc.want)
		}
	}
	var line string
	for _, l := range strings.Split(gwLog.String(), "\n") {
		if strings.Contains(l, `"dest":"allowed.test:`) && strings.Contains(l, `"status":200`) {
			line = l
		}
	}
	for _, want := range []string{`"identity":"token"`, `"namespace":"` + ns + `"`, `"pod":"api"`, `"service_account":"api"`, `"policy":"` + ns + `/api"`} {
		if !strings.Contains(line, want) {
			t.Errorf("the gateway's access log line lacks %s: %s", want, line)
		}
	}
	if strings.Contains(gwLog.String(), apiToken[:40]) {
		t.Error("the token reached the gateway's log")
	}

	// The file now holds the batch pod's token: the sidecar presents it
	// from the next request on.
	writeToken(token(batch))
	eventually(t, 10*time.Second, "the new token is presented", func() bool {
		return strings.HasSuffix(get("other.test"), "hello from other.test 200")
	})
	if got := get("allowed.test"); !strings.HasSuffix(got, " 403") {
		t.Errorf("batch pod → allowed.test: %q, want a 403", got)
	}

	// No token at all: the gateway cannot name the client (the sidecar's
	// address is no pod's), and the empty cluster default refuses.
	writeToken("not-a-token")
	eventually(t, 10*time.Second, "a token TokenReview refuses", func() bool {
		return strings.HasSuffix(get("other.test"), " 403")
	})
}
