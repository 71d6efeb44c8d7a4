package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/testutil/kubetest"
)

// helmTemplateValues renders the chart with a values file (YAML text) as
// release in namespace.
func helmTemplateValues(t *testing.T, release, namespace, values string, files ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", release, chart, "--namespace", namespace, "--kube-version", "1.37.2"}
	if values != "" {
		p := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(p, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	return decodeAll(t, helm(t, nil, args...))
}

// thirdPartyCRDs makes the API server serve the Prometheus Operator and
// cert-manager kinds the renderings use (schemas that accept any spec) and
// returns a client whose REST mapper knows them.
func thirdPartyCRDs(t *testing.T, kc *kubetest.Cluster) client.Client {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(kc.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(c.Scheme()); err != nil {
		t.Fatal(err)
	}
	for _, crd := range []*apiextensionsv1.CustomResourceDefinition{
		minimalCRD("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
		minimalCRD("monitoring.coreos.com", "PodMonitor", "podmonitors"),
		minimalCRD("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
		minimalCRD("cert-manager.io", "Certificate", "certificates"),
		minimalCRD("cert-manager.io", "Issuer", "issuers"),
	} {
		if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, gvk := range []schema.GroupVersionKind{{Group: "monitoring.coreos.com", Version: "v1", Kind: "PodMonitor"}, {Group: "cert-manager.io", Version: "v1", Kind: "Issuer"}} {
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
	c, err = client.New(kc.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// applyRelease server-side applies a rendering (dry run, then for real) and
// removes its cluster-scoped objects at the end: webhook configurations of
// a release with no running webhook must not outlive the test.
func applyRelease(t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	applyAll(t, c, objs, "", true)
	applyAll(t, c, objs, "", false)
	t.Cleanup(func() {
		for _, o := range objs {
			// Not a Namespace: the test API server runs no namespace
			// controller, so it would stay Terminating and refuse every
			// later test's objects in it (TestShippedInstall, TestRelease).
			if o.GetNamespace() == "" && o.GetKind() != "CustomResourceDefinition" && o.GetKind() != "Namespace" {
				_ = c.Delete(context.Background(), o.DeepCopy())
			}
		}
	})
}

// platformValues sets every value a platform team sets (issue 25).
const platformValues = `
fullnameOverride: corp-egret
imagePullSecrets: [mirror-pull]
securityContext: {runAsUser: 10001, runAsGroup: 10001, fsGroup: 10001}
cluster: {serviceCIDRs: [10.96.0.0/12], podCIDRs: [10.0.0.0/8, fd00:10::/56], domain: corp.local}
gateway:
  upstreamSecret: corp-upstream
  config: {configMap: corp-egret-routes, key: routes.yaml}
  resources: {requests: {cpu: 200m, memory: 128Mi}, limits: {memory: 1Gi}}
  nodeSelector: {egret.io/pool: egress}
  tolerations: [{key: dedicated, operator: Equal, value: egress, effect: NoSchedule}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [eu-west-1a, eu-west-1b]}]
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app.kubernetes.io/name: egret-gateway}}}
  priorityClassName: egress-critical
  podLabels: {team: platform}
  podAnnotations: {example.com/owner: platform}
  extraEnv: [{name: EGRET_LOG_LEVEL, value: debug}]
  extraVolumes: [{name: corp-ca, configMap: {name: corp-ca}}]
  extraVolumeMounts: [{name: corp-ca, mountPath: /etc/corp-ca, readOnly: true}]
webhook:
  port: 10250
  metricsPort: 10251
  hostNetwork: true
  timeoutSeconds: 12
  resources: {requests: {cpu: 80m, memory: 96Mi}, limits: {memory: 300Mi}}
  nodeSelector: {node-role.kubernetes.io/infra: ""}
  tolerations: [{key: node-role.kubernetes.io/infra, operator: Exists, effect: NoSchedule}]
  affinity: null
  priorityClassName: system-cluster-critical
  podLabels: {team: platform}
  podAnnotations: {example.com/owner: platform}
  extraEnv: [{name: GOMAXPROCS, value: "2"}]
  extraVolumes: [{name: scratch, emptyDir: {}}]
  extraVolumeMounts: [{name: scratch, mountPath: /scratch}]
sidecar:
  uid: 20000
  resources: {requests: {cpu: 50m, memory: 64Mi}, limits: {cpu: 500m, memory: 256Mi}}
monitoring:
  enabled: true
  monitorLabels: {prometheus: corp}
  runbookBaseURL: https://wiki.corp.example/egret
certManager:
  enabled: true
  issuerRef: {name: corp-ca, kind: ClusterIssuer}
policy: {enabled: true}
crds: {keep: false}
`

// TestHelmPlatformValues renders the chart with every value a platform
// team sets, checks each reaches its field, and applies the rendering to
// the real API server.
func TestHelmPlatformValues(t *testing.T) {
	const ns = "platform-egret"
	objs := helmTemplateValues(t, "corp", ns, platformValues)
	names := map[string]bool{}
	for _, o := range objs {
		names[o.GetKind()+"/"+o.GetName()] = true
		l := o.GetLabels()
		if l["app.kubernetes.io/instance"] != "corp" || l["app.kubernetes.io/version"] == "" || l["app.kubernetes.io/part-of"] != "egret" {
			t.Errorf("%s %s labels %v lack instance/version/part-of", o.GetKind(), o.GetName(), l)
		}
		if !strings.HasPrefix(o.GetName(), "corp-egret") && !strings.HasSuffix(o.GetName(), ".egret.io") {
			t.Errorf("%s %s is not named by fullname", o.GetKind(), o.GetName())
		}
	}
	for _, want := range []string{"Deployment/corp-egret-gateway", "Deployment/corp-egret-webhook", "Service/corp-egret-webhook",
		"MutatingWebhookConfiguration/corp-egret", "ConfigMap/corp-egret-noproxy", "PodMonitor/corp-egret-sidecars", "Certificate/corp-egret-webhook"} {
		if !names[want] {
			t.Errorf("%s not rendered (have %v)", want, names)
		}
	}

	gw := podSpec(t, objs, "corp-egret-gateway")
	if gw.NodeSelector["egret.io/pool"] != "egress" || len(gw.Tolerations) != 1 || gw.Tolerations[0].Value != "egress" ||
		gw.PriorityClassName != "egress-critical" || len(gw.TopologySpreadConstraints) != 1 || gw.TopologySpreadConstraints[0].WhenUnsatisfiable != corev1.DoNotSchedule {
		t.Errorf("gateway scheduling: %+v %+v %q %+v", gw.NodeSelector, gw.Tolerations, gw.PriorityClassName, gw.TopologySpreadConstraints)
	}
	// A map given is merged with the default: the node affinity joins
	// the preferred anti-affinity.
	if a := gw.Affinity; a == nil || a.NodeAffinity == nil || a.PodAntiAffinity == nil {
		t.Errorf("gateway affinity %+v", a)
	}
	if len(gw.ImagePullSecrets) != 1 || gw.ImagePullSecrets[0].Name != "mirror-pull" {
		t.Errorf("gateway imagePullSecrets %v", gw.ImagePullSecrets)
	}
	if sc := gw.SecurityContext; sc == nil || *sc.RunAsUser != 10001 || *sc.RunAsGroup != 10001 || *sc.FSGroup != 10001 || !*sc.RunAsNonRoot {
		t.Errorf("gateway pod securityContext %+v", sc)
	}
	gc := gw.Containers[0]
	if gc.Resources.Limits.Memory().String() != "1Gi" || gc.Resources.Requests.Cpu().String() != "200m" {
		t.Errorf("gateway resources %v", gc.Resources)
	}
	if !slices.Equal(gc.Args[len(gc.Args)-2:], []string{"--config", "/etc/egret/config/routes.yaml"}) {
		t.Errorf("gateway args %q: no --config", gc.Args)
	}
	if !slices.ContainsFunc(gc.Env, func(e corev1.EnvVar) bool { return e.Name == "EGRET_LOG_LEVEL" && e.Value == "debug" }) {
		t.Errorf("gateway extraEnv: %v", gc.Env)
	}
	mounts := map[string]string{}
	for _, m := range gc.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	vols := map[string]corev1.Volume{}
	for _, v := range gw.Volumes {
		vols[v.Name] = v
	}
	if mounts["corp-ca"] != "/etc/corp-ca" || mounts["config"] != "/etc/egret/config" || mounts["settings"] != "/etc/egret/settings" ||
		vols["corp-ca"].ConfigMap == nil || vols["config"].ConfigMap == nil || vols["config"].ConfigMap.Name != "corp-egret-routes" ||
		vols["settings"].Projected == nil || vols["settings"].Projected.Sources[0].Secret.Name != "corp-upstream" {
		t.Errorf("gateway volumes %+v mounts %v", gw.Volumes, mounts)
	}
	tmpl := find(objs, "Deployment", "corp-egret-gateway")
	if l, _, _ := unstructured.NestedStringMap(tmpl.Object, "spec", "template", "metadata", "labels"); l["team"] != "platform" || l["app.kubernetes.io/instance"] != "corp" {
		t.Errorf("gateway pod labels %v", l)
	}
	if a, _, _ := unstructured.NestedStringMap(tmpl.Object, "spec", "template", "metadata", "annotations"); a["example.com/owner"] != "platform" || a["prometheus.io/scrape"] != "true" {
		t.Errorf("gateway pod annotations %v", a)
	}

	wh := podSpec(t, objs, "corp-egret-webhook")
	if !wh.HostNetwork || wh.DNSPolicy != corev1.DNSClusterFirstWithHostNet || wh.Affinity != nil || wh.PriorityClassName != "system-cluster-critical" ||
		len(wh.Tolerations) != 1 || len(wh.ImagePullSecrets) != 1 {
		t.Errorf("webhook pod: hostNetwork %v dns %v affinity %+v priority %q tolerations %v pull %v", wh.HostNetwork, wh.DNSPolicy, wh.Affinity, wh.PriorityClassName, wh.Tolerations, wh.ImagePullSecrets)
	}
	wc := wh.Containers[0]
	args, _ := podArgs(wc, ns)
	for _, want := range []string{"--listen=:10250", "--metrics-listen=:10251", "--gateway-url=http://corp-egret-gateway." + ns + ".svc:3128",
		"--additions=" + ns + "/corp-egret-noproxy", "--service=corp-egret-webhook", "--secret=corp-egret-webhook-tls",
		"--mutating-config=corp-egret", "--validating-config=corp-egret", "--image-pull-secret=mirror-pull",
		"--service-cidr=10.96.0.0/12", "--pod-cidr=10.0.0.0/8", "--pod-cidr=fd00:10::/56", "--cluster-domain=corp.local",
		"--sidecar-cpu-request=50m", "--sidecar-memory-request=64Mi", "--sidecar-cpu-limit=500m", "--sidecar-memory-limit=256Mi",
		"--cert-dir=/tls", "--gateway-token", "--sidecar-uid=20000"} {
		if !slices.Contains(args, want) {
			t.Errorf("webhook args %q lack %s", args, want)
		}
	}
	if wc.Ports[0].ContainerPort != 10250 || wc.Ports[1].ContainerPort != 10251 || wc.Resources.Limits.Memory().String() != "300Mi" {
		t.Errorf("webhook ports %v resources %v", wc.Ports, wc.Resources)
	}
	if !slices.ContainsFunc(wc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "scratch" }) ||
		!slices.ContainsFunc(wc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "tls" }) {
		t.Errorf("webhook mounts %v", wc.VolumeMounts)
	}
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		o := find(objs, kind, "corp-egret")
		if o.GetAnnotations()["cert-manager.io/inject-ca-from"] != ns+"/corp-egret-webhook" {
			t.Errorf("%s annotations %v", kind, o.GetAnnotations())
		}
		ws, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for _, w := range ws {
			w := w.(map[string]any)
			if fmt.Sprint(w["timeoutSeconds"]) != "12" || fmt.Sprint(w["clientConfig"].(map[string]any)["service"].(map[string]any)["name"]) != "corp-egret-webhook" {
				t.Errorf("%s %s: timeout %v clientConfig %v", kind, w["name"], w["timeoutSeconds"], w["clientConfig"])
			}
		}
	}
	np := find(objs, "NetworkPolicy", "corp-egret-webhook")
	if ports := fmt.Sprint(np.Object["spec"].(map[string]any)["ingress"]); !strings.Contains(ports, "10250") || !strings.Contains(ports, "10251") {
		t.Errorf("webhook NetworkPolicy %s does not follow the ports", ports)
	}
	// RBAC names follow fullname; the Secret the webhook may write too.
	role := find(objs, "Role", "corp-egret-webhook")
	if r := fmt.Sprint(role.Object["rules"]); strings.Contains(r, "secrets") {
		t.Errorf("with cert-manager the webhook writes no Secret: %s", r)
	}
	if r := fmt.Sprint(find(objs, "ClusterRole", "corp-egret-webhook").Object["rules"]); !strings.Contains(r, "resourceNames:[corp-egret]") {
		t.Errorf("ClusterRole rules %s do not name the corp-egret webhook configurations", r)
	}
	// cert-manager with the user's issuer: no CA chain of egret's own.
	cert := find(objs, "Certificate", "corp-egret-webhook")
	if ref, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef"); ref["name"] != "corp-ca" || ref["kind"] != "ClusterIssuer" || ref["group"] != "cert-manager.io" {
		t.Errorf("issuerRef %v", ref)
	}
	if dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames"); !slices.Equal(dns, []string{"corp-egret-webhook." + ns + ".svc", "corp-egret-webhook." + ns + ".svc.corp.local"}) {
		t.Errorf("dnsNames %v", dns)
	}
	if find(objs, "Issuer", "corp-egret-ca") != nil || find(objs, "Certificate", "corp-egret-ca") != nil {
		t.Error("egret's own CA rendered beside the user's issuer")
	}
	// Monitoring labels on the rule too; runbook URLs moved.
	for _, kind := range []string{"PrometheusRule", "ServiceMonitor", "PodMonitor"} {
		for _, o := range objs {
			if o.GetKind() == kind && o.GetLabels()["prometheus"] != "corp" {
				t.Errorf("%s %s labels %v lack monitorLabels", kind, o.GetName(), o.GetLabels())
			}
		}
	}
	if r := fmt.Sprint(find(objs, "PrometheusRule", "corp-egret").Object["spec"]); strings.Contains(r, "github.com/egret-io") || !strings.Contains(r, "https://wiki.corp.example/egret#egretwebhookdown") {
		t.Errorf("runbook URLs not moved: %.300s", r)
	}
	// crds.keep=false: no keep annotation.
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" && o.GetAnnotations()["helm.sh/resource-policy"] != "" {
			t.Errorf("CRD %s keeps with crds.keep=false", o.GetName())
		}
	}
	if o := helmTemplateValues(t, "egret", "egret-system", "policy: {enabled: true}"); find(o, "CustomResourceDefinition", "egresspolicies.egret.io").GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Error("CRDs without the keep annotation by default")
	}
	// The configuration from a Secret instead.
	sobjs := helmTemplateValues(t, "egret", "egret-system", "gateway: {config: {secret: corp-routes}}")
	if v := podSpec(t, sobjs, "egret-gateway").Volumes; v[len(v)-1].Secret == nil || v[len(v)-1].Secret.SecretName != "corp-routes" {
		t.Errorf("config from a Secret: %+v", v)
	}

	kc := kubetest.Require(t)
	c := thirdPartyCRDs(t, kc)
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	applyRelease(t, c, objs)
	// What the API server stored is what was rendered (nothing pruned as
	// unknown): spot-check the fields a typo would lose.
	got := &unstructured.Unstructured{}
	got.SetAPIVersion("apps/v1")
	got.SetKind("Deployment")
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "corp-egret-webhook"}, got); err != nil {
		t.Fatal(err)
	}
	if hn, _, _ := unstructured.NestedBool(got.Object, "spec", "template", "spec", "hostNetwork"); !hn {
		t.Error("hostNetwork not stored")
	}
}

