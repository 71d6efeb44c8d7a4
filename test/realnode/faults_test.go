package realnode

import (
	"bufio"
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/testutil/realnode"
)

// traffic runs /bin/get against url every 100 ms in a pod's app container
// until stop is called, which returns the status lines seen.
func traffic(t testing.TB, n *realnode.Node, ns, pod, url string) (stop func() []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	script := `while [ ! -e /tmp/stop ]; do /bin/get ` + url + ` | head -1; sleep 0.1; done; rm -f /tmp/stop`
	cmd := n.KubectlCmd(ctx, "exec", "-n", ns, pod, "-c", "app", "--", "sh", "-c", script)
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	}()
	go func() { cmd.Wait(); pw.Close() }()
	return func() []string {
		n.KubectlCmd(context.Background(), "exec", "-n", ns, pod, "-c", "app", "--", "touch", "/tmp/stop").Run()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cancel()
			<-done
		}
		cancel()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
}

// failures counts the lines that are not 200.
func failures(lines []string) (bad []string) {
	for _, l := range lines {
		if l != "200" {
			bad = append(bad, l)
		}
	}
	return bad
}

// A gateway replica deleted (gracefully, as a rollout or a node drain
// does) while a client sends a request every 100 ms: the replica fails
// its readiness, keeps accepting for its drain period (5 s) while the
// Service's endpoints drop it, and finishes what it holds; the client sees
// no error, and the other replicas answer.
func (in *install) gatewayDeleted(t *testing.T) {
	n := in.n
	ns := namespace(t, n, "flt", map[string]string{"egret.io/inject": "enabled"})
	clientPod(t, n, ns, "client")
	get(t, n, ns, "client", "app", "http://origin.example/")
	pods, err := n.Client.CoreV1().Pods("egret-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=egret-gateway"})
	if err != nil || len(pods.Items) < 2 {
		t.Fatalf("gateway pods: %v (%d)", err, len(pods.Items))
	}
	victim := pods.Items[0]
	stop := traffic(t, n, ns, "client", "http://origin.example/")
	time.Sleep(3 * time.Second)
	start := time.Now()
	n.KubectlT(t, "delete", "pod", "-n", "egret-system", victim.Name, "--wait=true", "--timeout=90s")
	t.Logf("gateway pod %s deleted in %s", victim.Name, time.Since(start).Round(100*time.Millisecond))
	time.Sleep(3 * time.Second)
	lines := stop()
	if len(lines) < 20 {
		t.Fatalf("only %d requests made during the deletion: %q", len(lines), lines)
	}
	if bad := failures(lines); len(bad) > 0 {
		t.Errorf("%d of %d requests failed while gateway pod %s was deleted: %q", len(bad), len(lines), victim.Name, bad)
	}
	t.Logf("%d requests, all 200, while a gateway replica went away", len(lines))
	for range 5 {
		if r := get(t, n, ns, "client", "app", "http://origin.example/"); r.RemoteIP == victim.Status.PodIP {
			t.Errorf("the deleted gateway %s still answered", victim.Status.PodIP)
		}
	}
	in.available(t, in.image)
}

// The webhook down (scaled to zero): pod creation in an opted-in namespace
// is refused (inject.egret.io's failurePolicy Fail, docs/kubernetes.md's
// EgretWebhookDown), a pod that opts in by label elsewhere is created
// without injection (failurePolicy Ignore); back up, injection resumes.
func (in *install) webhookDown(t *testing.T) {
	n := in.n
	ns := namespace(t, n, "wh-down", map[string]string{"egret.io/inject": "enabled"})
	other := namespace(t, n, "wh-other", nil)
	n.KubectlT(t, "scale", "-n", "egret-system", "deployment/egret-webhook", "--replicas=0")
	defer func() {
		n.KubectlT(t, "scale", "-n", "egret-system", "deployment/egret-webhook", "--replicas=2")
		in.available(t, in.image)
	}()
	n.KubectlT(t, "wait", "-n", "egret-system", "--for=delete", "pod", "-l", "app.kubernetes.io/name=egret-webhook", "--timeout=2m")
	mk := func(ns, name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{
				Name: "app", Image: realnode.ClientImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}}}
	}
	_, err := n.Client.CoreV1().Pods(ns).Create(context.Background(), mk(ns, "refused", nil), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "inject.egret.io") {
		t.Errorf("opted-in namespace, webhook down: %v, want a refusal by inject.egret.io (failurePolicy Fail)", err)
	} else {
		t.Logf("refused as documented: %v", err)
	}
	p, err := n.Client.CoreV1().Pods(other).Create(context.Background(), mk(other, "labelled", map[string]string{"egret.io/inject": "true"}), metav1.CreateOptions{})
	if err != nil {
		t.Errorf("labelled pod elsewhere, webhook down: %v, want it created (failurePolicy Ignore)", err)
	} else if _, ok := envOf(p.Spec.Containers[0], "HTTP_PROXY"); ok {
		t.Errorf("labelled pod created while the webhook is down has HTTP_PROXY")
	}
	n.KubectlT(t, "scale", "-n", "egret-system", "deployment/egret-webhook", "--replicas=2")
	in.available(t, in.image)
	after := clientPod(t, n, ns, "after") // retries while the Service catches up
	if v, _ := envOf(after.Spec.Containers[0], "HTTP_PROXY"); !strings.Contains(v, "egret-gateway") {
		t.Errorf("webhook back: pod not injected (HTTP_PROXY=%q)", v)
	}
}

// A node drain the documented way (kubectl drain --ignore-daemonsets
// --delete-emptydir-data). On a single node every evicted replica's
// successor stays Pending (the node is cordoned), so the PodDisruptionBudgets
// (maxUnavailable 1) let one gateway and one webhook go and refuse the
// rest: the drain does not finish, and the remaining replicas keep serving.
// Uncordoned, the Deployments are Available again.
func (in *install) drain(t *testing.T) {
	n := in.n
	// Bare pods of earlier subtests would stop drain before it evicts
	// anything (it wants --force for them): wait until they are gone.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		pods, err := n.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		left := 0
		for _, p := range pods.Items {
			if p.Namespace != "egret-system" {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods of earlier subtests still there", left)
		}
		time.Sleep(time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	defer func() {
		n.KubectlT(t, "uncordon", realnode.NodeName)
		in.available(t, in.image)
	}()
	out, err := n.KubectlCmd(ctx, "drain", realnode.NodeName, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=15s").CombinedOutput()
	t.Logf("kubectl drain: %v\n%s", err, out)
	if err == nil {
		t.Fatalf("drain of the only node finished: the PodDisruptionBudgets did not hold")
	}
	if !strings.Contains(string(out), "disruption budget") {
		t.Errorf("drain did not stop at a PodDisruptionBudget:\n%s", out)
	}
	for _, app := range []string{"egret-gateway", "egret-webhook"} {
		pods, err := n.Client.CoreV1().Pods("egret-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
		if err != nil {
			t.Fatal(err)
		}
		ready, pending := 0, 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Status.Phase == corev1.PodPending {
				pending++
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		t.Logf("%s during the drain: %d ready, %d pending", app, ready, pending)
		if want := map[string]int{"egret-gateway": 2, "egret-webhook": 1}[app]; ready < want {
			t.Errorf("%s: %d ready during the drain, want at least %d", app, ready, want)
		}
	}
}
