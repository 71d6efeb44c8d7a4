package webhook

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// liveNamespaceTimeout bounds the live read of a pod's Namespace, well
// inside the API server's webhook timeout (5 s by default).
const liveNamespaceTimeout = 2 * time.Second

// LiveNamespaces reads a pod's Namespace from the API server at admission,
// so a label or annotation set a moment before the pod (egret.io/mode,
// egret.io/validation) is the one applied: the informer cache may not have
// seen it yet. When the live read fails for another reason than the
// namespace being gone (API server slow or unreachable), it falls back to
// the cache, which is at most a watch behind.
type LiveNamespaces struct {
	API   client.Reader // live reads (the manager's APIReader)
	Cache client.Reader // the informer cache; nil: no fallback
}

func (l LiveNamespaces) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	lctx, cancel := context.WithTimeout(ctx, liveNamespaceTimeout)
	err := l.API.Get(lctx, key, obj, opts...)
	cancel()
	if err == nil || apierrors.IsNotFound(err) || l.Cache == nil {
		return err
	}
	log.FromContext(ctx).Info("live namespace read failed: using the cache", "namespace", key.Name, "error", err.Error())
	return l.Cache.Get(ctx, key, obj, opts...)
}

func (l LiveNamespaces) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return l.Cache.List(ctx, list, opts...)
}
