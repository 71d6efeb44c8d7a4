package realnode

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/realnode"
)

// install is the shared Helm release of TestHelm: one install, upgraded
// once, that the policy, discovery, doctor and fault scenarios use in
// turn before the documented uninstall.
type install struct {
	n     *realnode.Node
	root  string
	dir   string // the test's scratch directory (manifests, values)
	out   *realnode.Outside
	helm  string
	home  string // helm's HOME (cache, config)
	image string // the egret image the release runs
}

// helmT runs the helm binary of scripts/deps/50-deploy-tools.sh with the
// node's kubeconfig; it fails the test on a non-zero exit.
func (in *install) helmT(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, in.helm, args...)
	cmd.Dir = in.root
	cmd.Env = append(os.Environ(), "HOME="+in.home, "HELM_CACHE_HOME="+in.home+"/cache",
		"HELM_CONFIG_HOME="+in.home+"/config", "HELM_DATA_HOME="+in.home+"/data", "KUBECONFIG="+in.n.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// available waits for egret's Deployments to be rolled out and Available,
// and checks that no egret pod restarted and every one runs image.
func (in *install) available(t testing.TB, image string) {
	t.Helper()
	n := in.n
	for _, d := range []string{"egret-webhook", "egret-gateway"} {
		n.KubectlT(t, "rollout", "status", "-n", "egret-system", "deployment/"+d, "--timeout=3m")
	}
	n.KubectlT(t, "wait", "-n", "egret-system", "--for=condition=Available", "deployment", "--all", "--timeout=3m")
	// Rolled out: the old pods may still be terminating.
	deadline := time.Now().Add(90 * time.Second)
	for {
		pods, err := n.Client.CoreV1().Pods("egret-system").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		old := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				old++
				continue
			}
			if r := restarts(&p); r != 0 {
				t.Errorf("pod %s restarted %d times", p.Name, r)
			}
			for _, c := range p.Spec.Containers {
				if c.Image != image {
					t.Errorf("pod %s container %s runs %s, want %s", p.Name, c.Name, c.Image, image)
				}
			}
		}
		if old == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d old egret pods still terminating", old)
		}
		time.Sleep(time.Second)
	}
}

