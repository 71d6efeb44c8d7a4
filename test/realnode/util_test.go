package realnode

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/echo"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/realnode"
)

// repoRoot is the module root (the tests run in test/realnode).
func repoRoot(t testing.TB) string {
	t.Helper()
	d, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// origin serves egret echo (the caller's address as JSON) in the outside
// namespace on :80 and, with a self-signed certificate, :443.
func origin(t testing.TB, out *realnode.Outside) {
	t.Helper()
	ln, err := out.Listen("tcp", out.IP+":80")
	if err != nil {
		t.Fatal(err)
	}
	srv := echo.Server()
	go srv.Serve(ln)
	cert, _ := testutil.SelfSigned(t, "", "origin.example")
	tln, err := out.Listen("tcp", out.IP+":443")
	if err != nil {
		t.Fatal(err)
	}
	tsrv := echo.Server()
	go tsrv.Serve(tls.NewListener(tln, &tls.Config{Certificates: []tls.Certificate{cert}}))
	t.Cleanup(func() { srv.Close(); tsrv.Close() })
}

// echoReply is what egret echo answers.
type echoReply struct {
	RemoteIP string `json:"remote_ip"`
	Method   string `json:"method"`
	Host     string `json:"host"`
	Path     string `json:"path"`
	TLS      bool   `json:"tls"`
}

// get runs /bin/get (a Go client reading the proxy variables) in a pod's
// container and returns the echo reply; it fails the test unless the
// status is 200.
func get(t testing.TB, n *realnode.Node, ns, pod, container string, args ...string) echoReply {
	t.Helper()
	cmd := append([]string{"exec", "-n", ns, pod, "-c", container, "--", "/bin/get"}, args...)
	out := n.KubectlT(t, cmd...)
	status, body, _ := strings.Cut(out, "\n")
	if status != "200" {
		t.Fatalf("get %v in %s/%s: %s", args, ns, pod, out)
	}
	var r echoReply
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("get %v: not an echo reply: %v\n%s", args, err, out)
	}
	return r
}

// getEventually is get retried for up to 30 s while the command fails: a
// Service's rules follow its endpoints by a kube-proxy sync.
func getEventually(t testing.TB, n *realnode.Node, ns, pod, container string, args ...string) echoReply {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cmd := append([]string{"exec", "-n", ns, pod, "-c", container, "--", "/bin/get"}, args...)
		out, err := n.KubectlCmd(context.Background(), cmd...).Output()
		if status, body, _ := strings.Cut(string(out), "\n"); err == nil && status == "200" {
			var r echoReply
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatalf("get %v: not an echo reply: %v\n%s", args, err, out)
			}
			return r
		}
		if time.Now().After(deadline) {
			return get(t, n, ns, pod, container, args...)
		}
		time.Sleep(time.Second)
	}
}

// namespace creates a namespace with labels; deleted when the test ends.
func namespace(t testing.TB, n *realnode.Node, name string, labels map[string]string) string {
	t.Helper()
	ctx := context.Background()
	_, err := n.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// clientPod creates a pod running the client image (sleep) and returns it
// once Ready.
func clientPod(t testing.TB, n *realnode.Node, ns, name string, annotations ...string) *corev1.Pod {
	t.Helper()
	return imagePod(t, n, ns, name, realnode.ClientImage, annotations...)
}

// imagePod creates a pod whose container app runs image (imported, never
// pulled) with sleep, and returns it once Ready.
func imagePod(t testing.TB, n *realnode.Node, ns, name, image string, annotations ...string) *corev1.Pod {
	t.Helper()
	ann := map[string]string{}
	for i := 0; i+1 < len(annotations); i += 2 {
		ann[annotations[i]] = annotations[i+1]
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "app", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"},
			}},
		},
	}
	// The webhook's Service may lag its Ready pods by a proxy sync.
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err = n.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create pod %s/%s: %v", ns, name, err)
		}
		t.Logf("create pod %s/%s: %v (retrying)", ns, name, err)
		time.Sleep(time.Second)
	}
	return waitPodReady(t, n, ns, name, 2*time.Minute)
}

// waitPodReady waits for the pod's Ready condition and returns it.
func waitPodReady(t testing.TB, n *realnode.Node, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var p *corev1.Pod
	var err error
	for time.Now().Before(deadline) {
		p, err = n.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return p
				}
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	desc, _ := n.KubectlCmd(context.Background(), "describe", "pod", "-n", ns, name).CombinedOutput()
	t.Fatalf("pod %s/%s not Ready after %s: %v\n%s", ns, name, timeout, err, desc)
	return nil
}

// noRestarts fails the test for every pod of ns matching selector ("" for
// all) that restarted a container, and when there is no such pod.
func noRestarts(t *testing.T, n *realnode.Node, ns, selector string) {
	t.Helper()
	pods, err := n.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatalf("no pods in %s matching %q", ns, selector)
	}
	for _, p := range pods.Items {
		if r := restarts(&p); r != 0 {
			t.Errorf("pod %s restarted %d times", p.Name, r)
		}
	}
}

// restarts sums the restart counts of a pod's containers (init too).
func restarts(p *corev1.Pod) int32 {
	var r int32
	for _, s := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		r += s.RestartCount
	}
	return r
}

// docBlock returns the shell block of a doc between
// "<!-- begin: NAME -->" and "<!-- end: NAME -->", without the fences.
func docBlock(t testing.TB, doc, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), doc))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- begin: " + regexp.QuoteMeta(name) + " -->\\s*```[a-z]*\\n(.*?)```\\s*<!-- end: " + regexp.QuoteMeta(name) + " -->")
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s has no block %q", doc, name)
	}
	return string(m[1])
}

// shell runs a doc's shell block under bash -euo pipefail in dir, with
// kubectl on PATH and KUBECONFIG set; it returns the output and the error.
func shell(t testing.TB, n *realnode.Node, dir, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.Kubeconfig, "PATH="+n.BinDir+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// podIPs lists the IPs of the Running pods in ns matching selector.
func podIPs(t testing.TB, n *realnode.Node, ns, selector string) []string {
	t.Helper()
	pods, err := n.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, p := range pods.Items {
		if p.Status.PodIP != "" {
			ips = append(ips, p.Status.PodIP)
		}
	}
	return ips
}

func envOf(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

var _ = net.ParseIP
var _ = fmt.Sprintf
