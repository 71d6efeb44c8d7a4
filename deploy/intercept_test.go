package deploy

import (
	"context"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	"egret.io/egret/internal/config"
	"egret.io/egret/internal/policy"
	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kubetest"
	"egret.io/egret/internal/testutil/tlslab"
)

// checkIntercept: the gateway of a rendering mounts the CA Secret, reads
// the intercept section the rendering writes (and egret's loader accepts
// it: the CA directory, the grant, the published ConfigMap), and the
// webhook adds that ConfigMap to the trust bundle.
func checkIntercept(t *testing.T, objs []*unstructured.Unstructured, ns string) {
	t.Helper()
	ps := podSpec(t, objs, "egret-gateway")
	gc := container(t, objs, "egret-gateway")
	if ps.AutomountServiceAccountToken == nil || !*ps.AutomountServiceAccountToken {
		t.Error("the gateway has no service-account token: it cannot read the granted Secrets or publish the CA")
	}
	var cfgPath string
	for _, e := range gc.Env {
		if e.Name == "EGRET_CONFIG" {
			cfgPath = e.Value
		}
	}
	mounts := map[string]string{}
	for _, m := range gc.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	vols := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v
	}
	if v := vols["intercept-ca"]; v.Secret == nil || v.Secret.SecretName != "egret-intercept-ca" || (v.Secret.Optional != nil && *v.Secret.Optional) ||
		mounts["intercept-ca"] != "/var/run/secrets/egret/intercept-ca" {
		t.Errorf("CA Secret volume %+v mounted at %q", v, mounts["intercept-ca"])
	}
	cv := vols["intercept-config"]
	if cv.ConfigMap == nil || cfgPath != filepath.Join(mounts["intercept-config"], "egret.yaml") {
		t.Fatalf("config volume %+v at %q, EGRET_CONFIG %q", cv, mounts["intercept-config"], cfgPath)
	}
	cm := find(objs, "ConfigMap", cv.ConfigMap.Name)
	if cm == nil {
		t.Fatalf("no ConfigMap %s", cv.ConfigMap.Name)
	}
	y, _, _ := unstructured.NestedString(cm.Object, "data", "egret.yaml")
	file := filepath.Join(t.TempDir(), "egret.yaml")
	if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"EGRET_ROLE": "gateway", "EGRET_POLICY": "true"}
	p, err := config.Load(config.Sources{File: file, Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, DefaultCredentialsDir: "-"})
	if err != nil {
		t.Fatalf("the gateway refuses the rendered configuration: %v\n%s", err, y)
	}
	ic := p.Intercept
	if ic == nil || ic.CADir != "/var/run/secrets/egret/intercept-ca" || !slices.Equal(ic.Secrets, []string{"shop/openai"}) ||
		ic.PublishNamespace != ns || ic.PublishName != "egret-intercept-ca" {
		t.Errorf("intercept configuration %+v", ic)
	}
	if find(objs, "ConfigMap", "egret-intercept-ca") == nil {
		t.Error("the published CA ConfigMap is not installed")
	}
	args, _ := podArgs(container(t, objs, "egret-webhook"), ns)
	if !slices.Contains(args, "--intercept-ca-configmap="+ns+"/egret-intercept-ca") {
		t.Errorf("webhook args %q lack the interception CA ConfigMap", args)
	}
}

// TestInterceptComponent: overlays/intercept (default + policy + trust +
// components/intercept + the grant of shop/openai) wires interception, and
// the Helm chart's intercept values render the same objects.
func TestInterceptComponent(t *testing.T) {
	objs, _ := render(t, "overlays/intercept")
	checkIntercept(t, objs, "egret-system")
	h := helmTemplateValues(t, "egret", "proxy-infra", docBlock(t, "Helm (`deploy/helm/egret`"))
	checkIntercept(t, h, "proxy-infra")
	if r := find(h, "Role", "egret-gateway-credentials"); r == nil || r.GetNamespace() != "shop" {
		t.Errorf("no Role for the grant in shop: %v", r)
	}
	// Off by default; with gateway.config the file is the user's.
	if find(helmTemplate(t, "egret-system"), "ConfigMap", "egret-intercept-ca") != nil {
		t.Error("interception rendered without intercept.enabled")
	}
	u := helmTemplate(t, "egret-system", "policy.enabled=true", "intercept.enabled=true", "gateway.config.configMap=mine")
	if find(u, "ConfigMap", "egret-gateway-intercept") != nil || find(u, "Role", "egret-gateway-intercept-ca") == nil {
		t.Error("with gateway.config: the chart must not write a configuration, and still grant the CA ConfigMap")
	}
	// Nothing to intercept is a clear error.
	cmd := helmCmd(t, "template", "egret", chart, "--kube-version", "1.37.2", "--set", "intercept.enabled=true")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "set policy.enabled (sites from EgressPolicies) or intercept.sites") {
		t.Errorf("intercept without sites: %v\n%s", err, out)
	}
}

