package realnode

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/testutil/realnode"
)

// noProxyOf reads NO_PROXY from the egress-proxy-common ConfigMap of ns
// ("" while it does not exist).
func noProxyOf(t testing.TB, n *realnode.Node, ns string) []string {
	t.Helper()
	cm, err := n.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), "egress-proxy-common", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	if cm.Data["NO_PROXY"] != cm.Data["no_proxy"] {
		t.Errorf("NO_PROXY and no_proxy differ in %s", ns)
	}
	return strings.Split(cm.Data["NO_PROXY"], ",")
}

// waitNoProxy waits until ok holds for ns's NO_PROXY and returns it.
func waitNoProxy(t testing.TB, n *realnode.Node, ns, what string, ok func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		np := noProxyOf(t, n, ns)
		if ok(np) {
			return np
		}
		if time.Now().After(deadline) {
			t.Fatalf("egress-proxy-common in %s: %s not seen after 1m; NO_PROXY=%s", ns, what, strings.Join(np, ","))
		}
		time.Sleep(time.Second)
	}
}

// Discovery on a real cluster: the ConfigMap the webhook writes into an
// opted-in namespace holds the cluster's real Service range (the API
// server's ServiceCIDR kubernetes), the pod range the controller-manager
// gave the node, and the node's InternalIP; and follows a change: a second
// ServiceCIDR (Kubernetes 1.33+: a new Service range is an object) joins
// NO_PROXY, and leaves it when deleted. Pods created after the change are
// injected with it.
func (in *install) discovery(t *testing.T) {
	n := in.n
	ns := namespace(t, n, "disc", map[string]string{"egret.io/inject": "enabled"})
	node, err := n.Client.CoreV1().Nodes().Get(context.Background(), realnode.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(node.Spec.PodCIDRs, realnode.PodCIDR) {
		t.Fatalf("the node's podCIDRs are %v, want %s (controller-manager --allocate-node-cidrs)", node.Spec.PodCIDRs, realnode.PodCIDR)
	}
	want := []string{realnode.ServiceCIDR, realnode.PodCIDR, realnode.NodeIP, ".svc", ".cluster.local"}
	waitNoProxy(t, n, ns, strings.Join(want, ", "), func(np []string) bool {
		for _, w := range want {
			if !slices.Contains(np, w) {
				return false
			}
		}
		return true
	})

	const extra = "10.97.0.0/24"
	applyYAML(t, n, `apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {name: egret-extra}
spec: {cidrs: ["`+extra+`"]}
`)
	t.Cleanup(func() {
		n.KubectlCmd(context.Background(), "delete", "servicecidr", "egret-extra", "--ignore-not-found").Run()
	})
	start := time.Now()
	waitNoProxy(t, n, ns, "the new ServiceCIDR "+extra, func(np []string) bool { return slices.Contains(np, extra) })
	t.Logf("a new ServiceCIDR reached NO_PROXY in %s", time.Since(start).Round(100*time.Millisecond))
	p := clientPod(t, n, ns, "after-cidr")
	if v, _ := envOf(p.Spec.Containers[0], "NO_PROXY"); !slices.Contains(strings.Split(v, ","), extra) {
		t.Errorf("a pod created after the new ServiceCIDR lacks it: NO_PROXY=%s", v)
	}
	n.KubectlT(t, "delete", "servicecidr", "egret-extra", "--wait=true", "--timeout=1m")
	waitNoProxy(t, n, ns, "the deleted ServiceCIDR gone", func(np []string) bool { return len(np) > 1 && !slices.Contains(np, extra) })
}
