package policy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/identity"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kubetest"
)

func TestMain(m *testing.M) {
	code := kubetest.Main(m)
	testutil.RemoveEgretBinary()
	os.Exit(code)
}

// cluster is the real API server with the policy CRDs installed (from
// deploy/components/policy, as an operator installs them).
type cluster struct {
	*kubetest.Cluster
	dyn dynamic.Interface
}

var crdsOnce atomic.Bool

func requireCluster(t *testing.T) *cluster {
	t.Helper()
	kc := kubetest.Require(t)
	c := &cluster{Cluster: kc, dyn: dynamic.NewForConfigOrDie(kc.Config)}
	if crdsOnce.Load() {
		return c
	}
	b, err := os.ReadFile("../../deploy/components/policy/crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ax := apiextclient.NewForConfigOrDie(kc.Config)
	ctx := context.Background()
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
			t.Fatal(err)
		}
		if _, err := ax.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("install CRD %s: %v", crd.Name, err)
		}
	}
	eventually(t, 30*time.Second, "CRDs served", func() bool {
		_, e1 := c.dyn.Resource(policy.EgressPolicies).List(ctx, metav1.ListOptions{})
		_, e2 := c.dyn.Resource(policy.ClusterEgressPolicies).List(ctx, metav1.ListOptions{})
		return e1 == nil && e2 == nil
	})
	crdsOnce.Store(true)
	return c
}

// apply creates or replaces a policy from YAML; a document without a
// namespace is a ClusterEgressPolicy.
func (c *cluster) apply(t *testing.T, doc string) {
	t.Helper()
	var p policy.EgressPolicy
	if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	cluster := p.Namespace == ""
	u, err := policy.ToUnstructured(&p, cluster)
	if err != nil {
		t.Fatal(err)
	}
	delete(u.Object, "status")
	ri := c.res(p.Namespace, cluster)
	ctx := context.Background()
	old, err := ri.Get(ctx, p.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = ri.Create(ctx, u, metav1.CreateOptions{})
	case err == nil:
		u.SetResourceVersion(old.GetResourceVersion())
		_, err = ri.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("apply policy %s/%s: %v", p.Namespace, p.Name, err)
	}
}

func (c *cluster) res(ns string, cluster bool) dynamic.ResourceInterface {
	if cluster {
		return c.dyn.Resource(policy.ClusterEgressPolicies)
	}
	return c.dyn.Resource(policy.EgressPolicies).Namespace(ns)
}

func (c *cluster) remove(t *testing.T, ns, name string) {
	t.Helper()
	if err := c.res(ns, ns == "").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// condition returns the Accepted condition of a policy, once written for
// its current generation.
func (c *cluster) condition(t *testing.T, ns, name string) *metav1.Condition {
	t.Helper()
	var out *metav1.Condition
	eventually(t, 10*time.Second, "status of "+name, func() bool {
		u, err := c.res(ns, ns == "").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		var st policy.Status
		if m, ok := u.Object["status"].(map[string]any); ok {
			b, _ := json.Marshal(m)
			json.Unmarshal(b, &st)
		}
		for i := range st.Conditions {
			if st.Conditions[i].Type == policy.ConditionAccepted && st.Conditions[i].ObservedGeneration == u.GetGeneration() {
				out = &st.Conditions[i]
				return true
			}
		}
		return false
	})
	return out
}

var nextIP atomic.Int32

// pod creates a pod with a fresh loopback address (the test's clients
// bind to it) and marks it Running with that address, as the kubelet
// would. It returns the pod and its address.
func (c *cluster) pod(t *testing.T, ns, name, sa string, labels map[string]string) (*corev1.Pod, string) {
	t.Helper()
	ip := fmt.Sprintf("127.0.%d.%d", 10+nextIP.Load()/200, 10+nextIP.Add(1)%200)
	return c.podAt(t, ns, name, sa, ip, labels), ip
}

func (c *cluster) podAt(t *testing.T, ns, name, sa, ip string, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
	p, err := c.Clientset.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if p, err = c.Clientset.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s/%s status: %v", ns, name, err)
	}
	return p
}

func (c *cluster) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := c.Clientset.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
}

