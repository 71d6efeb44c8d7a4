package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"egret.io/egret/internal/testutil/kubetest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

func mkNode(t *testing.T, c *kubetest.Cluster, name string, cidrs ...string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDRs: cidrs}}
	if len(cidrs) > 0 {
		n.Spec.PodCIDR = cidrs[0]
	}
	if _, err := c.Clientset.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = c.Clientset.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// setNodeIPs sets a Node's InternalIP addresses (its status, as the
// kubelet reports them).
func setNodeIPs(t *testing.T, c *kubetest.Cluster, name string, ips ...string) {
	t.Helper()
	ctx := context.Background()
	n, err := c.Clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.9"})
	if _, err := c.Clientset.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node %s status: %v", name, err)
	}
}

// makeCoreDNS creates kube-system/coredns with kubeadm's Corefile for
// domain (once per package run: the API server is shared).
func makeCoreDNS(t *testing.T, c *kubetest.Cluster, domain string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: CoreDNSNamespace, Name: CoreDNSConfigMap},
		Data: map[string]string{corefileKey: ".:53 {\n    errors\n    kubernetes " + domain + " in-addr.arpa ip6.arpa {\n       pods insecure\n    }\n    forward . /etc/resolv.conf\n}\n"}}
	_, err := c.Clientset.CoreV1().ConfigMaps(CoreDNSNamespace).Create(context.Background(), cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = c.Clientset.CoreV1().ConfigMaps(CoreDNSNamespace).Update(context.Background(), cm, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// uniq makes cluster-scoped names unique per run (the API server is shared
// by the tests of this package).
func uniq(s string) string { return fmt.Sprintf("%s-%d", s, os.Getpid()%100000) }

// TestDiscoverLiveCluster reads a real API server: its default ServiceCIDR,
// the kubernetes Service and EndpointSlice, Nodes' podCIDRs and additions.
func TestDiscoverLiveCluster(t *testing.T) {
	c := kubetest.Require(t)
	ctx := context.Background()
	ns := c.Namespace(t, "disc", nil)
	mkNode(t, c, uniq("live-a"), "10.250.0.0/24", "fd00:250::/64")
	mkNode(t, c, uniq("live-b"), "10.250.1.0/24", "fd00:250:0:1::/64")
	setNodeIPs(t, c, uniq("live-a"), "192.0.2.10", "2001:db8::10")
	setNodeIPs(t, c, uniq("live-b"), "192.0.2.11")
	makeCoreDNS(t, c, "cluster.local")
	_, err := c.Clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "adds"},
		Data:       map[string]string{AdditionsKey: "registry.corp\n.internal # office"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Discover(ctx, cl, nil, Options{Additions: ns + "/adds"})
	if err != nil {
		t.Fatal(err)
	}
	v := r.Value()
	for _, want := range []string{
		",10.96.0.0/16,", // the API server's --service-cluster-ip-range, as ServiceCIDR "kubernetes"
		",10.96.0.1,",    // the kubernetes Service ClusterIP
		",10.250.0.0/23,", ",fd00:250::/63,",
		",169.254.169.254,fd00:ec2::254,[fd00:ec2::254],registry.corp,.internal",
		",.svc,.svc.cluster.local,.cluster.local,",
		",192.0.2.10,192.0.2.11,2001:db8::10,[2001:db8::10],", // node InternalIPs, not the ExternalIP
	} {
		if !strings.Contains(","+v+",", want) {
			t.Errorf("NO_PROXY %s\nmissing %q", v, want)
		}
	}
	if len(r.Warnings) != 0 {
		t.Errorf("warnings: %v", r.Warnings)
	}
	var apiserver bool
	for _, e := range r.Entries {
		for _, s := range e.Sources {
			apiserver = apiserver || strings.HasPrefix(s, "endpointslice/default/kubernetes")
		}
	}
	if !apiserver {
		t.Errorf("no entry from the API server's EndpointSlice: %s", r.Explain())
	}
	if strings.Contains(v, "203.0.113.9") {
		t.Errorf("a node's ExternalIP is in NO_PROXY: %s", v)
	}
	if !strings.Contains(string(r.Explain()), `"cluster-domain:configmap/kube-system/coredns"`) {
		t.Errorf("cluster domain not from CoreDNS's Corefile: %s", r.Explain())
	}

	// The order: the kubelet's clusterDomain (configz) wins over the
	// Corefile, and a disagreement is a warning; a kubelet that may not be
	// asked (RBAC nodes/proxy) leaves the Corefile's.
	t.Run("cluster-domain-order", func(t *testing.T) {
		asked := []string{}
		kubelet := func(_ context.Context, node string) ([]byte, error) {
			asked = append(asked, node)
			return []byte(`{"kubeletconfig":{"clusterDomain":"k8s.corp"}}`), nil
		}
		d, warns := ReadClusterDomain(ctx, cl, kubelet, []string{"node-z", "node-a"})
		if d != (Domain{Name: "k8s.corp", Source: "kubelet/node-a"}) || len(asked) != 1 {
			t.Errorf("domain %+v, asked %v", d, asked)
		}
		if len(warns) != 1 || !strings.Contains(warns[0], "is not CoreDNS's cluster.local") {
			t.Errorf("warnings %q", warns)
		}
		forbidden := func(context.Context, string) ([]byte, error) {
			return nil, apierrors.NewForbidden(corev1.Resource("nodes/proxy"), "n", fmt.Errorf("no"))
		}
		if d, warns := ReadClusterDomain(ctx, cl, forbidden, []string{"n"}); d.Name != "cluster.local" || len(warns) != 0 {
			t.Errorf("forbidden kubelet: %+v %q", d, warns)
		}
		// (The API server's node proxy itself is not called here: it would
		// dial the node's address. The real-node harness has a kubelet.)
	})
}

func startManager(t *testing.T, c *kubetest.Cluster, ctl *Controller, leaseNS string) {
	t.Helper()
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Cache:                   CacheOptions(),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionID:        "egret-discovery",
		LeaderElectionNamespace: leaseNS,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

// waitConfigMap polls ns/egress-proxy-common until cond holds.
func waitConfigMap(t *testing.T, c *kubetest.Cluster, ns string, what string, cond func(cm *corev1.ConfigMap, err error) bool) *corev1.ConfigMap {
	t.Helper()
	var last *corev1.ConfigMap
	var lastErr error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		last, lastErr = c.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, ConfigMapName, metav1.GetOptions{})
		return cond(last, lastErr), nil
	})
	if err != nil {
		t.Fatalf("%s: %s: last %v %v", ns, what, last.Data["NO_PROXY"], lastErr)
	}
	return last
}

