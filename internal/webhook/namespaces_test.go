package webhook

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// failingReader answers every Get with err.
type failingReader struct {
	client.Reader
	err error
}

func (f failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return f.err
}

// LiveNamespaces answers from the API server (a stale cache is not read),
// falls back to the cache when the API server fails, and reports a
// namespace that is gone as gone.
func TestLiveNamespaces(t *testing.T) {
	ns := func(mode string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Annotations: map[string]string{ModeAnnotation: mode}}}
	}
	live := fake.NewClientBuilder().WithObjects(ns("sidecar")).Build()
	stale := fake.NewClientBuilder().WithObjects(ns("gateway")).Build()
	ctx := context.Background()
	key := client.ObjectKey{Name: "shop"}

	var got corev1.Namespace
	if err := (LiveNamespaces{API: live, Cache: stale}).Get(ctx, key, &got); err != nil || got.Annotations[ModeAnnotation] != "sidecar" {
		t.Errorf("live read: %v, mode %q, want sidecar (the API server's)", err, got.Annotations[ModeAnnotation])
	}
	down := failingReader{err: errors.New("connection refused")}
	got = corev1.Namespace{}
	if err := (LiveNamespaces{API: down, Cache: stale}).Get(ctx, key, &got); err != nil || got.Annotations[ModeAnnotation] != "gateway" {
		t.Errorf("API server down: %v, mode %q, want the cache's gateway", err, got.Annotations[ModeAnnotation])
	}
	gone := failingReader{err: apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "shop")}
	if err := (LiveNamespaces{API: gone, Cache: stale}).Get(ctx, key, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("a namespace gone from the API server: %v, want NotFound (not the cache's copy)", err)
	}
}
