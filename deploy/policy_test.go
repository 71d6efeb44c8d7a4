package deploy

import (
	"bytes"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"egret.io/egret/internal/policy"
)

// TestPolicyComponent renders the default install with the policy
// component: the CRDs, the gateway's permissions and EGRET_POLICY=true on
// the gateway.
func TestPolicyComponent(t *testing.T) {
	objs, _ := render(t, "overlays/policy")
	for _, name := range []string{"egresspolicies.egret.io", "clusteregresspolicies.egret.io"} {
		if find(objs, "CustomResourceDefinition", name) == nil {
			t.Errorf("CRD %s not rendered", name)
		}
	}
	crb := find(objs, "ClusterRoleBinding", "egret-gateway-policy")
	if crb == nil {
		t.Fatal("no ClusterRoleBinding egret-gateway-policy")
	}
	subjects, _, _ := unstructured.NestedSlice(crb.Object, "subjects")
	if len(subjects) != 1 || subjects[0].(map[string]any)["name"] != "egret-gateway" || subjects[0].(map[string]any)["namespace"] != "egret-system" {
		t.Errorf("binding subjects %v, want the egret-gateway service account", subjects)
	}
	gw := find(objs, "Deployment", "egret-gateway")
	if gw == nil {
		t.Fatal("no gateway")
	}
	cs, _, _ := unstructured.NestedSlice(gw.Object, "spec", "template", "spec", "containers")
	env, _, _ := unstructured.NestedSlice(cs[0].(map[string]any), "env")
	if !slices.ContainsFunc(env, func(e any) bool {
		return e.(map[string]any)["name"] == "EGRET_POLICY" && e.(map[string]any)["value"] == "true"
	}) {
		t.Errorf("gateway env %v lacks EGRET_POLICY=true", env)
	}
	if v, _, _ := unstructured.NestedBool(gw.Object, "spec", "template", "spec", "automountServiceAccountToken"); !v {
		t.Error("the gateway pod does not mount its service-account token: it cannot reach the API server")
	}
	wh := find(objs, "Deployment", "egret-webhook")
	cs, _, _ = unstructured.NestedSlice(wh.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	if !slices.Contains(args, "--gateway-token") {
		t.Errorf("webhook args %q lack --gateway-token", args)
	}
	// The chart's copy of the CRDs is the component's.
	a, err := os.ReadFile("components/policy/crds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile("helm/egret/files/policy-crds.yaml"); err != nil || !bytes.Equal(a, b) {
		t.Errorf("helm/egret/files/policy-crds.yaml is not a copy of components/policy/crds.yaml (%v): cp the component's", err)
	}
}

// TestPolicyCRDMatchesTypes: every field of the Go types has its place in
// both CRDs' schema (a field the schema lacks would be pruned by the API
// server and silently ignored).
func TestPolicyCRDMatchesTypes(t *testing.T) {
	objs, _ := render(t, "overlays/policy")
	for _, name := range []string{"egresspolicies.egret.io", "clusteregresspolicies.egret.io"} {
		crd := find(objs, "CustomResourceDefinition", name)
		if crd == nil {
			t.Fatalf("no CRD %s", name)
		}
		vs, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		root, _, _ := unstructured.NestedMap(vs[0].(map[string]any), "schema", "openAPIV3Schema", "properties")
		check(t, name+" spec", reflect.TypeOf(policy.Spec{}), root["spec"].(map[string]any))
		check(t, name+" status", reflect.TypeOf(policy.Status{}), root["status"].(map[string]any))
	}
}

func check(t *testing.T, where string, typ reflect.Type, schema map[string]any) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
		if items, ok := schema["items"].(map[string]any); ok {
			schema = items
		}
	}
	if typ.Kind() != reflect.Struct || typ.PkgPath() != "egret.io/egret/internal/policy" {
		return
	}
	props, _ := schema["properties"].(map[string]any)
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		sub, ok := props[name].(map[string]any)
		if !ok {
			t.Errorf("%s: field %s (%s) is not in the CRD schema", where, name, f.Name)
			continue
		}
		check(t, where+"."+name, f.Type, sub)
	}
}

// TestPolicyCRDLimits: the CRDs' schema has the gateway's per-rule and
// per-policy limits (internal/policy, docs/policy.md "Limits"), so the API
// server refuses what the gateway would.
func TestPolicyCRDLimits(t *testing.T) {
	objs, _ := render(t, "overlays/policy")
	for _, name := range []string{"egresspolicies.egret.io", "clusteregresspolicies.egret.io"} {
		crd := find(objs, "CustomResourceDefinition", name)
		if crd == nil {
			t.Fatalf("no CRD %s", name)
		}
		vs, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		egress, _, _ := unstructured.NestedMap(vs[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "egress")
		if got, _, _ := unstructured.NestedInt64(egress, "maxItems"); got != policy.MaxRules {
			t.Errorf("%s: egress maxItems %d, want %d", name, got, policy.MaxRules)
		}
		for field, want := range map[string]int64{"hosts": policy.MaxEntries, "suffixes": policy.MaxEntries, "cidrs": policy.MaxEntries, "ports": policy.MaxPorts} {
			if got, _, _ := unstructured.NestedInt64(egress, "items", "properties", field, "maxItems"); got != want {
				t.Errorf("%s: egress[].%s maxItems %d, want %d", name, field, got, want)
			}
		}
	}
}
