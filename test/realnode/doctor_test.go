package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/doctor"
	"egret.io/egret/internal/testutil/realnode"
)

// doctorReport is egret doctor -o json.
type doctorReport struct {
	Record doctor.Record    `json:"record"`
	Checks []doctor.Outcome `json:"checks"`
}

func parseDoctor(t testing.TB, out []byte) doctorReport {
	t.Helper()
	var r doctorReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("egret doctor -o json: %v\n%s", err, out)
	}
	return r
}

// check returns the first check named name (and target containing
// target, when given).
func (r doctorReport) check(name, target string) *doctor.Outcome {
	for i, c := range r.Checks {
		if c.Name == name && strings.Contains(c.Target, target) {
			return &r.Checks[i]
		}
	}
	return nil
}

func (r doctorReport) String() string {
	var b strings.Builder
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "%s %s %s [%s]: %s\n", c.Status, c.Name, c.Target, c.Path, c.Summary)
		for _, d := range c.Details {
			fmt.Fprintf(&b, "    %s\n", d)
		}
	}
	fmt.Fprintf(&b, "paths %v\n", r.Record.Paths)
	return b.String()
}

// egretPod runs the egret image's echo server as the application (a
// container that has egret for kubectl exec), with env.
func egretPod(t testing.TB, n *realnode.Node, ns, name string, labels map[string]string, env ...corev1.EnvVar) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name: "app", Image: realnode.EgretImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/egret", "echo", "--listen", ":8080"}, Env: env,
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			}},
		},
	}
	if _, err := n.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	return waitPodReady(t, n, ns, name, 2*time.Minute)
}

// runDoctor runs egret doctor -o json in a pod's app container.
func runDoctor(t testing.TB, n *realnode.Node, ns, pod string, args ...string) doctorReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := n.KubectlCmd(ctx, append([]string{"exec", "-n", ns, pod, "-c", "app", "--", "/egret", "doctor", "-o", "json"}, args...)...)
	out, err := cmd.Output() // exit 1 when a check fails
	if ee, ok := err.(interface{ ExitCode() int }); err != nil && (!ok || ee.ExitCode() != 1) {
		t.Fatalf("egret doctor in %s/%s: %v\n%s", ns, pod, err, out)
	}
	return parseDoctor(t, out)
}