// The shipped chart as docs/kubernetes.md installs it, then the documented
// upgrade (a values change: policy.enabled; a new image tag; then the
// image pinned by digest), the
// scenarios that need a running install, and the documented uninstall.
func TestHelm(t *testing.T) {
	n := realnode.Get(t)
	in := &install{n: n, root: repoRoot(t), dir: t.TempDir(), home: t.TempDir(), helm: testutil.CachedTool(t, "helm")}
	in.out = n.NewOutside(t)
	origin(t, in.out)
	for _, h := range []string{"origin.example", "blocked.example"} {
		if err := n.AddHost(h, in.out.IP); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	step := func(name string) { t.Logf("%s done at %s", name, time.Since(start).Round(time.Second)) }

	// The origin's network is not global unicast: the gateway's SSRF
	// guard refuses it unless allowed, in the gateway's Secret (created
	// first, so the gateways start with it).
	n.KubectlT(t, "create", "namespace", "egret-system")
	n.KubectlT(t, "create", "secret", "generic", "egret-upstream", "-n", "egret-system",
		"--from-literal=EGRET_SSRF_ALLOW_CIDRS="+in.out.IP+"/32")
	t.Cleanup(func() {
		// A failed run leaves no release behind for the next test.
		cmd := exec.Command(in.helm, "uninstall", "egret", "-n", "egret-system", "--ignore-not-found", "--wait")
		cmd.Env = append(os.Environ(), "HOME="+in.home, "KUBECONFIG="+n.Kubeconfig)
		cmd.Run()
		n.KubectlCmd(context.Background(), "delete", "namespace", "egret-system", "--ignore-not-found", "--wait=false").Run()
	})

	// The documented command (docs/kubernetes.md "From source"): the
	// chart's default image is the tag the harness imported.
	if !t.Run("install", func(t *testing.T) {
		in.helmT(t, "install", "egret", "deploy/helm/egret", "-n", "egret-system", "--create-namespace")
		n.KubectlT(t, "label", "namespace", "egret-system", "egret.io/exclude=true")
		in.image = realnode.EgretImage
		in.available(t, in.image)
		ns := namespace(t, n, "helm-shop", map[string]string{"egret.io/inject": "enabled"})
		pod := clientPod(t, n, ns, "client")
		if p, _ := envOf(pod.Spec.Containers[0], "HTTP_PROXY"); !strings.Contains(p, "egret-gateway") {
			t.Fatalf("pod not injected with the gateway: HTTP_PROXY=%q", p)
		}
		gateways := podIPs(t, n, "egret-system", "app.kubernetes.io/name=egret-gateway")
		if r := get(t, n, ns, "client", "app", "http://origin.example/"); !slices.Contains(gateways, r.RemoteIP) {
			t.Errorf("HTTP reached the origin from %s, not from a gateway %v", r.RemoteIP, gateways)
		}
	}) {
		t.FailNow()
	}
	step("install")

	// helm upgrade with --reuse-values (docs/kubernetes.md): a values
	// change (policy.enabled, as docs/policy.md turns it on) and a new
	// image tag (the same image, tagged 0.1.1 in containerd as a registry
	// would serve a new release). Webhook and gateway roll to it, stay
	// Available with zero restarts, and pods injected after it get the
	// new sidecar image.
	const newTag = "0.1.1"
	newImage := "ghcr.io/egret-io/egret:" + newTag
	if !t.Run("upgrade", func(t *testing.T) {
		for _, pair := range [][2]string{{realnode.EgretImage, newImage}, {realnode.EgretIptablesImage, newImage + "-iptables"}} {
			if out, err := n.Ctr("images", "tag", "--force", pair[0], pair[1]); err != nil {
				t.Fatalf("ctr tag: %v\n%s", err, out)
			}
		}
		in.helmT(t, "upgrade", "egret", "deploy/helm/egret", "-n", "egret-system", "--reuse-values",
			"--set", "policy.enabled=true", "--set", "image.tag="+newTag)
		in.image = newImage
		in.available(t, in.image)
		for _, d := range []string{"egret-webhook", "egret-gateway"} {
			var dep appsv1.Deployment
			got, err := n.Client.AppsV1().Deployments("egret-system").Get(context.Background(), d, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			dep = *got
			if dep.Status.UpdatedReplicas != *dep.Spec.Replicas || dep.Status.AvailableReplicas != *dep.Spec.Replicas {
				t.Errorf("%s: %d updated, %d available of %d", d, dep.Status.UpdatedReplicas, dep.Status.AvailableReplicas, *dep.Spec.Replicas)
			}
		}
		if out := n.KubectlT(t, "get", "crd", "egresspolicies.egret.io", "-o", "name"); !strings.Contains(out, "egresspolicies") {
			t.Errorf("policy.enabled did not install the CRD: %s", out)
		}

		// Then pinned by digest, as a release's chart pins its images
		// (image.digest; image.iptables required with it). containerd
		// knows the digest references as a pull would record them.
		pinned := "ghcr.io/egret-io/egret@" + imageDigest(t, n, realnode.EgretImage)
		ipinned := "ghcr.io/egret-io/egret@" + imageDigest(t, n, realnode.EgretIptablesImage)
		for _, pair := range [][2]string{{realnode.EgretImage, pinned}, {realnode.EgretIptablesImage, ipinned}} {
			if out, err := n.Ctr("images", "tag", "--force", pair[0], pair[1]); err != nil {
				t.Fatalf("ctr tag: %v\n%s", err, out)
			}
		}
		in.helmT(t, "upgrade", "egret", "deploy/helm/egret", "-n", "egret-system", "--reuse-values",
			"--set", "image.digest="+strings.TrimPrefix(pinned, "ghcr.io/egret-io/egret@"), "--set", "image.iptables="+ipinned)
		in.image = pinned
		in.available(t, in.image)
	}) {
		t.FailNow()
	}
	step("upgrade")

	t.Run("client-go", in.clientGo)
	step("client-go")
	t.Run("policy", func(t *testing.T) { in.policy(t, in.image) })
	step("policy")
	t.Run("discovery", in.discovery)
	step("discovery")
	t.Run("doctor", in.doctor)
	step("doctor")
	t.Run("gateway-pod-deleted", in.gatewayDeleted)
	step("gateway-pod-deleted")
	t.Run("webhook-down", in.webhookDown)
	step("webhook-down")
	t.Run("rotation", in.rotation)
	step("rotation")
	t.Run("drain", in.drain)
	step("drain")

	// The documented uninstall: new pods of an opted-in namespace are
	// created without injection; the CRDs stay (crds.keep).
	t.Run("uninstall", func(t *testing.T) {
		in.helmT(t, "uninstall", "egret", "-n", "egret-system")
		for _, kind := range []string{"mutatingwebhookconfiguration", "validatingwebhookconfiguration"} {
			if out, _ := n.KubectlCmd(context.Background(), "get", kind, "egret", "-o", "name").Output(); len(out) > 0 {
				t.Errorf("%s egret left after helm uninstall", kind)
			}
		}
		ns := namespace(t, n, "helm-after", map[string]string{"egret.io/inject": "enabled"})
		after := clientPod(t, n, ns, "after")
		if _, ok := envOf(after.Spec.Containers[0], "HTTP_PROXY"); ok || len(after.Spec.InitContainers) > 0 {
			t.Errorf("a pod created after helm uninstall was injected: %+v", after.Spec)
		}
		if out := n.KubectlT(t, "get", "crd", "egresspolicies.egret.io", "-o", "name"); !strings.Contains(out, "egresspolicies") {
			t.Errorf("crds.keep: the CRD went with the release")
		}
	})
	step("uninstall")
}

// imageDigest is the digest containerd records for an image reference
// (the index the harness imported).
func imageDigest(t testing.TB, n *realnode.Node, ref string) string {
	t.Helper()
	out, err := n.Ctr("images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == ref && strings.HasPrefix(f[2], "sha256:") {
			return f[2]
		}
	}
	t.Fatalf("containerd has no image %s:\n%s", ref, out)
	return ""
}
