package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/lint"
	"egret.io/egret/internal/netpol"
	"egret.io/egret/internal/testutil/kubetest"
	"egret.io/egret/internal/webhook"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

var kustomizations = []string{"base", "overlays/default", "overlays/monitoring", "overlays/cert-manager", "overlays/trust", "overlays/policy", "overlays/intercept", "overlays/other-namespace"}

// render runs kustomize (the Go API, as `kustomize build` does) on dir.
func render(t *testing.T, dir string) ([]*unstructured.Unstructured, []byte) {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	y, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		j, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil { // numbers as int64, as the API machinery expects
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out, y
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func TestRender(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(strings.ReplaceAll(dir, "/", "-"), func(t *testing.T) {
			objs, _ := render(t, dir)
			if len(objs) == 0 {
				t.Fatal("nothing rendered")
			}
			_, y := render(t, dir)
			for _, o := range objs {
				if o.GetLabels()["app.kubernetes.io/part-of"] != "egret" {
					t.Errorf("%s/%s lacks the part-of label", o.GetKind(), o.GetName())
				}
			}
			// Another namespace and registry reach every field that names them.
			if dir == "overlays/other-namespace" {
				if strings.Contains(string(y), "egret-system") || strings.Contains(string(y), "ghcr.io") {
					t.Errorf("egret-system or ghcr.io left in a rendering for namespace egret-proxy and another registry:\n%s", y)
				}
			}
		})
	}
}

func TestGatewayManifest(t *testing.T) {
	objs, _ := render(t, "overlays/default")
	d := find(objs, "Deployment", "egret-gateway")
	if d == nil {
		t.Fatal("no gateway Deployment")
	}
	if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != 3 {
		t.Errorf("replicas = %d", r)
	}
	// Preferred, never required: 3 replicas schedule on a one-node cluster.
	if req, ok, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"); ok {
		t.Errorf("required anti-affinity leaves replicas Pending on small clusters: %v", req)
	}
	anti, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
	if len(anti) != 1 {
		t.Errorf("preferred anti-affinity per node: %v", anti)
	}
	ctrs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	c := ctrs[0].(map[string]any)
	if c["image"] != "ghcr.io/egret-io/egret:0.1.0" {
		t.Errorf("image = %v", c["image"])
	}
	sc := c["securityContext"].(map[string]any)
	if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("container securityContext: %v", sc)
	}
	if nr, _, _ := unstructured.NestedBool(d.Object, "spec", "template", "spec", "securityContext", "runAsNonRoot"); !nr {
		t.Error("gateway not runAsNonRoot")
	}
	for _, p := range []string{"readinessProbe", "livenessProbe", "startupProbe", "resources"} {
		if c[p] == nil {
			t.Errorf("gateway container lacks %s", p)
		}
	}
	if v, _, _ := unstructured.NestedFieldNoCopy(find(objs, "PodDisruptionBudget", "egret-gateway").Object, "spec", "maxUnavailable"); fmt.Sprint(v) != "1" {
		t.Errorf("PDB maxUnavailable = %v, want 1 (a drain proceeds on any cluster size)", v)
	}
	env := map[string]string{}
	for _, e := range c["env"].([]any) {
		e := e.(map[string]any)
		env[e["name"].(string)], _ = e["value"].(string)
	}
	if env["EGRET_ADMIN_TOKEN_FILE"] != "/var/run/secrets/egret-admin/token" || env["EGRET_CLIENT_MAX_CONCURRENT"] != "256" || env["EGRET_ENV_DIR"] != "/etc/egret/settings" {
		t.Errorf("gateway env %v", env)
	}
	// The upstream Secret and the cluster NO_PROXY are files the gateway
	// watches (EGRET_ENV_DIR), never environment variables frozen at start.
	if _, ok := c["envFrom"]; ok {
		t.Errorf("gateway envFrom %v: a Secret created later would never reach it", c["envFrom"])
	}
	var ps corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any), &ps); err != nil {
		t.Fatal(err)
	}
	settings := ps.Volumes[1]
	if settings.Name != "settings" || settings.Projected == nil || len(settings.Projected.Sources) != 2 ||
		settings.Projected.Sources[0].Secret.Name != "egret-upstream" || !*settings.Projected.Sources[0].Secret.Optional ||
		settings.Projected.Sources[1].ConfigMap.Name != "egress-proxy-common" || settings.Projected.Sources[1].ConfigMap.Items[0].Path != "NO_PROXY" {
		t.Errorf("settings volume %+v", settings)
	}
	// No fixed UID or GID (OpenShift's restricted-v2 assigns one; the
	// image's is non-root): runAsNonRoot only. kube-score: ephemeral-storage
	// asked for.
	for _, k := range []string{"runAsUser", "runAsGroup"} {
		if v, ok, _ := unstructured.NestedInt64(d.Object, "spec", "template", "spec", "securityContext", k); ok {
			t.Errorf("fixed %s %d", k, v)
		}
		if _, ok := c["securityContext"].(map[string]any)[k]; ok {
			t.Errorf("fixed container %s", k)
		}
	}
	if r := c["resources"].(map[string]any)["requests"].(map[string]any); r["ephemeral-storage"] == nil {
		t.Errorf("no ephemeral-storage request: %v", r)
	}
	ports, _, _ := unstructured.NestedSlice(find(objs, "Service", "egret-gateway").Object, "spec", "ports")
	if fmt.Sprint(ports[0].(map[string]any)["port"]) != "3128" {
		t.Errorf("service ports %v", ports)
	}
}

