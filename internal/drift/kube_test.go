package drift_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"egret.io/egret/internal/cli"
	"egret.io/egret/internal/drift"
	"egret.io/egret/internal/metrics"
	"egret.io/egret/internal/stamp"
	"egret.io/egret/internal/testutil/kubetest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// TestDriftAgainstAPIServer runs the drift controller against the real API
// server: a Deployment's pods injected with an old NO_PROXY are reported
// stale (ConfigMap, metrics, egret pods --stale, egret status), the
// restart waits while a PodDisruptionBudget allows no disruption, then
// patches the pod template as kubectl rollout restart does, waits for the
// rollout, and records it; a dry-run namespace is only reported.
func TestDriftAgainstAPIServer(t *testing.T) {
	c := kubetest.Require(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := c.Clientset
	sys := c.Namespace(t, "egret-system", nil)
	shop := c.Namespace(t, "shop", nil)
	trial := c.Namespace(t, "trial", nil)
	for ns, v := range map[string]string{shop: "true", trial: "dry-run"} {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations = map[string]string{drift.RestartAnnotation: v}
		if _, err := cs.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A Deployment at rest with two injected pods through its ReplicaSet
	// (the test API server runs no controllers: the test plays them).
	deploy := func(ns, name string) *appsv1.Deployment {
		t.Helper()
		labels := map[string]string{"app": name}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt32(1)), MaxSurge: ptr.To(intstr.FromInt32(0))}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}}}
		d, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d = atRest(t, ctx, c, d)
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-7d9f", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](2), Selector: d.Spec.Selector, Template: d.Spec.Template}}
		if rs, err = cs.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		old := stamp.Stamp{Mode: "sidecar", NoProxy: stamp.Hash("old"), Proxy: "http://127.0.0.1:3128", Image: "egret:1", ProxyUID: stamp.UID(15337)}
		for _, pn := range []string{name + "-7d9f-a", name + "-7d9f-b"} {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pn, Labels: map[string]string{"app": name, stamp.Label: "sidecar"},
				Annotations:     map[string]string{stamp.Annotation: old.Encode()},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
				Spec: d.Spec.Template.Spec}
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	deploy(shop, "web")
	deploy(trial, "api")
	// A fresh pod: injected with today's values.
	fresh := stamp.Stamp{Mode: "gateway", NoProxy: stamp.Hash("new"), Proxy: "http://gw:3128"}
	if _, err := cs.CoreV1().Pods(shop).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: shop, Name: "fresh",
		Labels: map[string]string{stamp.Label: "gateway"}, Annotations: map[string]string{stamp.Annotation: fresh.Encode()}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A PodDisruptionBudget that allows nothing yet.
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(shop).Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2, ObservedGeneration: pdb.Generation}
	if pdb, err = cs.PolicyV1().PodDisruptionBudgets(shop).UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	wm := metrics.NewWebhook()
	dc := &drift.Controller{Namespace: sys, Identity: "test-leader", Metrics: wm, Interval: 500 * time.Millisecond,
		Expect: func(_ context.Context, ns *corev1.Namespace, s stamp.Stamp, _ map[string]string) (stamp.Current, bool) {
			cur := stamp.Current{NoProxy: stamp.Hash("new")}
			if s.Mode != "gateway" {
				cur.Image = "egret:1"
			}
			return cur, true
		}}
	if err := dc.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	report := func(t *testing.T, what string, cond func(*drift.Report) bool) *drift.Report {
		t.Helper()
		var r *drift.Report
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			cm, err := cs.CoreV1().ConfigMaps(sys).Get(ctx, drift.ConfigMapName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if r, err = drift.ParseReport(cm.Data[drift.ReportKey]); err != nil {
				return false, err
			}
			return cond(r), nil
		})
		if err != nil {
			b, _ := json.MarshalIndent(r, "", " ")
			t.Fatalf("%s: %v\n%s", what, err, b)
		}
		return r
	}
	stateOf := func(r *drift.Report, kind, ns, name string) string {
		for _, w := range r.Workloads {
			if w.Ref == (drift.Ref{Kind: kind, Namespace: ns, Name: name}) {
				return w.State
			}
		}
		return "(absent)"
	}

	t.Run("stale-pods-reported", func(t *testing.T) {
		r := report(t, "report with four stale pods", func(r *drift.Report) bool { return r.StalePods == 4 })
		if r.InjectedPods < 5 || r.ByPart[stamp.PartNoProxy] != 4 || r.Leader != "test-leader" {
			t.Errorf("report %+v", r)
		}
		if got := stateOf(r, "Deployment", shop, "web"); !strings.HasPrefix(got, "blocked: PodDisruptionBudget web allows 0 disruption(s)") {
			t.Errorf("web: %q", got)
		}
		if got := stateOf(r, "Deployment", trial, "api"); got != drift.StateDryRun {
			t.Errorf("api: %q", got)
		}
		if v := gauge(t, wm.StalePods.WithLabelValues("noproxy")); v != 4 {
			t.Errorf("egret_webhook_stale_pods{part=noproxy} = %v", v)
		}
	})
	t.Run("egret-pods-stale", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := cli.Main([]string{"pods", "--stale", "--kubeconfig", c.Kubeconfig, "--egret-namespace", sys, "-n", shop, "-o", "json"}, nil, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		var l drift.PodList
		if err := json.Unmarshal(out.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Pods) != 2 || l.Pods[0].Name != "web-7d9f-a" || l.Pods[0].Workload != "Deployment/"+shop+"/web" || string(l.Pods[0].Stale[0]) != "noproxy" {
			t.Errorf("egret pods --stale: %s", out.String())
		}
		out.Reset()
		if code := cli.Main([]string{"pods", "--kubeconfig", c.Kubeconfig, "--egret-namespace", sys, "-n", shop}, nil, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		if !strings.Contains(out.String(), "web-7d9f-a  sidecar  noproxy  Deployment/"+shop+"/web") || !strings.Contains(out.String(), "fresh       gateway  -") {
			t.Errorf("egret pods:\n%s", out.String())
		}
	})
	t.Run("restart-waits-for-the-pdb-then-restarts", func(t *testing.T) {
		pdb.Status.DisruptionsAllowed = 1
		if _, err := cs.PolicyV1().PodDisruptionBudgets(shop).UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		r := report(t, "web restarting", func(r *drift.Report) bool { return r.Restarts.Current != nil })
		if r.Restarts.Current.Name != "web" || r.Restarts.Mode != drift.ModeOn {
			t.Errorf("restarts %+v", r.Restarts)
		}
		d, err := cs.AppsV1().Deployments(shop).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ann := d.Spec.Template.Annotations
		if _, err := time.Parse(time.RFC3339, ann[drift.RestartedAtAnnotation]); err != nil || ann[drift.RestartedForAnnotation] != "stale: noproxy" {
			t.Errorf("pod template annotations %v", ann)
		}
		// The dry-run namespace was never patched.
		a, _ := cs.AppsV1().Deployments(trial).Get(ctx, "api", metav1.GetOptions{})
		if _, ok := a.Spec.Template.Annotations[drift.RestartedAtAnnotation]; ok {
			t.Error("a dry-run workload was restarted")
		}
		if v := counter(t, wm.Restarts.WithLabelValues("restarted")); v != 1 {
			t.Errorf("restarted = %v", v)
		}
		if v := counter(t, wm.Restarts.WithLabelValues("dry_run")); v != 1 {
			t.Errorf("dry_run = %v", v)
		}
		if v := counter(t, wm.Restarts.WithLabelValues("blocked_pdb")); v != 1 {
			t.Errorf("blocked_pdb = %v", v)
		}
		// The rollout finishes (the test plays the Deployment controller):
		// the new pods carry today's stamp, the old go.
		atRest(t, ctx, c, d)
		for _, pn := range []string{"web-7d9f-a", "web-7d9f-b"} {
			if err := cs.CoreV1().Pods(shop).Delete(ctx, pn, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
		r = report(t, "restart recorded", func(r *drift.Report) bool { return r.Restarts.Current == nil && len(r.Restarts.Recent) == 1 })
		if rs := r.Restarts.Recent[0]; rs.Name != "web" || rs.Result != "restarted" || rs.Finished.IsZero() || r.StalePods != 2 {
			t.Errorf("report %+v", r)
		}
	})
	t.Run("egret-status", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := cli.Main([]string{"status", "--kubeconfig", c.Kubeconfig, "--egret-namespace", sys}, nil, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		for _, want := range []string{"stale pods:       2 (noproxy 2)", "Deployment/" + trial + "/api", "would restart (dry run)", "Deployment/" + shop + "/web  restarted"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("egret status lacks %q:\n%s", want, out.String())
			}
		}
	})
}

// atRest sets d's status as a Deployment controller would once its
// rollout finished.
func atRest(t *testing.T, ctx context.Context, c *kubetest.Cluster, d *appsv1.Deployment) *appsv1.Deployment {
	t.Helper()
	d, err := c.Clientset.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := *d.Spec.Replicas
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	d, err = c.Clientset.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