// gateway starts a gateway fed by the API server: the pod index and its
// watch, TokenReview, the policy watch writing status.
func (c *cluster) gateway(t *testing.T, names hosts) *gateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pods := identity.NewPods()
	go identity.Watch(ctx, c.Clientset, pods)
	eng := &policy.Engine{Pods: pods, Tokens: &identity.Tokens{Reviews: c.Clientset.AuthenticationV1().TokenReviews()},
		Pools: func(n string) bool { return n == "critical" }}
	w := &policy.Watcher{Client: c.dyn, Engine: eng}
	if err := w.Start(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := identity.WaitSynced(ctx, pods); err != nil {
		t.Fatal(err)
	}
	return startGateway(t, eng, names, nil)
}

// TestGatewayAgainstAPIServer runs the gateway against the real API
// server: two namespaces with different policies get different verdicts
// from the same replica on every listener; policies are changed and
// deleted while traffic runs; a client address changes owner; report
// mode; the status conditions.
func TestGatewayAgainstAPIServer(t *testing.T) {
	c := requireCluster(t)
	port := origin(t)
	names := hosts{"allowed.test": "127.0.0.1", "other.test": "127.0.0.1", "reported.test": "127.0.0.1"}
	g := c.gateway(t, names)
	shop := c.Namespace(t, "shop", nil)
	batch := c.Namespace(t, "batch", nil)
	at := func(h string) string { return h + ":" + port }

	c.apply(t, fmt.Sprintf(`
metadata: {name: only-allowed, namespace: %s}
spec:
  podSelector: {matchLabels: {app: web}}
  egress:
  - {action: allow, hosts: [allowed.test]}`, shop))
	c.apply(t, fmt.Sprintf(`
metadata: {name: no-allowed, namespace: %s}
spec:
  default: allow
  egress:
  - {name: not-that-one, action: deny, hosts: [allowed.test]}`, batch))
	_, webIP := c.pod(t, shop, "web", "", map[string]string{"app": "web"})
	_, jobIP := c.pod(t, batch, "job", "", nil)
	waitVerdict := func(t *testing.T, src, dest string, want int) time.Duration {
		t.Helper()
		return eventually(t, 10*time.Second, fmt.Sprintf("%s → %s answers %d", src, dest, want), func() bool {
			_, st := g.request(t, "http", src, dest, "")
			return st == want
		})
	}
	waitVerdict(t, webIP, at("other.test"), 403) // the pod and its policy are known

	t.Run("two-namespaces-two-verdicts-on-every-listener", func(t *testing.T) {
		for _, kind := range listenerKinds {
			t.Run(kind, func(t *testing.T) {
				for _, tc := range []struct {
					src, dest, ns, pod, policy string
					ok                         bool
				}{
					{webIP, "allowed.test", shop, "web", shop + "/only-allowed", true},
					{webIP, "other.test", shop, "web", shop + "/only-allowed", false},
					{jobIP, "allowed.test", batch, "job", batch + "/no-allowed", false},
					{jobIP, "other.test", batch, "job", batch + "/no-allowed", true},
				} {
					off := g.log.Len()
					body, st := g.request(t, kind, tc.src, at(tc.dest), "")
					if got := body == "hello from "+tc.dest; got != tc.ok {
						t.Errorf("%s (%s) → %s: through = %v (status %d), want %v", tc.pod, tc.src, tc.dest, got, st, tc.ok)
					}
					want := map[string]string{"identity": "address", "namespace": tc.ns, "pod": tc.pod, "policy": tc.policy}
					if !tc.ok {
						want["error"] = "http_request_denied"
					}
					wantFields(t, g.line(t, off, kind, tc.dest), want)
				}
			})
		}
		off := g.log.Len()
		g.request(t, "http", jobIP, at("allowed.test"), "")
		if r := g.line(t, off, "http", "allowed.test")["rule"]; r != "host allowed.test (EgressPolicy "+batch+"/no-allowed rule not-that-one)" {
			t.Errorf("deciding rule in the log: %v", r)
		}
	})

	t.Run("status-conditions", func(t *testing.T) {
		if cond := c.condition(t, shop, "only-allowed"); cond.Status != metav1.ConditionTrue || cond.Reason != policy.ReasonValid {
			t.Errorf("valid policy: %+v", cond)
		}
		c.apply(t, fmt.Sprintf(`
metadata: {name: broken, namespace: %s}
spec:
  podSelector: {matchLabels: {app: nobody}}
  pool: nowhere`, shop))
		cond := c.condition(t, shop, "broken")
		if cond.Status != metav1.ConditionFalse || cond.Reason != policy.ReasonUnknownPool || !strings.Contains(cond.Message, `pool "nowhere" does not exist`) {
			t.Errorf("invalid policy: %+v", cond)
		}
		c.remove(t, shop, "broken")
	})

	t.Run("change-while-traffic-runs-open-tunnels-keep-running", func(t *testing.T) {
		// A tunnel opened under the old policy.
		cc, err := dialFrom(webIP, g.http)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		cc.SetDeadline(time.Now().Add(30 * time.Second))
		fmt.Fprintf(cc, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", at("allowed.test"))
		tun := newTunnelClient(t, cc)
		c.apply(t, fmt.Sprintf(`
metadata: {name: only-allowed, namespace: %s}
spec:
  podSelector: {matchLabels: {app: web}}
  egress:
  - {action: allow, hosts: [other.test]}`, shop))
		took := waitVerdict(t, webIP, at("allowed.test"), 403)
		t.Logf("the policy change took effect after %s", took.Round(time.Millisecond))
		if _, st := g.request(t, "connect", webIP, at("other.test"), ""); st != 200 {
			t.Errorf("newly allowed destination: %d", st)
		}
		if !tun.get("allowed.test") {
			t.Error("the tunnel opened before the change stopped working")
		}
	})

	t.Run("deleted-policy-falls-to-the-cluster-default", func(t *testing.T) {
		c.apply(t, `
metadata: {name: default}
spec:
  egress:
  - {action: allow, hosts: [reported.test]}`)
		c.remove(t, shop, "only-allowed")
		waitVerdict(t, webIP, at("other.test"), 403)
		off := g.log.Len()
		if body, _ := g.request(t, "socks5", webIP, at("reported.test"), ""); body != "hello from reported.test" {
			t.Errorf("the cluster default's allow: %q", body)
		}
		wantFields(t, g.line(t, off, "socks5", "reported.test"), map[string]string{"policy": "ClusterEgressPolicy/default"})
	})

	t.Run("report-mode-logs-would-deny", func(t *testing.T) {
		c.apply(t, fmt.Sprintf(`
metadata: {name: dry-run, namespace: %s}
spec:
  mode: report
  podSelector: {matchLabels: {app: web}}
  default: allow
  egress:
  - {action: deny, hosts: [reported.test]}`, shop))
		if cond := c.condition(t, shop, "dry-run"); cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "report-only") {
			t.Errorf("condition %+v", cond)
		}
		var line map[string]any
		eventually(t, 10*time.Second, "would_deny logged", func() bool {
			off := g.log.Len()
			body, _ := g.request(t, "transparent", webIP, at("reported.test"), "")
			if body != "hello from reported.test" {
				t.Fatalf("a report-only deny refused: %q", body)
			}
			line = g.line(t, off, "transparent", "reported.test")
			return line["would_deny"] != nil
		})
		wantFields(t, line, map[string]string{"would_deny": "host reported.test (EgressPolicy " + shop + "/dry-run egress[0])", "error": ""})
		c.remove(t, shop, "dry-run")
	})

	t.Run("client-address-changes-owner", func(t *testing.T) {
		// The batch pod goes; a shop pod gets its address: it gets the shop
		// verdicts, never the batch pod's.
		c.deletePod(t, batch, "job")
		c.podAt(t, shop, "web-2", "", jobIP, map[string]string{"app": "web"})
		c.apply(t, fmt.Sprintf(`
metadata: {name: only-allowed, namespace: %s}
spec:
  podSelector: {matchLabels: {app: web}}
  egress:
  - {action: allow, hosts: [allowed.test]}`, shop))
		waitVerdict(t, jobIP, at("allowed.test"), 200)
		off := g.log.Len()
		g.request(t, "connect", jobIP, at("other.test"), "")
		wantFields(t, g.line(t, off, "connect", "other.test"), map[string]string{"namespace": shop, "pod": "web-2", "error": "http_request_denied"})

		// A second pod claims an address its owner still holds (the old
		// pod's end not seen yet): the address is nobody's, the cluster
		// default applies, never either pod's policy.
		c.apply(t, `
metadata: {name: default}
spec:
  egress:
  - {action: allow, hosts: [reported.test]}`)
		c.podAt(t, batch, "squatter", "", webIP, nil)
		eventually(t, 10*time.Second, "conflicted address gets the default", func() bool {
			off := g.log.Len()
			g.request(t, "http", webIP, at("reported.test"), "")
			return g.line(t, off, "http", "reported.test")["identity"] == "unknown"
		})
		if _, st := g.request(t, "http", webIP, at("allowed.test"), ""); st != 403 {
			t.Errorf("a conflicted address kept a pod's allow: %d", st)
		}
		c.deletePod(t, batch, "squatter")
		waitVerdict(t, webIP, at("allowed.test"), 200)
	})
}