// TestManifestsPassLint runs `egret lint`'s rules (the gateway set rules and
// the pod rules) on the rendered default install: egret's own manifests
// must be clean.
func TestManifestsPassLint(t *testing.T) {
	_, y1 := render(t, "overlays/default")
	objs, err := lint.Read("deploy.yaml", y1)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := lint.Check(objs, lint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Severity >= lint.Warning {
			t.Errorf("%s %s: %s", f.Rule, f.Object, f.Message)
		}
	}
}

// TestAlertsAndDashboard checks the PrometheusRule and the dashboard use
// egret_ metric names (the catalog the proxy exports) and valid JSON.
func TestAlertsAndDashboard(t *testing.T) {
	objs, _ := render(t, "overlays/monitoring")
	pr := find(objs, "PrometheusRule", "egret")
	if pr == nil {
		t.Fatal("no PrometheusRule")
	}
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	var alerts []string
	metric := regexp.MustCompile(`\b(egret_[a-z_]+|up)\b`)
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			alerts = append(alerts, rule["alert"].(string))
			if !metric.MatchString(rule["expr"].(string)) {
				t.Errorf("%s: expr uses no egret metric: %s", rule["alert"], rule["expr"])
			}
		}
	}
	for _, want := range []string{"EgretUpstreamAuthFailures", "EgretUpstreamErrors", "EgretUpstreamPoolDown", "EgretTunnelSaturation"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s (have %v)", want, alerts)
		}
	}
	cm := find(objs, "ConfigMap", "egret-grafana-dashboard")
	if cm == nil || cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Fatal("no dashboard ConfigMap with the grafana_dashboard label")
	}
	raw, _, _ := unstructured.NestedString(cm.Object, "data", "egret-dashboard.json")
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(raw), &dash); err != nil || dash.UID == "" || len(dash.Panels) < 6 {
		t.Fatalf("dashboard: %v, %d panels", err, len(dash.Panels))
	}
}

// minimalCRD accepts any spec: enough for the API server to store the
// objects of CRDs the test cluster does not run (Prometheus Operator,
// cert-manager).
func minimalCRD(group, kind, plural string) *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve}}}},
		},
	}
}

