package netpol_test

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"egret.io/egret/internal/cli"
	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/netpol"
	"egret.io/egret/internal/testutil/kubetest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// docsNamespace is the example Namespace of docs/egress-policy.md.
func docsNamespace(t *testing.T) *corev1.Namespace {
	t.Helper()
	b, err := os.ReadFile("../../docs/egress-policy.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- example: [^>]*-->\n```yaml\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/egress-policy.md: no example block")
	}
	var ns corev1.Namespace
	if err := yaml.UnmarshalStrict(m[1], &ns); err != nil {
		t.Fatal(err)
	}
	return &ns
}

// TestPolicyFollowsCluster runs discovery and the policy writer against
// the real API server: the docs' namespace gets the policy, it allows
// exactly DNS, the gateway and the cluster; a node joining with a new pod
// range and address rewrites it; a policy of that name egret did not make
// is left alone; a hand edit is repaired; opting out deletes it; egret
// render networkpolicy prints the same object.
func TestPolicyFollowsCluster(t *testing.T) {
	c := kubetest.Require(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := c.Clientset
	sys := c.Namespace(t, "egret-system", nil)
	// The cluster DNS Service as kubeadm makes it, and egret's gateway Service.
	_, err := cs.CoreV1().Services("kube-system").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"k8s-app": "kube-dns"}, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Services(sys).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "egret-gateway"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app.kubernetes.io/name": "egret-gateway"}, Ports: []corev1.ServicePort{
			{Name: "proxy", Port: 3128, TargetPort: intstr.FromString("proxy")},
			{Name: "admin", Port: 9901, TargetPort: intstr.FromInt32(9901)}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	foreign := c.Namespace(t, "foreign", map[string]string{netpol.Label: netpol.Enabled})
	mine := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: netpol.Name},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}
	if _, err := cs.NetworkingV1().NetworkPolicies(foreign).Create(ctx, mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// egret render networkpolicy, before the manager starts: the command
	// sets the process-wide klog logger the manager's goroutines read.
	var rendered networkingv1.NetworkPolicy
	t.Run("render", func(t *testing.T) {
		var out, errb bytes.Buffer
		root := cli.NewRoot()
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs([]string{"render", "networkpolicy", docsNamespace(t).Name, "--kubeconfig", c.Kubeconfig, "--namespace", sys, "--cluster-domain", "cluster.local"})
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatalf("render: %v %s", err, errb.String())
		}
		if err := yaml.UnmarshalStrict(out.Bytes(), &rendered); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		r := *rendered.DeepCopy()
		// The rendered object applies as is (GitOps).
		r.Namespace = c.Namespace(t, "gitops", nil)
		if _, err := cs.NetworkingV1().NetworkPolicies(r.Namespace).Create(ctx, &r, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("apply the rendered policy: %v", err)
		}
	})

	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{Cache: discovery.CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	disc := &discovery.Controller{OwnNamespace: sys, Options: discovery.Options{ClusterDomain: "cluster.local"}}
	np := &netpol.Controller{Namespace: sys, Cluster: disc.Current, Interval: 500 * time.Millisecond}
	disc.OnChange = func(*discovery.Result) { np.Resync() }
	if err := disc.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := np.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			mcancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)

	nsObj := docsNamespace(t)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	app := nsObj.Name
	get := func(t *testing.T, what string, cond func(*networkingv1.NetworkPolicy, error) bool) *networkingv1.NetworkPolicy {
		t.Helper()
		var last *networkingv1.NetworkPolicy
		var lastErr error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			last, lastErr = cs.NetworkingV1().NetworkPolicies(app).Get(ctx, netpol.Name, metav1.GetOptions{})
			return cond(last, lastErr), nil
		})
		if err != nil {
			t.Fatalf("%s: %v (last %v)", what, err, lastErr)
		}
		return last
	}
	got := get(t, "first write", func(p *networkingv1.NetworkPolicy, err error) bool { return err == nil })

	// What the object stored by the API server allows, destination by
	// destination (the kubetest API server: Service range 10.96.0.0/16,
	// the kubernetes Service 10.96.0.1).
	src := netpol.Source{Namespace: app, Labels: map[string]string{"app": "checkout"}}
	pod := func(ns string, l map[string]string, proto corev1.Protocol, port int32, name string) netpol.Dest {
		return netpol.Dest{Pod: true, Namespace: ns, NamespaceLabels: map[string]string{netpol.NamespaceNameLabel: ns}, Labels: l,
			Protocol: proto, Port: port, PortName: name}
	}
	addr := func(a string, proto corev1.Protocol, port int32) netpol.Dest {
		return netpol.Dest{IP: netip.MustParseAddr(a), Protocol: proto, Port: port}
	}
	dns := map[string]string{"k8s-app": "kube-dns"}
	gw := map[string]string{"app.kubernetes.io/name": "egret-gateway"}
	table := []struct {
		name string
		d    netpol.Dest
		want bool
	}{
		{"DNS pods UDP 53", pod("kube-system", dns, corev1.ProtocolUDP, 53, "dns"), true},
		{"DNS pods TCP 53", pod("kube-system", dns, corev1.ProtocolTCP, 53, "dns-tcp"), true},
		{"gateway pods, its port named proxy", pod(sys, gw, corev1.ProtocolTCP, 3128, "proxy"), true},
		{"a pod of another namespace", pod("shop", map[string]string{"app": "db"}, corev1.ProtocolTCP, 5432, ""), true},
		{"the Service range", addr("10.96.40.2", corev1.ProtocolTCP, 80), true},
		{"the kubernetes Service", addr("10.96.0.1", corev1.ProtocolTCP, 443), true},
		{"outside HTTPS", addr("1.1.1.1", corev1.ProtocolTCP, 443), false},
		{"outside on the proxy port", addr("93.184.215.14", corev1.ProtocolTCP, 3128), false},
		{"public DNS", addr("8.8.8.8", corev1.ProtocolUDP, 53), false},
		{"cloud metadata", addr("169.254.169.254", corev1.ProtocolTCP, 80), false},
		{"the new node's pod range, before it joins", addr("10.253.4.9", corev1.ProtocolTCP, 80), false},
		{"the new node, before it joins", addr("198.51.100.44", corev1.ProtocolTCP, 10250), false},
	}
	check := func(t *testing.T, p *networkingv1.NetworkPolicy, flip map[string]bool) {
		t.Helper()
		for _, c := range table {
			want := c.want
			if flip[c.name] {
				want = !want
			}
			if got := netpol.Evaluate([]networkingv1.NetworkPolicy{*p}, src, c.d); got != want {
				t.Errorf("%s: allowed=%v, want %v", c.name, got, want)
			}
		}
	}
	check(t, got, nil)
	if a, b := mustYAML(t, rendered.Spec), mustYAML(t, got.Spec); !bytes.Equal(a, b) {
		t.Errorf("egret render networkpolicy:\n%s\nthe controller wrote:\n%s", a, b)
	}
	if got.Labels[discovery.ManagedByLabel] != "egret" || !strings.Contains(got.Annotations[netpol.SourcesAnnotation], "10.96.0.0/16=service-cidr") {
		t.Errorf("metadata: %v %v", got.Labels, got.Annotations)
	}

	t.Run("node-joins", func(t *testing.T) {
		name := "np-node-" + app
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: "10.253.4.0/24", PodCIDRs: []string{"10.253.4.0/24"}}}
		n, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.51.100.44"}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := get(t, "new ranges", func(p *networkingv1.NetworkPolicy, err error) bool {
			return err == nil && strings.Contains(p.Annotations[netpol.SourcesAnnotation], "198.51.100.44/32")
		})
		check(t, p, map[string]bool{"the new node's pod range, before it joins": true, "the new node, before it joins": true})
	})
	t.Run("hand-edit-repaired", func(t *testing.T) {
		p, err := cs.NetworkingV1().NetworkPolicies(app).Get(ctx, netpol.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.Egress = append(p.Spec.Egress, networkingv1.NetworkPolicyEgressRule{})
		if _, err := cs.NetworkingV1().NetworkPolicies(app).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		get(t, "repaired", func(p *networkingv1.NetworkPolicy, err error) bool { return err == nil && len(p.Spec.Egress) == 3 })
	})
	t.Run("foreign-left-alone", func(t *testing.T) {
		p, err := cs.NetworkingV1().NetworkPolicies(foreign).Get(ctx, netpol.Name, metav1.GetOptions{})
		if err != nil || len(p.Spec.Egress) != 0 || p.Labels[discovery.ManagedByLabel] != "" {
			t.Errorf("the user's policy changed: %v %+v", err, p)
		}
	})
	t.Run("opt-out-removes", func(t *testing.T) {
		n, err := cs.CoreV1().Namespaces().Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(n.Labels, netpol.Label)
		if _, err := cs.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		get(t, "deleted", func(_ *networkingv1.NetworkPolicy, err error) bool { return apierrors.IsNotFound(err) })
	})
}

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