// recipe renders the chart with a platform recipe of deploy/recipes.
func recipe(t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	return helmTemplateValues(t, "egret", "egret-system", "", "recipes/"+name+".yaml")
}

// TestRecipes: each platform recipe of docs/kubernetes.md renders what the
// platform needs, and the API server accepts it.
func TestRecipes(t *testing.T) {
	t.Run("gke-private", func(t *testing.T) {
		objs := recipe(t, "gke-private")
		args, _ := podArgs(container(t, objs, "egret-webhook"), "egret-system")
		if !slices.Contains(args, "--listen=:10250") || podSpec(t, objs, "egret-webhook").HostNetwork {
			t.Errorf("webhook args %q: not on 10250 in its own network namespace", args)
		}
		if np := fmt.Sprint(find(objs, "NetworkPolicy", "egret-webhook").Object["spec"]); !strings.Contains(np, "port:10250") {
			t.Errorf("NetworkPolicy %s", np)
		}
		// The Service's 443 reaches the named port, whatever its number.
		if p := fmt.Sprint(find(objs, "Service", "egret-webhook").Object["spec"]); !strings.Contains(p, "port:443") || !strings.Contains(p, "targetPort:webhook") {
			t.Errorf("Service %s", p)
		}
	})
	t.Run("eks-custom-cni", func(t *testing.T) {
		objs := recipe(t, "eks-custom-cni")
		ps := podSpec(t, objs, "egret-webhook")
		args, _ := podArgs(ps.Containers[0], "egret-system")
		if !ps.HostNetwork || ps.DNSPolicy != corev1.DNSClusterFirstWithHostNet || !slices.Contains(args, "--listen=:10260") ||
			!slices.Contains(args, "--metrics-listen=:10261") || !slices.Contains(args, "--pod-cidr=192.168.0.0/16") {
			t.Errorf("webhook: hostNetwork %v dns %v args %q", ps.HostNetwork, ps.DNSPolicy, args)
		}
	})
	t.Run("openshift", func(t *testing.T) {
		// restricted-v2: no fixed UID or GID, non-root, no escalation,
		// every capability dropped, RuntimeDefault seccomp, no host
		// namespaces, ports or paths.
		for _, name := range []string{"egret-gateway", "egret-webhook"} {
			ps := podSpec(t, recipe(t, "openshift"), name)
			psc := ps.SecurityContext
			if psc.RunAsUser != nil || psc.RunAsGroup != nil || psc.FSGroup != nil || !*psc.RunAsNonRoot || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s pod securityContext %+v", name, psc)
			}
			if ps.HostNetwork || ps.HostPID || ps.HostIPC {
				t.Errorf("%s uses a host namespace", name)
			}
			for _, v := range ps.Volumes {
				if v.HostPath != nil {
					t.Errorf("%s mounts a host path", name)
				}
			}
			for _, c := range ps.Containers {
				sc := c.SecurityContext
				if sc.RunAsUser != nil || sc.RunAsGroup != nil || *sc.AllowPrivilegeEscalation || !*sc.RunAsNonRoot ||
					!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
					t.Errorf("%s container securityContext %+v", name, sc)
				}
				for _, p := range c.Ports {
					if p.HostPort != 0 {
						t.Errorf("%s host port %d", name, p.HostPort)
					}
				}
			}
		}
		// The defaults are the recipe: OpenShift needs no value set.
		def := helmTemplateValues(t, "egret", "egret-system", "")
		if sc := podSpec(t, def, "egret-gateway").SecurityContext; sc.RunAsUser != nil {
			t.Errorf("the default install fixes a UID: %v", *sc.RunAsUser)
		}
	})
	t.Run("aks", func(t *testing.T) {
		objs := recipe(t, "aks")
		for _, name := range []string{"egret-gateway", "egret-webhook"} {
			d := find(objs, "Deployment", name)
			if a, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "annotations"); a["kubernetes.azure.com/no-http-proxy-vars"] != "true" {
				t.Errorf("%s pods not opted out of AKS's proxy variables: %v", name, a)
			}
		}
		if args, _ := podArgs(container(t, objs, "egret-webhook"), "egret-system"); !slices.Contains(args, "--pod-cidr=10.224.0.0/12") {
			t.Errorf("webhook args %q", args)
		}
	})
	kc := kubetest.Require(t)
	c := thirdPartyCRDs(t, kc)
	for i, name := range []string{"gke-private", "eks-custom-cni", "openshift", "aks"} {
		ns := kc.Namespace(t, "recipe-"+name, nil)
		objs := helmTemplateValues(t, fmt.Sprintf("recipe%d", i), ns, "", "recipes/"+name+".yaml")
		t.Run("apply-"+name, func(t *testing.T) { applyRelease(t, c, objs) })
	}
}