func applyAll(t *testing.T, c client.Client, objs []*unstructured.Unstructured, namespace string, dryRun bool) {
	t.Helper()
	// Namespaces first, as kubectl does.
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return boolInt(b.GetKind() == "Namespace") - boolInt(a.GetKind() == "Namespace")
	})
	for _, o := range objs {
		o = o.DeepCopy()
		if namespace != "" {
			o.SetNamespace(namespace)
		}
		opts := []client.ApplyOption{client.FieldOwner("egret-deploy-test"), client.ForceOwnership}
		// A dry run of namespaced objects needs their namespace to exist.
		if dryRun && o.GetKind() != "Namespace" {
			opts = append(opts, client.DryRunAll)
		}
		if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(o), opts...); err != nil {
			t.Errorf("apply %s %s/%s (dry-run %v): %v", o.GetKind(), o.GetNamespace(), o.GetName(), dryRun, err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestApplyToAPIServer server-side applies every kustomization to the real
// API server: dry-run first, then for real.
func TestApplyToAPIServer(t *testing.T) {
	kc := kubetest.Require(t)
	ctx := context.Background()
	c, err := client.New(kc.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(c.Scheme()); err != nil {
		t.Fatal(err)
	}
	// The default install on a bare API server: no CRD of anyone else.
	{
		objs, _ := render(t, "overlays/default")
		t.Run("default-on-bare-apiserver-dry-run", func(t *testing.T) { applyAll(t, c, objs, "", true) })
		t.Run("default-on-bare-apiserver", func(t *testing.T) { applyAll(t, c, objs, "", false) })
	}
	for _, crd := range []*apiextensionsv1.CustomResourceDefinition{
		minimalCRD("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
		minimalCRD("monitoring.coreos.com", "PodMonitor", "podmonitors"),
		minimalCRD("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
		minimalCRD("cert-manager.io", "Certificate", "certificates"),
		minimalCRD("cert-manager.io", "Issuer", "issuers"),
	} {
		// The API server lives as long as the test process (-count=N runs
		// this test again against it).
		if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// Wait until the API server serves the new kinds.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, gvk := range []schema.GroupVersionKind{{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}, {Group: "cert-manager.io", Version: "v1", Kind: "Issuer"}} {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(gvk)
			if err := c.List(ctx, l); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("CRDs not served: %v", err)
	}
	// A fresh client: its REST mapper must see the new kinds.
	c, err = client.New(kc.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// cert-manager first: the default install (self-managed CA) is the
	// state the webhook test below runs against.
	for _, dir := range []string{"overlays/cert-manager", "overlays/monitoring", "overlays/default"} {
		objs, _ := render(t, dir)
		t.Run(strings.ReplaceAll(dir, "/", "-")+"-dry-run", func(t *testing.T) { applyAll(t, c, objs, "", true) })
		t.Run(strings.ReplaceAll(dir, "/", "-"), func(t *testing.T) { applyAll(t, c, objs, "", false) })
	}
	var got corev1.ServiceAccount
	if err := c.Get(ctx, client.ObjectKey{Namespace: "egret-system", Name: "egret-webhook"}, &got); err != nil {
		t.Errorf("applied objects not there: %v", err)
	}

	t.Run("webhook-runs-with-its-rbac", func(t *testing.T) { webhookWithRBAC(t, kc) })
}

// webhookWithRBAC runs egret webhook as its ServiceAccount (impersonated),
// with exactly the ClusterRole and Role of deploy/: it must write its CA
// Secret, patch the caBundle of the applied configurations, win the Lease and
// write the NO_PROXY ConfigMaps. A missing permission fails here.
func webhookWithRBAC(t *testing.T, kc *kubetest.Cluster) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := rest.CopyConfig(kc.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:egret-system:egret-webhook",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:egret-system", "system:authenticated"}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	app := kc.Namespace(t, "rbac-app", map[string]string{discovery.InjectLabel: discovery.InjectEnabled, netpol.Label: netpol.Enabled})
	// The API server's RBAC cache takes a moment to see the applied Role.
	imp, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		err := imp.Get(ctx, client.ObjectKey{Namespace: "egret-system", Name: "egret-webhook-tls"}, &corev1.Secret{})
		return !apierrors.IsForbidden(err), nil
	})
	if err != nil {
		t.Fatalf("the Role never allowed reading the certificate Secret: %v", err)
	}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- webhook.Run(ctx, webhook.Options{Config: cfg, Namespace: "egret-system", Listen: addr, MetricsListen: "0",
			SecretName: "egret-webhook-tls", Hosts: []string{"egret-webhook.egret-system.svc", "127.0.0.1"},
			MutatingWebhooks: []string{"egret"}, ValidatingWebhooks: []string{"egret"},
			Policy:    webhook.Config{GatewayURL: "http://egret-gateway.egret-system.svc:3128"},
			Discovery: discovery.Options{Additions: "egret-system/egret-noproxy"}, LeaderElection: true,
			Ready: func() { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("webhook as its ServiceAccount: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("not ready")
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook: %v", err)
		}
	}()
	cs := kc.Clientset
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		cm, err := cs.CoreV1().ConfigMaps(app).Get(ctx, discovery.ConfigMapName, metav1.GetOptions{})
		return err == nil && strings.Contains(cm.Data["NO_PROXY"], kubetest.ServiceCIDR), nil
	})
	if err != nil {
		t.Errorf("ConfigMap not written under the webhook's RBAC: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		np, err := cs.NetworkingV1().NetworkPolicies(app).Get(ctx, netpol.Name, metav1.GetOptions{})
		return err == nil && strings.Contains(np.Annotations[netpol.SourcesAnnotation], kubetest.ServiceCIDR), nil
	})
	if err != nil {
		t.Errorf("egress NetworkPolicy not written under the webhook's RBAC: %v", err)
	}
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "egret", metav1.GetOptions{})
	if err != nil || len(mwc.Webhooks) != 2 || len(mwc.Webhooks[0].ClientConfig.CABundle) == 0 || len(mwc.Webhooks[1].ClientConfig.CABundle) == 0 {
		t.Errorf("caBundle not written under the webhook's RBAC: %v", err)
	}
	if _, err := cs.CoordinationV1().Leases("egret-system").Get(ctx, "egret-webhook", metav1.GetOptions{}); err != nil {
		t.Errorf("no leader Lease: %v", err)
	}
	// And nothing more: the ServiceAccount cannot read other Secrets.
	var s corev1.SecretList
	if err := imp.List(ctx, &s, client.InNamespace("default")); err == nil {
		t.Error("the webhook's ServiceAccount can list Secrets in default")
	}
}