func has(cm *corev1.ConfigMap, entry string) bool {
	return cm != nil && strings.Contains(","+cm.Data["NO_PROXY"]+",", ","+entry+",")
}

// TestConfigMapFollowsCluster runs the controller against the real API
// server and changes the cluster under it: Nodes, ServiceCIDRs, namespace
// labels and annotations, the additions ConfigMap.
func TestConfigMapFollowsCluster(t *testing.T) {
	c := kubetest.Require(t)
	ctx := context.Background()
	sys := c.Namespace(t, "egret-system", nil)
	on := c.Namespace(t, "app-on", map[string]string{InjectLabel: InjectEnabled})
	off := c.Namespace(t, "app-off", nil)
	foreign := c.Namespace(t, "app-foreign", map[string]string{InjectLabel: InjectEnabled})
	// A ConfigMap of our name that the user made: never touched.
	_, err := c.Clientset.CoreV1().ConfigMaps(foreign).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName}, Data: map[string]string{"NO_PROXY": "mine"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mkNode(t, c, uniq("follow-a"), "10.251.0.0/24")

	changes := make(chan string, 100)
	ctl := &Controller{
		Options:  Options{Additions: sys + "/egret-noproxy"},
		OnChange: func(r *Result) { changes <- r.Value() },
	}
	startManager(t, c, ctl, sys)

	cm := waitConfigMap(t, c, on, "first write", func(cm *corev1.ConfigMap, err error) bool { return err == nil && has(cm, "10.251.0.0/24") })
	if cm.Data["no_proxy"] != cm.Data["NO_PROXY"] || cm.Labels[ManagedByLabel] != "egret" {
		t.Errorf("configmap: labels %v, no_proxy %q", cm.Labels, cm.Data["no_proxy"])
	}
	var explain Result
	if err := json.Unmarshal([]byte(cm.Data[ExplainKey]), &explain); err != nil || len(explain.Entries) == 0 {
		t.Errorf("explain.json: %v %s", err, cm.Data[ExplainKey])
	}
	if !has(cm, "10.96.0.0/16") || !has(cm, ".svc") || !has(cm, "kubernetes.default.svc.cluster.local") {
		t.Errorf("NO_PROXY lacks cluster entries: %s", cm.Data["NO_PROXY"])
	}
	if ctl.Current() == nil || ctl.Current().Value() == "" {
		t.Error("tracker has no current value")
	}

	t.Run("node-added", func(t *testing.T) {
		mkNode(t, c, uniq("follow-b"), "10.251.1.0/24")
		waitConfigMap(t, c, on, "aggregated pod range", func(cm *corev1.ConfigMap, err error) bool { return has(cm, "10.251.0.0/23") })
	})
	t.Run("node-addresses-follow", func(t *testing.T) {
		name := uniq("follow-a")
		setNodeIPs(t, c, name, "198.51.100.7")
		waitConfigMap(t, c, on, "node address", func(cm *corev1.ConfigMap, err error) bool { return has(cm, "198.51.100.7") })
		setNodeIPs(t, c, name, "198.51.100.8")
		waitConfigMap(t, c, on, "changed node address", func(cm *corev1.ConfigMap, err error) bool {
			return has(cm, "198.51.100.8") && !has(cm, "198.51.100.7")
		})
	})
	t.Run("servicecidr-added", func(t *testing.T) {
		name := uniq("extra")
		sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.252.0.0/16"}}}
		if _, err := c.Clientset.NetworkingV1().ServiceCIDRs().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitConfigMap(t, c, on, "new service range", func(cm *corev1.ConfigMap, err error) bool { return has(cm, "10.252.0.0/16") })
		if err := c.Clientset.NetworkingV1().ServiceCIDRs().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("cluster-additions", func(t *testing.T) {
		_, err := c.Clientset.CoreV1().ConfigMaps(sys).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "egret-noproxy", Labels: map[string]string{PartOfLabel: "egret"}},
			Data:       map[string]string{AdditionsKey: "registry.corp"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitConfigMap(t, c, on, "cluster addition", func(cm *corev1.ConfigMap, err error) bool { return has(cm, "registry.corp") })
	})
	t.Run("namespace-additions", func(t *testing.T) {
		nsObj, err := c.Clientset.CoreV1().Namespaces().Get(ctx, on, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nsObj.Annotations = map[string]string{NoProxyAnnotation: "db.payments.corp"}
		if _, err := c.Clientset.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitConfigMap(t, c, on, "namespace addition", func(cm *corev1.ConfigMap, err error) bool { return has(cm, "db.payments.corp") })
	})
	t.Run("drift-repaired", func(t *testing.T) {
		cm, err := c.Clientset.CoreV1().ConfigMaps(on).Get(ctx, ConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["NO_PROXY"] = "localhost"
		if _, err := c.Clientset.CoreV1().ConfigMaps(on).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// (follow-b went with its subtest: back to the one /24.)
		waitConfigMap(t, c, on, "repaired", func(cm *corev1.ConfigMap, err error) bool { return has(cm, "10.251.0.0/24") && has(cm, ".svc") })
	})
	t.Run("opted-out-namespace-has-none", func(t *testing.T) {
		if _, err := c.Clientset.CoreV1().ConfigMaps(off).Get(ctx, ConfigMapName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("configmap in unlabelled namespace: %v", err)
		}
		cm, err := c.Clientset.CoreV1().ConfigMaps(foreign).Get(ctx, ConfigMapName, metav1.GetOptions{})
		if err != nil || cm.Data["NO_PROXY"] != "mine" {
			t.Errorf("user's configmap changed: %v %v", cm.Data, err)
		}
	})
	t.Run("opt-out-removes", func(t *testing.T) {
		nsObj, err := c.Clientset.CoreV1().Namespaces().Get(ctx, on, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(nsObj.Labels, InjectLabel)
		if _, err := c.Clientset.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitConfigMap(t, c, on, "deleted", func(cm *corev1.ConfigMap, err error) bool { return apierrors.IsNotFound(err) })
	})
	if len(changes) == 0 {
		t.Error("OnChange never called")
	}
}
