package deploy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestTrustComponent: overlays/trust (the default install plus
// components/trust) gives the webhook its CA flags and the trust RBAC.
func TestTrustComponent(t *testing.T) {
	objs, _ := render(t, "overlays/trust")
	d := find(objs, "Deployment", "egret-webhook")
	if d == nil {
		t.Fatal("no webhook Deployment")
	}
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	all := strings.Join(args, " ")
	for _, want := range []string{"webhook", "--ca-configmap=egret-system/corp-ca", "--ca-key=trust-bundle.pem"} {
		if !strings.Contains(all, want) {
			t.Errorf("webhook args lack %s: %s", want, all)
		}
	}
	if find(objs, "ClusterRole", "egret-webhook-trust") == nil || find(objs, "ClusterRoleBinding", "egret-webhook-trust") == nil {
		t.Error("trust RBAC missing")
	}
}
