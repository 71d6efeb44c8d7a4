package identity

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podSelector leaves out the pods that can never own an address: those on
// their node's network, and finished ones (a pod that finishes leaves the
// watch as a deletion).
const podSelector = "spec.hostNetwork=false,status.phase!=Succeeded,status.phase!=Failed"

// Watch keeps ps in step with the cluster's pods until ctx ends: a
// Reflector lists and watches them (relisting after a watch fails) and
// feeds ps directly, so no other copy of the pods is kept. It returns when
// ctx is done.
func Watch(ctx context.Context, cs kubernetes.Interface, ps *Pods) {
	pods := cs.CoreV1().Pods(metav1.NamespaceAll)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = podSelector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = podSelector
			return pods.Watch(ctx, o)
		},
	}
	r := cache.NewReflectorWithOptions(lw, &corev1.Pod{}, ps, cache.ReflectorOptions{Name: "egret-pods"})
	r.RunWithContext(ctx)
}

// WaitSynced waits until ps has received its first full list, or ctx ends.
func WaitSynced(ctx context.Context, ps *Pods) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !ps.Synced() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods not listed: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
	return nil
}