// tunnelClient makes requests over one CONNECT tunnel.
type tunnelClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

// newTunnelClient reads the answer to the CONNECT sent on c.
func newTunnelClient(t *testing.T, c net.Conn) *tunnelClient {
	t.Helper()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := &tunnelClient{t: t, c: c, br: br}
	if !tc.get("allowed.test") {
		t.Fatal("nothing through the new tunnel")
	}
	return tc
}

// get asks for / over the tunnel (keep-alive) and reports whether the
// origin answered.
func (tc *tunnelClient) get(host string) bool {
	fmt.Fprintf(tc.c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	resp, err := http.ReadResponse(tc.br, nil)
	if err != nil {
		tc.t.Logf("over the tunnel: %v", err)
		return false
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b) == "hello from "+host
}

// TestTokenIdentity: a pod's projected service-account token (audience
// egret, bound to the pod), verified by the real TokenReview API, names
// the client whatever its address; a token from another pod's address, or
// for another audience, is refused.
func TestTokenIdentity(t *testing.T) {
	c := requireCluster(t)
	port := origin(t)
	g := c.gateway(t, hosts{"allowed.test": "127.0.0.1", "other.test": "127.0.0.1"})
	ns := c.Namespace(t, "tok", nil)
	ctx := context.Background()
	if _, err := c.Clientset.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "api"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.apply(t, fmt.Sprintf(`
metadata: {name: api, namespace: %s}
spec:
  podSelector: {matchLabels: {app: api}}
  egress:
  - {action: allow, hosts: [allowed.test]}`, ns))
	pod, podIP := c.pod(t, ns, "api", "api", map[string]string{"app": "api"})
	_, otherIP := c.pod(t, ns, "bystander", "", nil)
	token := func(aud string) string {
		tr, err := c.Clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "api", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			Audiences: []string{aud}, ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest: %v", err)
		}
		return tr.Status.Token
	}
	tok := token("egret")
	eventually(t, 10*time.Second, "pod indexed", func() bool { return g.eng.Pods.ByName(ns, "api") != nil })
	for _, kind := range []string{"http", "connect"} {
		t.Run(kind, func(t *testing.T) {
			for _, tc := range []struct {
				name, src, auth, dest string
				want                  int
				fields                map[string]string
			}{
				{"token-from-an-unknown-address", "127.0.9.9", "Bearer " + tok, "allowed.test", 200,
					map[string]string{"identity": "token", "namespace": ns, "pod": "api", "service_account": "api", "policy": ns + "/api"}},
				{"token-from-its-own-address", podIP, "Bearer " + tok, "other.test", 403,
					map[string]string{"identity": "token", "pod": "api", "error": "http_request_denied"}},
				{"token-from-another-pods-address", otherIP, "Bearer " + tok, "allowed.test", 403,
					map[string]string{"identity": "token", "error": "http_request_denied"}},
				{"token-for-another-audience", "127.0.9.9", "Bearer " + token("vault"), "allowed.test", 403,
					map[string]string{"identity": "token", "pod": ""}},
				{"no-token-unknown-address", "127.0.9.9", "", "allowed.test", 0,
					map[string]string{"identity": "unknown"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					off := g.log.Len()
					_, st := g.request(t, kind, tc.src, tc.dest+":"+port, tc.auth)
					if tc.want != 0 && st != tc.want {
						t.Errorf("status %d, want %d", st, tc.want)
					}
					line := g.line(t, off, kind, tc.dest)
					wantFields(t, line, tc.fields)
					if s := fmt.Sprint(line); strings.Contains(s, tok[:40]) {
						t.Errorf("the token reached the log: %s", s)
					}
				})
			}
		})
	}
}
