package kubetest

import (
	"context"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestClusterServes checks that the harness gives a working admin client on
// the real API server, with the Service range it was configured with.
func TestClusterServes(t *testing.T) {
	c := Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := c.Clientset.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != KubeVersion {
		t.Errorf("server version = %s, want %s", v.GitVersion, KubeVersion)
	}
	ns := c.Namespace(t, "kubetest", map[string]string{"a": "b"})
	got, err := c.Clientset.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || got.Labels["a"] != "b" {
		t.Fatalf("namespace %s: %v %v", ns, got, err)
	}
	// The API server turns --service-cluster-ip-range into the default ServiceCIDR.
	var cidrs []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		sc, err := c.Clientset.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
		if err == nil {
			cidrs = sc.Spec.CIDRs
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(cidrs) != 1 || cidrs[0] != ServiceCIDR {
		t.Errorf("default ServiceCIDR = %v, want [%s]", cidrs, ServiceCIDR)
	}
	if _, err := os.Stat(c.Kubeconfig); err != nil {
		t.Errorf("kubeconfig: %v", err)
	}
}
