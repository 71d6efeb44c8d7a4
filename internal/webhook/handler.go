package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"egret.io/egret/internal/discovery"
)

// Paths the webhook server serves.
const (
	MutatePath   = "/mutate"
	ValidatePath = "/validate"
)

// Handlers are the admission front ends of Mutate and Validate.
type Handlers struct {
	// Policy is the webhook policy; required.
	Policy *Policy
	// Cluster returns the current cluster NO_PROXY (discovery.Controller's
	// Current); nil results make Mutate skip with a warning.
	Cluster func() *discovery.Result
	// Namespaces reads the pod's Namespace (LiveNamespaces: the API server,
	// the informer cache when it cannot answer).
	Namespaces client.Reader
	// Trust returns the CA bundle egret last published (TrustController's
	// Current); nil: no CA injection configured.
	Trust func() *TrustState
	// TrustBundle looks up the TrustConfigMapName ConfigMap of a namespace
	// (TrustBundles.Get); nil: none is ever mounted.
	TrustBundle func(ctx context.Context, namespace string) (*TrustBundle, error)
	// CreateTrustBundle, when set, builds the bundle and writes a
	// namespace's bundle ConfigMap when it has none, for a pod that arrives
	// before the tracker or the writer, and returns the bundle it built and the ConfigMap as
	// the API server then holds it (TrustController.Create, then
	// TrustBundles.Live).
	CreateTrustBundle func(ctx context.Context, namespace string) (*TrustState, *TrustBundle, error)
	// Upstream reads the version of the upstream Secret (the policy's
	// UpstreamSecret) in a namespace; nil: not recorded.
	Upstream *UpstreamVersions
}

// Mutator returns the /mutate handler.
func (h *Handlers) Mutator() *admission.Webhook {
	return &admission.Webhook{Handler: admission.HandlerFunc(h.mutate)}
}

// Validator returns the /validate handler.
func (h *Handlers) Validator() *admission.Webhook {
	return &admission.Webhook{Handler: admission.HandlerFunc(h.validate)}
}

// decoder decodes admission objects. It is built on first use: the scheme
// of every built-in type costs half a MiB, which the other commands of the
// binary (the proxy above all) should not pay at start-up.
var decoder = sync.OnceValue(func() admission.Decoder {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	return admission.NewDecoder(s)
})

func (h *Handlers) input(ctx context.Context, req admission.Request) (*corev1.Pod, Input, error) {
	var pod corev1.Pod
	if err := decoder().Decode(req, &pod); err != nil {
		return nil, Input{}, fmt.Errorf("decode pod: %w", err)
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	in := Input{Policy: h.Policy}
	if h.Cluster != nil {
		in.Cluster = h.Cluster()
	}
	if h.Trust != nil {
		in.Trust = h.Trust()
	}
	var ns corev1.Namespace
	if err := h.Namespaces.Get(ctx, types.NamespacedName{Name: pod.Namespace}, &ns); err != nil {
		return nil, in, fmt.Errorf("get namespace %s: %w", pod.Namespace, err)
	}
	in.Namespace = &ns
	if h.Policy.UpstreamSecret != "" && h.Upstream != nil {
		in.UpstreamVersion = h.Upstream.Get(ctx, ns.Name, h.Policy.UpstreamSecret)
	}
	if h.Policy.Trust != nil && h.TrustBundle != nil && ns.Labels[discovery.InjectLabel] == discovery.InjectEnabled {
		b, err := h.TrustBundle(ctx, ns.Name)
		if err != nil {
			return nil, in, err
		}
		in.TrustBundle = b
		if (b == nil || in.Trust == nil) && h.CreateTrustBundle != nil {
			if off, _ := trustOptOut(&pod, &ns); !off {
				// The window after an install or a new namespace: the
				// tracker has not built the bundle or the writer has not
				// written this namespace's yet. Build and write it now
				// rather than admit the pod without the CA (Mutate
				// refuses what is still missing).
				st, b, err := h.CreateTrustBundle(ctx, ns.Name)
				if err != nil {
					log.FromContext(ctx).Error(err, "trust bundle not written for an arriving pod", "namespace", ns.Name)
				} else {
					if in.Trust == nil {
						in.Trust = st
					}
					in.TrustBundle = b
				}
			}
		}
	}
	return &pod, in, nil
}

func (h *Handlers) mutate(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("egret mutates on create only")
	}
	pod, in, err := h.input(ctx, req)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	res := Mutate(pod, in)
	lg := log.FromContext(ctx)
	if res.Denied != "" {
		lg.Info("pod refused", "namespace", pod.Namespace, "reason", res.Denied)
		return admission.Denied(res.Denied).WithWarnings(res.Warnings...)
	}
	if res.Mode == 0 || equality.Semantic.DeepEqual(pod, res.Pod) {
		return admission.Allowed(res.Skipped).WithWarnings(res.Warnings...)
	}
	raw, err := json.Marshal(res.Pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encode pod: %w", err))
	}
	lg.V(1).Info("pod injected", "namespace", pod.Namespace, "mode", res.Mode.String(), "warnings", len(res.Warnings))
	return admission.PatchResponseFromRaw(req.Object.Raw, raw).WithWarnings(res.Warnings...)
}

func (h *Handlers) validate(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	pod, in, err := h.input(ctx, req)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	res := Validate(pod, in)
	if res.Denied != "" {
		return admission.Denied(res.Denied).WithWarnings(res.Warnings...)
	}
	return admission.Allowed("").WithWarnings(res.Warnings...)
}
