package webhook

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestSidecarResources: the webhook's defaults (--sidecar-*), a pod's
// annotations over them, the image pull Secrets added once, a bad
// annotation or a request above its limit refused with the annotation's
// name, and a second mutation changes nothing.
func TestSidecarResources(t *testing.T) {
	p := testPolicy(t, func(c *Config) {
		c.Mode = "sidecar"
		c.SidecarResources = SidecarResources{CPURequest: "30m", MemoryRequest: "40Mi", MemoryLimit: "200Mi"}
		c.ImagePullSecrets = []string{"mirror-pull", "corp-pull"}
	})
	in := Input{Policy: p, Namespace: ns("shop", optedIn, nil), Cluster: testCluster()}
	sidecar := func(pd *corev1.Pod) corev1.Container {
		t.Helper()
		for _, c := range pd.Spec.InitContainers {
			if c.Name == SidecarName {
				return c
			}
		}
		t.Fatalf("no sidecar in %v", pd.Spec.InitContainers)
		return corev1.Container{}
	}
	res := Mutate(pod(nil), in)
	r := sidecar(res.Pod).Resources
	if r.Requests.Cpu().String() != "30m" || r.Requests.Memory().String() != "40Mi" || r.Limits.Memory().String() != "200Mi" || !r.Limits.Cpu().IsZero() {
		t.Errorf("defaults from the flags: %v", r)
	}
	if got := res.Pod.Spec.ImagePullSecrets; len(got) != 2 || got[0].Name != "mirror-pull" || got[1].Name != "corp-pull" {
		t.Errorf("image pull Secrets: %v", got)
	}
	again := Mutate(res.Pod, in)
	if len(again.Pod.Spec.ImagePullSecrets) != 2 || again.Denied != "" {
		t.Errorf("second mutation: %v %q", again.Pod.Spec.ImagePullSecrets, again.Denied)
	}

	withPull := pod(map[string]string{ProxyCPURequestAnnotation: "100m", ProxyMemoryLimitAnnotation: "1Gi", ProxyCPULimitAnnotation: "2"})
	withPull.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "corp-pull"}}
	res = Mutate(withPull, in)
	r = sidecar(res.Pod).Resources
	if r.Requests.Cpu().String() != "100m" || r.Requests.Memory().String() != "40Mi" || r.Limits.Memory().String() != "1Gi" || r.Limits.Cpu().String() != "2" {
		t.Errorf("annotations over the flags: %v", r)
	}
	if got := res.Pod.Spec.ImagePullSecrets; len(got) != 2 || got[0].Name != "corp-pull" || got[1].Name != "mirror-pull" {
		t.Errorf("the pod's own pull Secret kept first, ours added once: %v", got)
	}
	// The app containers are not touched.
	if c := res.Pod.Spec.Containers[0]; len(c.Resources.Requests)+len(c.Resources.Limits) != 0 {
		t.Errorf("app container resources changed: %v", c.Resources)
	}

	for _, tc := range []struct {
		ann  map[string]string
		want string
	}{
		{map[string]string{ProxyMemoryRequestAnnotation: "lots"}, `annotation egret.io/proxy-memory-request: "lots" is not a quantity`},
		{map[string]string{ProxyCPURequestAnnotation: "-1"}, `annotation egret.io/proxy-cpu-request: "-1" is not a quantity`},
		{map[string]string{ProxyMemoryRequestAnnotation: "1Gi"}, "memory request 1Gi is above its limit 200Mi"},
	} {
		res := Mutate(pod(tc.ann), in)
		if !strings.Contains(res.Denied, tc.want) {
			t.Errorf("%v: denied %q, want %q", tc.ann, res.Denied, tc.want)
		}
	}
	// Gateway mode adds no sidecar and no pull Secret.
	res = Mutate(pod(map[string]string{ModeAnnotation: "gateway"}), in)
	if len(res.Pod.Spec.ImagePullSecrets) != 0 {
		t.Errorf("gateway mode added pull Secrets")
	}
	// A bad flag is refused at start.
	if _, err := (Config{Mode: "sidecar", Image: "egret:test", GatewayURL: "http://g:3128", SidecarResources: SidecarResources{CPULimit: "two"}}).Compile(""); err == nil || !strings.Contains(err.Error(), `--sidecar-cpu-limit "two"`) {
		t.Errorf("bad --sidecar-cpu-limit: %v", err)
	}
}
