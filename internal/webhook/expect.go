package webhook

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"egret.io/egret/internal/discovery"
	"egret.io/egret/internal/stamp"
)

// Expect returns what the webhook would inject now into a pod of
// namespace ns that was stamped s (its mode) and carries annotations: the
// values the drift controller compares stamps with. false while the
// cluster NO_PROXY is not discovered (nothing is known to be stale then).
func (h *Handlers) Expect(ctx context.Context, ns *corev1.Namespace, s stamp.Stamp, annotations map[string]string) (stamp.Current, bool) {
	var cur stamp.Current
	if h.Cluster == nil {
		return cur, false
	}
	cluster := h.Cluster()
	if cluster == nil {
		return cur, false
	}
	adds, _ := discovery.NamespaceAdditions(ns)
	cur.NoProxy = stamp.Hash(cluster.With(adds).Value())
	p := h.Policy
	mode, err := ParseMode(s.Mode)
	if err != nil {
		return cur, true // a mode this egret does not know: only NO_PROXY compares
	}
	cur.Proxy, _, _ = p.proxyFor(mode)
	if mode != Gateway {
		cur.Image = p.Image
		uid := p.SidecarUID
		if v, ok := annotations[SidecarUIDAnnotation]; ok {
			if u, err := parseUID(v); err == nil {
				uid = u
			}
		}
		cur.ProxyUID = stamp.UID(uid)
	}
	if mode == Transparent {
		cur.IptablesImage = p.IptablesImage
	}
	if h.Upstream != nil && p.UpstreamSecret != "" {
		cur.UpstreamVersion = func(secret string) (string, bool) {
			if secret != p.UpstreamSecret {
				return "", false // the pod's came from another --upstream-secret
			}
			return h.Upstream.Get(ctx, ns.Name, secret), true
		}
	}
	if h.Trust != nil {
		if t := h.Trust(); t != nil {
			cur.TrustDigest = t.Digest
		}
	}
	if h.TrustBundle != nil {
		cur.TrustInNamespace = func() (string, string, bool) {
			b, err := h.TrustBundle(ctx, ns.Name)
			if err != nil || b == nil {
				return "", "", false
			}
			if !b.Contents.Matches(b.PEMDigest) {
				return "inconsistent", b.UID, true // the store holds other certificates than the PEM
			}
			return b.PEMDigest, b.UID, true
		}
	}
	return cur, true
}
