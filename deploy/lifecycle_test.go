package deploy

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/testutil/kubetest"
)

// TestKustomizeReapplyAndUninstall: a user's edit of the additions
// ConfigMap survives a re-apply without --force-conflicts (no field-manager
// conflict: the manifests do not declare its data); docs/kubernetes.md's
// uninstall steps (webhook configurations first, then the rest, then
// egret's ConfigMaps and labels in application namespaces) leave nothing.
func TestKustomizeReapplyAndUninstall(t *testing.T) {
	kc := kubetest.Require(t)
	ctx := context.Background()
	c, err := client.New(kc.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs, _ := render(t, "overlays/default")
	apply := func() error {
		for _, o := range objs {
			// kubectl apply --server-side, no --force-conflicts: the same
			// field manager as the install (TestApplyToAPIServer's).
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("egret-deploy-test")); err != nil {
				return err
			}
		}
		return nil
	}
	if err := apply(); err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: "egret-system", Name: "egret-noproxy"}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"NO_PROXY": "registry.corp.example"}
	if err := c.Update(ctx, &cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	if err := apply(); err != nil {
		t.Fatalf("re-apply after a user edit: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(&cm), &cm); err != nil || cm.Data["NO_PROXY"] != "registry.corp.example" {
		t.Fatalf("the user's additions did not survive re-apply: %v %v", cm.Data, err)
	}

	// What the webhook leaves in an application namespace.
	app := kc.Namespace(t, "uninstall-app", map[string]string{discovery.InjectLabel: discovery.InjectEnabled})
	left := &corev1.ConfigMap{}
	left.Namespace, left.Name = app, discovery.ConfigMapName
	left.Labels = map[string]string{discovery.ManagedByLabel: "egret", discovery.PartOfLabel: "egret"}
	if err := c.Create(ctx, left); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// Uninstall, as docs/kubernetes.md says: 1. the webhook configurations.
	for _, o := range objs {
		if o.GetKind() == "MutatingWebhookConfiguration" || o.GetKind() == "ValidatingWebhookConfiguration" {
			if err := c.Delete(ctx, o.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
	// Nothing calls egret now: a pod in an opted-in namespace is admitted
	// with the webhook gone (failurePolicy Fail no longer applies).
	p := &corev1.Pod{}
	p.Namespace, p.Name = app, "after-uninstall"
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app:1"}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatalf("pod refused after the webhook configurations were removed: %v", err)
	}
	// 2. the rest (kubectl delete -k), 3. egret's ConfigMaps and labels.
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			// kubectl delete -k deletes it too; the test API server runs no
			// namespace controller, so it would stay Terminating and block
			// the tests after this one.
			continue
		}
		if err := c.Delete(ctx, o.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if err := c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(app), client.MatchingLabels{discovery.ManagedByLabel: "egret"}); err != nil {
		t.Fatal(err)
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: app}, &ns); err != nil {
		t.Fatal(err)
	}
	delete(ns.Labels, discovery.InjectLabel)
	if err := c.Update(ctx, &ns); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue // the test API server runs no namespace controller
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err == nil {
			t.Errorf("%s %s left after uninstall", o.GetKind(), o.GetName())
		}
	}
	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms, client.InNamespace(app), client.MatchingLabels{discovery.ManagedByLabel: "egret"}); err != nil || len(cms.Items) != 0 {
		t.Errorf("egret's ConfigMaps left: %d %v", len(cms.Items), err)
	}
}