// TestInterceptRBAC applies overlays/intercept and the chart's rendering to
// the real API server and asks it (SubjectAccessReview, as kubectl auth
// can-i) what the gateway's service account may do: get, list and watch
// the granted Secret by name, update its CA ConfigMap — and nothing else
// of Secrets or ConfigMaps.
func TestInterceptRBAC(t *testing.T) {
	kc := kubetest.Require(t)
	ctx := context.Background()
	c, err := client.New(kc.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(kc.Config)
	for _, ns := range []string{"shop", "proxy-infra"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, ns string
		objs     []*unstructured.Unstructured
	}{
		{"kustomize", "egret-system", func() []*unstructured.Unstructured { o, _ := render(t, "overlays/intercept"); return o }()},
		{"helm", "proxy-infra", helmTemplateValues(t, "egret", "proxy-infra", docBlock(t, "Helm (`deploy/helm/egret`"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			applyRelease(t, c, tc.objs)
			user := "system:serviceaccount:" + tc.ns + ":egret-gateway"
			can := func(ns, verb, resource, name string) bool {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + tc.ns, "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: resource, Name: name}}}
				r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return r.Status.Allowed
			}
			for _, q := range []struct {
				ns, verb, resource, name string
				want                     bool
			}{
				{"shop", "get", "secrets", "openai", true},
				{"shop", "watch", "secrets", "openai", true},
				{"shop", "list", "secrets", "openai", true}, // a metadata.name field selector
				{"shop", "get", "secrets", "other", false},
				{"shop", "list", "secrets", "", false},
				{"shop", "watch", "secrets", "", false},
				{tc.ns, "get", "secrets", "egret-intercept-ca", false}, // the CA key: mounted, never read through the API
				{tc.ns, "list", "secrets", "", false},
				{tc.ns, "update", "configmaps", "egret-intercept-ca", true},
				{tc.ns, "get", "configmaps", "egret-intercept-ca", true},
				{tc.ns, "update", "configmaps", "egress-proxy-common", false},
				{tc.ns, "create", "configmaps", "", false},
				{"shop", "update", "configmaps", "egret-intercept-ca", false},
			} {
				if got := can(q.ns, q.verb, q.resource, q.name); got != q.want {
					t.Errorf("%s can %s %s %s/%s: %v, want %v", user, q.verb, q.resource, q.ns, q.name, got, q.want)
				}
			}
			// The gateway's CA publisher, as the gateway's service account,
			// fills the installed ConfigMap; applying the install again
			// leaves what it wrote.
			cfg := rest.CopyConfig(kc.Config)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + tc.ns, "system:authenticated"}}
			pctx, cancel := context.WithCancel(ctx)
			defer cancel()
			pub := &policy.CAPublisher{Client: kubernetes.NewForConfigOrDie(cfg), Namespace: tc.ns, Name: "egret-intercept-ca", Retry: 100 * time.Millisecond}
			pub.Start(pctx)
			ca := tlslab.NewCA(t, "egret interception CA")
			pub.Publish([]*x509.Certificate{ca.Cert})
			want := policy.CABundle([]*x509.Certificate{ca.Cert})
			published := func() bool {
				cm, err := cs.CoreV1().ConfigMaps(tc.ns).Get(ctx, "egret-intercept-ca", metav1.GetOptions{})
				return err == nil && cm.Data[policy.CAConfigMapKey] == want
			}
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return published(), nil }); err != nil {
				t.Fatal("the gateway's publisher did not fill the CA ConfigMap with the shipped RBAC")
			}
			cancel()
			applyAll(t, c, tc.objs, "", false)
			if !published() {
				t.Error("applying the install again emptied the published CA ConfigMap")
			}
		})
	}
}

func helmCmd(t *testing.T, args ...string) *exec.Cmd {
	cmd := exec.Command(testutil.CachedTool(t, "helm"), args...)
	cmd.Env = []string{"HOME=" + t.TempDir()}
	return cmd
}

// docBlock is the first fenced block of docs/interception.md after mark.
func docBlock(t *testing.T, mark string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/interception.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, mark)
	if i < 0 {
		t.Fatalf("docs/interception.md lacks %q", mark)
	}
	s = s[i:]
	s = s[strings.Index(s, "```yaml\n")+len("```yaml\n"):]
	return s[:strings.Index(s, "```")]
}

// TestInterceptDocGrant: the Role and RoleBinding docs/interception.md
// shows (and internal/policy's TestSecretGrantRBAC applies) are the grant
// overlays/intercept ships.
func TestInterceptDocGrant(t *testing.T) {
	docs := strings.Split(docBlock(t, "The chart's\n`intercept.secrets: [shop/openai]`"), "\n---\n")
	var role, shippedRole rbacv1.Role
	var binding, shippedBinding rbacv1.RoleBinding
	if len(docs) != 2 {
		t.Fatalf("docs/interception.md's grant: %d documents", len(docs))
	}
	if err := sigsyaml.UnmarshalStrict([]byte(docs[0]), &role); err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.UnmarshalStrict([]byte(docs[1]), &binding); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("overlays/intercept/secret-grant.yaml")
	if err != nil {
		t.Fatal(err)
	}
	shipped := strings.Split(string(b), "\n---\n")
	if err := sigsyaml.UnmarshalStrict([]byte(shipped[0]), &shippedRole); err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.UnmarshalStrict([]byte(shipped[1]), &shippedBinding); err != nil {
		t.Fatal(err)
	}
	if role.Name != shippedRole.Name || role.Namespace != shippedRole.Namespace || !equality.Semantic.DeepEqual(role.Rules, shippedRole.Rules) {
		t.Errorf("docs' Role %+v, shipped %+v", role, shippedRole)
	}
	if binding.Name != shippedBinding.Name || binding.Namespace != shippedBinding.Namespace ||
		!equality.Semantic.DeepEqual(binding.RoleRef, shippedBinding.RoleRef) || !equality.Semantic.DeepEqual(binding.Subjects, shippedBinding.Subjects) {
		t.Errorf("docs' RoleBinding %+v, shipped %+v", binding, shippedBinding)
	}
}
