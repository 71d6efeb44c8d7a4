package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// TestNamespaceReadFailsClosed: when neither the API server nor the cache
// can tell the pod's Namespace, both handlers answer with an error (the
// API server's failurePolicy decides), never "allowed" without injection.
func TestNamespaceReadFailsClosed(t *testing.T) {
	pod := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "shop"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "shop",
		Object: runtime.RawExtension{Raw: raw}}}
	down := failingReader{err: errors.New("connection refused")}
	h := &Handlers{Policy: &Policy{}, Namespaces: LiveNamespaces{API: down, Cache: down}}
	for name, handle := range map[string]func(context.Context, admission.Request) admission.Response{"mutate": h.mutate, "validate": h.validate} {
		resp := handle(context.Background(), req)
		if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusInternalServerError || len(resp.Patches) != 0 {
			t.Errorf("%s with no namespace read: allowed=%v result=%+v", name, resp.Allowed, resp.Result)
		}
	}
}
