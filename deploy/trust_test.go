package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestTrustComponent builds the default overlay with components/trust (as
// an overlay that wants it would) and checks the webhook's flags and RBAC.
func TestTrustComponent(t *testing.T) {
	abs, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel := func(p string) string {
		r, err := filepath.Rel(dir, filepath.Join(abs, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "resources:\n- " + rel("overlays/default") + "\ncomponents:\n- " + rel("components/trust") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, _ := render(t, dir)
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
