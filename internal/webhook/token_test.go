package webhook

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"egret.io/egret/internal/testutil/kubetest"
)

// sidecarOf returns the pod's egret sidecar, or nil.
func sidecarOf(p *corev1.Pod) *corev1.Container {
	for i := range p.Spec.InitContainers {
		if p.Spec.InitContainers[i].Name == SidecarName {
			return &p.Spec.InitContainers[i]
		}
	}
	return nil
}

// TestGatewayToken: with --gateway-token, a sidecar chained to the gateway
// gets the pod's projected service-account token (audience egret) and
// EGRET_UPSTREAM_TOKEN_FILE naming it; the real API server accepts the
// pod; mutating again adds nothing; off by default, and not for a sidecar
// whose upstream comes from a Secret or in gateway mode (no sidecar).
func TestGatewayToken(t *testing.T) {
	cluster := testCluster()
	sidecar := map[string]string{ModeAnnotation: "sidecar"}
	mutate := func(t *testing.T, p *corev1.Pod, mut func(*Config)) *corev1.Pod {
		t.Helper()
		r := Mutate(p, Input{Policy: testPolicy(t, mut), Namespace: ns("shop", optedIn, nil), Cluster: cluster})
		if r.Denied != "" || r.Skipped != "" {
			t.Fatalf("denied %q, skipped %q", r.Denied, r.Skipped)
		}
		return r.Pod
	}
	on := func(c *Config) { c.GatewayToken = true }
	got := mutate(t, pod(sidecar), on)
	var vol *corev1.Volume
	for i := range got.Spec.Volumes {
		if got.Spec.Volumes[i].Name == TokenVolume {
			vol = &got.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Projected == nil || len(vol.Projected.Sources) != 1 || vol.Projected.Sources[0].ServiceAccountToken == nil {
		t.Fatalf("no projected token volume: %+v", got.Spec.Volumes)
	}
	if sat := vol.Projected.Sources[0].ServiceAccountToken; sat.Audience != "egret" || sat.Path != "token" || sat.ExpirationSeconds == nil {
		t.Errorf("token projection %+v", sat)
	}
	sc := sidecarOf(got)
	if v, _ := env(*sc, "EGRET_UPSTREAM_TOKEN_FILE"); v != TokenMountPath+"/token" {
		t.Errorf("EGRET_UPSTREAM_TOKEN_FILE=%q", v)
	}
	if len(sc.VolumeMounts) != 1 || sc.VolumeMounts[0].MountPath != TokenMountPath || !sc.VolumeMounts[0].ReadOnly {
		t.Errorf("sidecar mounts %+v", sc.VolumeMounts)
	}
	for _, c := range got.Spec.Containers {
		if len(c.VolumeMounts) != 0 {
			t.Errorf("container %s got a mount: only the sidecar reads the token", c.Name)
		}
	}
	again := mutate(t, got, on)
	if len(again.Spec.Volumes) != len(got.Spec.Volumes) || len(sidecarOf(again).VolumeMounts) != 1 {
		t.Error("mutating twice added the token twice")
	}

	for name, mut := range map[string]func(*Config){
		"off-by-default":     nil,
		"upstream-secret":    func(c *Config) { on(c); c.UpstreamSecret = "proxy" },
		"gateway-mode-alone": on,
	} {
		t.Run(name, func(t *testing.T) {
			p := pod(sidecar)
			if name == "gateway-mode-alone" {
				p = pod(nil)
			}
			got := mutate(t, p, mut)
			if len(got.Spec.Volumes) != 0 {
				t.Errorf("volumes %+v", got.Spec.Volumes)
			}
			if sc := sidecarOf(got); sc != nil {
				if _, ok := env(*sc, "EGRET_UPSTREAM_TOKEN_FILE"); ok {
					t.Error("EGRET_UPSTREAM_TOKEN_FILE set")
				}
			}
		})
	}

	t.Run("api-server-accepts-the-pod", func(t *testing.T) {
		kc := kubetest.Require(t)
		nsName := kc.Namespace(t, "token", nil)
		p := got.DeepCopy()
		p.Namespace = nsName
		// What the ServiceAccount admission plugin sets before the webhooks
		// run (the test API server runs without it): a projected token
		// needs a service account.
		p.Spec.ServiceAccountName = "default"
		created, err := kc.Clientset.CoreV1().Pods(nsName).Create(context.Background(), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the API server refused the mutated pod: %v", err)
		}
		if sidecarOf(created) == nil || len(created.Spec.Volumes) == 0 {
			t.Errorf("stored pod lost the sidecar or the volume")
		}
	})
}
