package webhook

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The pod's projected service-account token for a gateway that identifies
// workloads (EGRET_POLICY, docs/policy.md): the sidecar sends it in
// Proxy-Authorization (Bearer) to the gateway, which verifies it with a
// TokenReview. Its audience is egret, so it opens nothing else (not the
// API server); the kubelet refreshes the file before it expires and the
// sidecar re-reads it.
const (
	TokenVolume    = "egret-token"
	TokenMountPath = "/var/run/secrets/egret.io/serviceaccount"
	TokenAudience  = "egret"
	tokenPath      = "token"
	// tokenExpiry is the token's lifetime; the kubelet renews it at 80%.
	tokenExpiry = 3600
)

// addGatewayToken adds the projected token volume to spec (unless a volume
// of that name is there) and mounts it into the sidecar c, which reads it
// through EGRET_UPSTREAM_TOKEN_FILE.
func addGatewayToken(spec *corev1.PodSpec, c *corev1.Container) {
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == TokenVolume }) {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: TokenVolume, VolumeSource: corev1.VolumeSource{
			Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: TokenAudience, ExpirationSeconds: ptr.To[int64](tokenExpiry), Path: tokenPath}}}}}})
	}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: TokenVolume, MountPath: TokenMountPath, ReadOnly: true})
	c.Env = append(c.Env, corev1.EnvVar{Name: "EGRET_UPSTREAM_TOKEN_FILE", Value: TokenMountPath + "/" + tokenPath})
}
