// Package deploy holds egret's Kubernetes manifests (Kustomize bases,
// overlays and components) and the tests that render them with the kustomize
// Go API, lint them with egret's own rules and apply them to a real
// kube-apiserver. It has no code of its own.
package deploy
