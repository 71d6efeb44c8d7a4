// Package identity tells the egress gateway who a client is, in Kubernetes'
// terms: its pod, namespace, service account and labels.
//
// By address: Pods is an index of the cluster's pods by IP, fed by a
// client-go Reflector (Watch) that keeps only the fields the gateway needs
// (about 300 bytes a pod; pods with the same namespace and labels share one
// LabelSet). An address that no live pod claims, or that two claim at once
// (an IP being reused while the informer catches up), has no owner: the
// caller gives it the cluster default, never another pod's policy.
// hostNetwork pods share their node's address and are never indexed.
//
// By token: Tokens verifies a pod's projected service-account token with
// the API server's TokenReview (audience egret by default), caching each
// answer until the token expires, within a bounded cache, and limiting the
// reviews in flight.
package identity
