package webhook

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"egret.io/egret/internal/stamp"
)

// Versions of the upstream Secret a stamp records besides its
// resourceVersion.
const (
	// UpstreamAbsent: the Secret did not exist (the sidecar's envFrom is
	// optional).
	UpstreamAbsent = ""
	// UpstreamUnknown: egret could not read it (RBAC, API error).
	UpstreamUnknown = stamp.VersionUnknown
)

// UpstreamVersions reads the resourceVersion of a namespace's upstream
// Secret — its metadata only, never its data — with a short cache: the
// stamp records it, the drift report compares it. Reading needs RBAC get
// on Secrets of that one name (resourceNames); without it every version is
// UpstreamUnknown and never reported stale.
type UpstreamVersions struct {
	// API reads uncached (the manager's API reader).
	API client.Reader
	// TTL is how long an answer is kept; 0 means 30 seconds.
	TTL time.Duration

	mu   sync.Mutex
	seen map[types.NamespacedName]upstreamSeen
}

type upstreamSeen struct {
	version string
	at      time.Time
}

// Get returns the Secret's version: its resourceVersion, UpstreamAbsent or
// UpstreamUnknown.
func (u *UpstreamVersions) Get(ctx context.Context, namespace, name string) string {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	ttl := u.TTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	u.mu.Lock()
	if s, ok := u.seen[key]; ok && time.Since(s.at) < ttl {
		u.mu.Unlock()
		return s.version
	}
	u.mu.Unlock()
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	v := UpstreamUnknown
	switch err := u.API.Get(ctx, key, m); {
	case err == nil:
		v = m.ResourceVersion
	case apierrors.IsNotFound(err):
		v = UpstreamAbsent
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == nil || len(u.seen) > 10000 {
		u.seen = map[types.NamespacedName]upstreamSeen{}
	}
	u.seen[key] = upstreamSeen{version: v, at: time.Now()}
	return v
}
