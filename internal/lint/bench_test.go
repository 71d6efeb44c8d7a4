package lint

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkCheckPod measures the webhook's per-pod cost: one app container
// with both-case proxy variables and a NO_PROXY, and a native sidecar.
func BenchmarkCheckPod(b *testing.B) {
	always := corev1.ContainerRestartPolicyAlways
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "egret", Image: "ghcr.io/egret-io/egret:1", RestartPolicy: &always, Args: []string{"proxy"}}},
		Containers:     []corev1.Container{{Name: "app", Image: "python:3.12-slim", Env: allCases("http://127.0.0.1:3128", goodNP+",10.96.0.0/12")}},
	}
	in := PodInput{Object: ObjectRef{Kind: "Pod", Namespace: "shop", Name: "web"}, Spec: spec}
	b.ReportAllocs()
	for b.Loop() {
		if fs := CheckPod(in); len(fs) == 0 {
			b.Fatal("no finding")
		}
	}
}
