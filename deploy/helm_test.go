package deploy

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kubetest"
)

const chart = "helm/egret"

// helm runs the helm binary of scripts/deps/50-deploy-tools.sh.
func helm(t *testing.T, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(testutil.CachedTool(t, "helm"), args...)
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "HELM_CACHE_HOME=" + t.TempDir(), "HELM_CONFIG_HOME=" + t.TempDir(), "HELM_DATA_HOME=" + t.TempDir()}, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stderr.String(), out)
	}
	return out
}

func decodeAll(t *testing.T, y []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(y), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := d.Decode(&u.Object); err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func helmTemplate(t *testing.T, namespace string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "egret", chart, "--namespace", namespace, "--kube-version", "1.37.2"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return decodeAll(t, helm(t, nil, args...))
}

// helmOnlyLabels are the recommended labels only the chart sets (a
// release's name and version; kustomize has neither).
var helmOnlyLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// normalize drops what only one tool adds (helm's chart, managed-by,
// instance and version labels, the keep annotation; kustomize's Namespace
// object) and round-trips through JSON.
func normalize(t *testing.T, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		o = o.DeepCopy()
		l := o.GetLabels()
		for _, k := range helmOnlyLabels {
			delete(l, k)
		}
		o.SetLabels(l)
		if tl, ok, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels"); ok {
			for _, k := range helmOnlyLabels {
				delete(tl, k)
			}
			_ = unstructured.SetNestedStringMap(o.Object, tl, "spec", "template", "metadata", "labels")
		}
		// keep is helm's (crds.keep): kubectl delete -k ignores it.
		if a := o.GetAnnotations(); a != nil {
			delete(a, "helm.sh/resource-policy")
			if len(a) == 0 {
				a = nil
			}
			o.SetAnnotations(a)
		}
		j, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatal(err)
		}
		out[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = u
	}
	return out
}

// TestHelmMatchesKustomize: the chart with the values of each overlay
// renders the same objects as that overlay (egret's Namespace aside: helm
// installs into the release namespace).
func TestHelmMatchesKustomize(t *testing.T) {
	for _, tc := range []struct {
		overlay string
		set     []string
	}{
		{"overlays/default", nil},
		{"overlays/monitoring", []string{"monitoring.enabled=true"}},
		{"overlays/cert-manager", []string{"certManager.enabled=true"}},
		{"overlays/trust", []string{"trust.enabled=true"}},
		{"overlays/policy", []string{"policy.enabled=true"}},
		{"overlays/intercept", []string{"policy.enabled=true", "trust.enabled=true", "intercept.enabled=true", "intercept.secrets={shop/openai}"}},
	} {
		t.Run(strings.ReplaceAll(tc.overlay, "/", "-"), func(t *testing.T) {
			k, _ := render(t, tc.overlay)
			h := helmTemplate(t, "egret-system", tc.set...)
			kn, hn := normalize(t, k), normalize(t, h)
			for key, ko := range kn {
				ho, ok := hn[key]
				if !ok {
					t.Errorf("%s: kustomize renders it, helm does not", key)
					continue
				}
				if !equality.Semantic.DeepEqual(ko.Object, ho.Object) {
					ky, _ := ko.MarshalJSON()
					hy, _ := ho.MarshalJSON()
					t.Errorf("%s differs:\nkustomize %s\nhelm      %s", key, ky, hy)
				}
			}
			for key := range hn {
				if _, ok := kn[key]; !ok {
					t.Errorf("%s: helm renders it, kustomize does not", key)
				}
			}
		})
	}
}