// egret doctor on the real node, inside a pod (kubectl exec) and through
// kubectl debug --target (docs/doctor.md's command), on a healthy injected
// pod and on two planted faults: a hand-written NO_PROXY without the
// cluster's names, and a proxy variable naming a gateway with no replica.
func (in *install) doctor(t *testing.T) {
	n := in.n
	ns := namespace(t, n, "doc", map[string]string{"egret.io/inject": "enabled"})
	applyYAML(t, n, `apiVersion: egret.io/v1alpha1
kind: EgressPolicy
metadata: {name: app, namespace: `+ns+`}
spec:
  default: deny
  egress:
  - {action: allow, hosts: [origin.example]}
`)
	n.KubectlT(t, "wait", "-n", ns, "--for=condition=Accepted", "egresspolicy/app", "--timeout=1m")
	egretPod(t, n, ns, "app", map[string]string{"app": "echo"})
	n.KubectlT(t, "expose", "pod", "-n", ns, "app", "--name=echo", "--port=8080")
	// The four paths: a Service (direct), the node's address (outside
	// the cluster's Services, covered by NO_PROXY: direct), the echo
	// origin (through the gateway), and a destination the namespace's
	// policy refuses.
	args := []string{"--internal", "http://echo." + ns + ".svc:8080/", "--intranet", realnode.NodeIP + ":16443",
		"--echo", "http://origin.example/", "--forbidden", "http://blocked.example/"}
	var r doctorReport
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = runDoctor(t, n, ns, "app", args...)
		if r.Record.Paths[doctor.PathServiceDirect] == "pass" || time.Now().After(deadline) {
			break // the Service's rules follow its endpoints by a kube-proxy sync
		}
		time.Sleep(2 * time.Second)
	}
	for _, p := range []string{doctor.PathServiceDirect, doctor.PathIntranetDirect, doctor.PathOutsideViaProxy} {
		if r.Record.Paths[p] != "pass" {
			t.Errorf("kubectl exec, healthy pod: path %s is %s, want pass\n%s", p, r.Record.Paths[p], r)
		}
	}
	// This node's CNI (bridge) enforces no NetworkPolicy: the forbidden
	// destination is refused by the gateway (403) but reachable directly,
	// and the doctor must say so.
	if c := r.check("forbidden", "blocked.example"); c == nil || c.Status != doctor.Fail ||
		!strings.Contains(strings.Join(append(c.Details, c.Summary), " "), "direct") {
		t.Errorf("forbidden path: want a failure naming the direct path (no NetworkPolicy here)\n%s", r)
	} else if !strings.Contains(strings.Join(c.Details, " "), "403") {
		t.Errorf("forbidden path: the gateway's 403 is not reported\n%s", r)
	}
	if r.Record.Pod.Name != "app" || r.Record.Pod.Namespace != ns {
		t.Errorf("record names pod %s/%s", r.Record.Pod.Namespace, r.Record.Pod.Name)
	}

	// kubectl debug --target with the egret image, as docs/doctor.md
	// writes it, adopting the application (a busybox pod, PID 1 sleep).
	clientPod(t, n, ns, "client")
	custom := filepath.Join(t.TempDir(), "root.json")
	if err := os.WriteFile(custom, []byte(`{"securityContext": {"runAsUser": 0, "runAsNonRoot": false}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	n.KubectlT(t, "debug", "-n", ns, "pod/client", "--image="+realnode.EgretImage, "--target=app", "-c", "doctor",
		"--profile=general", "--custom="+custom, "--", "/egret", "doctor", "--app-pid", "1", "-o", "json",
		"--echo", "http://origin.example/", "--internal", "http://echo."+ns+".svc:8080/")
	deadline = time.Now().Add(2 * time.Minute)
	for {
		p, err := n.Client.CoreV1().Pods(ns).Get(context.Background(), "client", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		done := false
		for _, s := range p.Status.EphemeralContainerStatuses {
			if s.Name == "doctor" && s.State.Terminated != nil {
				done = true
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the debug container did not finish\n%s", n.KubectlT(t, "describe", "pod", "-n", ns, "client"))
		}
		time.Sleep(time.Second)
	}
	r = parseDoctor(t, []byte(n.KubectlT(t, "logs", "-n", ns, "client", "-c", "doctor")))
	if r.Record.Paths[doctor.PathOutsideViaProxy] != "pass" {
		t.Errorf("kubectl debug --target: outside-via-proxy is %s, want pass\n%s", r.Record.Paths[doctor.PathOutsideViaProxy], r)
	}
	// The adopted application's runtimes are go and busybox wget (from its
	// PATH, in its root): the Service is reached directly, but wget reads
	// no CIDR in NO_PROXY, so the ClusterIP literal would go to the
	// gateway, which this namespace's policy refuses: a real hole the
	// doctor must name (service-direct fails for wget alone).
	if c := r.check("direct", "echo."+ns); c == nil || c.Status != doctor.Pass {
		t.Errorf("kubectl debug --target: the Service is not reached directly\n%s", r)
	}
	if c := r.check("runtimes", "echo."+ns); c == nil || c.Status != doctor.Fail ||
		!strings.Contains(c.Summary, "wget") || strings.Contains(c.Summary, "go,") || !strings.Contains(strings.Join(c.Details, " "), "wget has no CIDR support") {
		t.Errorf("kubectl debug --target: want the runtimes check to fail for wget alone (no CIDR support)\n%s", r)
	}
	if c := r.check("pid1-env", ""); c == nil || c.Status != doctor.Pass {
		t.Errorf("kubectl debug --target: pid1-env not pass (the adopted app's environment)\n%s", r)
	}

	// Planted faults, in a namespace egret does not inject: the variables
	// are the pod's own.
	manual := namespace(t, n, "doc-manual", nil)
	gw := "http://egret-gateway.egret-system.svc:3128"
	proxyEnv := func(proxy, noProxy string) []corev1.EnvVar {
		var env []corev1.EnvVar
		for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
			env = append(env, corev1.EnvVar{Name: k, Value: proxy})
		}
		return append(env, corev1.EnvVar{Name: "NO_PROXY", Value: noProxy}, corev1.EnvVar{Name: "no_proxy", Value: noProxy})
	}
	// 1. NO_PROXY without .svc: the Service name would go to the gateway.
	egretPod(t, n, manual, "holes", nil, proxyEnv(gw, "localhost,127.0.0.1")...)
	r = runDoctor(t, n, manual, "holes", "--internal", "http://echo."+ns+".svc:8080/", "--echo", "http://origin.example/")
	if c := r.check("no-proxy", ""); c == nil || c.Status != doctor.Fail || !strings.Contains(c.Summary+c.Advice, ".svc") {
		t.Errorf("missing NO_PROXY entry: the no-proxy check does not fail naming .svc\n%s", r)
	}
	if r.Record.Paths[doctor.PathServiceDirect] == "pass" {
		t.Errorf("missing NO_PROXY entry: the service-direct path passes\n%s", r)
	}
	// 2. A dead gateway: a Service with no endpoints.
	n.KubectlT(t, "create", "service", "clusterip", "-n", manual, "deadgw", "--tcp=3128:3128")
	egretPod(t, n, manual, "dead", nil, proxyEnv("http://deadgw."+manual+".svc:3128", ".svc,.cluster.local,10.96.0.0/16,10.88.0.0/16")...)
	r = runDoctor(t, n, manual, "dead", "--echo", "http://origin.example/")
	if c := r.check("proxy", ""); c == nil || c.Status != doctor.Fail {
		t.Errorf("dead gateway: the proxy check does not fail\n%s", r)
	} else if s := strings.ToLower(c.Summary + strings.Join(c.Details, " ")); !strings.Contains(s, "refused") && !strings.Contains(s, "timeout") && !strings.Contains(s, "timed out") {
		t.Errorf("dead gateway: the proxy check does not say refused or timeout: %s", c.Summary)
	}
	if r.Record.Paths[doctor.PathOutsideViaProxy] != "fail" {
		t.Errorf("dead gateway: outside-via-proxy is %s, want fail\n%s", r.Record.Paths[doctor.PathOutsideViaProxy], r)
	}
	_ = gw
}