// TestHelmValues: lint, and every value reaches the objects: another
// namespace everywhere, images (also the sidecar and iptables images passed
// in args), mode, validation, upstream Secret, resources.
func TestHelmValues(t *testing.T) {
	helm(t, nil, "lint", "--strict", chart)
	helm(t, nil, "lint", "--strict", chart, "--set", "monitoring.enabled=true,certManager.enabled=true,mode=transparent,validation=enforce")
	objs := helmTemplate(t, "proxy-infra", "image.registry=registry.corp.example", "image.repository=mirror/egret", "image.tag=9.9.9",
		"image.iptables=registry.corp.example/mirror/egret-iptables:9.9.9", "mode=sidecar", "validation=enforce",
		"sidecar.upstreamSecret=corp-upstream", "gateway.upstreamSecret=corp-gw", "webhook.resources.limits.memory=300Mi",
		"certManager.enabled=true", "monitoring.enabled=true")
	var all bytes.Buffer
	for _, o := range objs {
		j, _ := o.MarshalJSON()
		all.Write(j)
	}
	s := all.String()
	if strings.Contains(s, "egret-system") || strings.Contains(s, "ghcr.io") {
		t.Errorf("egret-system or ghcr.io in a rendering for proxy-infra from another registry")
	}
	wc := container(t, objs, "egret-webhook")
	args, _ := podArgs(wc, "proxy-infra")
	for _, want := range []string{"--mode=sidecar", "--validation=enforce", "--image=registry.corp.example/mirror/egret:9.9.9",
		"--iptables-image=registry.corp.example/mirror/egret-iptables:9.9.9", "--upstream-secret=corp-upstream",
		"--gateway-url=http://egret-gateway.proxy-infra.svc:3128", "--additions=proxy-infra/egret-noproxy", "--cert-dir=/tls"} {
		if !slices.Contains(args, want) {
			t.Errorf("webhook args %q lack %s", args, want)
		}
	}
	if wc.Resources.Limits.Memory().String() != "300Mi" {
		t.Errorf("webhook resources %v", wc.Resources)
	}
	if gc := container(t, objs, "egret-gateway"); gc.Image != "registry.corp.example/mirror/egret:9.9.9" {
		t.Errorf("gateway image %s", gc.Image)
	}
	if src := podSpec(t, objs, "egret-gateway").Volumes[1].Projected.Sources[0].Secret; src == nil || src.Name != "corp-gw" {
		t.Errorf("gateway settings volume: upstream Secret %v", src)
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		if b := find(objs, kind, "egret-webhook"); b == nil || fmt.Sprint(b.Object["subjects"]) != "[map[kind:ServiceAccount name:egret-webhook namespace:proxy-infra]]" {
			t.Errorf("%s subjects: %v", kind, b)
		}
	}
	// Trusted CAs from a Secret in another namespace: the flags, and a Role
	// there that lets the webhook read it.
	objs = helmTemplate(t, "proxy-infra", "trust.enabled=true", "trust.configMap=", "trust.secret=pki/corp-ca", "trust.key=")
	args, _ = podArgs(container(t, objs, "egret-webhook"), "proxy-infra")
	if !slices.Contains(args, "--ca-secret=pki/corp-ca") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--ca-key") || strings.HasPrefix(a, "--ca-configmap") }) {
		t.Errorf("trust args %q", args)
	}
	if r := find(objs, "Role", "egret-webhook-trust-source"); r == nil || r.GetNamespace() != "pki" {
		t.Errorf("no Role reading Secrets in pki: %v", r)
	}
	// The interception CA's ConfigMap beside the corporate CAs.
	objs = helmTemplate(t, "proxy-infra", "trust.enabled=true", "trust.interceptConfigMap=egret-intercept-ca")
	args, _ = podArgs(container(t, objs, "egret-webhook"), "proxy-infra")
	if !slices.Contains(args, "--intercept-ca-configmap=proxy-infra/egret-intercept-ca") || !slices.Contains(args, "--ca-configmap=proxy-infra/corp-ca") {
		t.Errorf("trust args with the interception CA %q", args)
	}
	// A bad value is a clear error, not a broken install.
	cmd := exec.Command(testutil.CachedTool(t, "helm"), "template", "egret", chart, "--kube-version", "1.37.2", "--set", "mode=transparnt")
	cmd.Env = []string{"HOME=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "at '/mode': value must be one of 'gateway', 'sidecar', 'transparent'") {
		t.Errorf("bad mode: %v\n%s", err, out)
	}
}

// TestHelmLifecycle installs, upgrades, rolls back and uninstalls the chart
// with the helm binary against the test API server: a user's edit to the
// additions ConfigMap survives upgrade and rollback; uninstall removes every
// object of the release, the webhook configurations included.
func TestHelmLifecycle(t *testing.T) {
	kc := kubetest.Require(t)
	ctx := context.Background()
	ns := kc.Namespace(t, "egret-helm", nil)
	env := []string{"KUBECONFIG=" + kc.Kubeconfig}
	c, err := client.New(kc.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The webhook configurations are cluster-scoped and named egret: take
	// the ones other tests applied out of the way, as a cluster would have
	// only one egret.
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ClusterRole", "ClusterRoleBinding"} {
		for _, name := range []string{"egret", "egret-webhook"} {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(map[bool]string{true: "admissionregistration.k8s.io/v1", false: "rbac.authorization.k8s.io/v1"}[strings.HasSuffix(kind, "Configuration")])
			u.SetKind(kind)
			u.SetName(name)
			if err := c.Delete(ctx, u); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	helm(t, env, "install", "egret", chart, "--namespace", ns, "--wait=false")
	t.Logf("helm install in %s", time.Since(start).Round(time.Millisecond))
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "egret-noproxy"}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"NO_PROXY": "registry.corp.example"}
	if err := c.Update(ctx, &cm); err != nil {
		t.Fatal(err)
	}
	helm(t, env, "upgrade", "egret", chart, "--namespace", ns, "--set", "validation=enforce")
	helm(t, env, "rollback", "egret", "1", "--namespace", ns)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "egret-noproxy"}, &cm); err != nil || cm.Data["NO_PROXY"] != "registry.corp.example" {
		t.Errorf("the user's additions did not survive upgrade and rollback: %v %v", cm.Data, err)
	}
	var dep unstructured.Unstructured
	dep.SetAPIVersion("apps/v1")
	dep.SetKind("Deployment")
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "egret-webhook"}, &dep); err != nil {
		t.Fatal(err)
	}
	if args := fmt.Sprint(dep.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["args"]); !strings.Contains(args, "--validation=warn") {
		t.Errorf("rollback did not restore validation=warn: %s", args)
	}
	helm(t, env, "uninstall", "egret", "--namespace", ns, "--wait")
	for _, o := range helmTemplate(t, ns) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		err := c.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, got)
		if err == nil && got.GetDeletionTimestamp() == nil {
			t.Errorf("%s %s/%s left after helm uninstall", o.GetKind(), o.GetNamespace(), o.GetName())
		}
	}
	_ = metav1.Now
}
