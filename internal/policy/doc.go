// Package policy is per-workload egress at the gateway: the EgressPolicy
// custom resource (egret.io/v1alpha1, namespaced) and the cluster default
// (the ClusterEgressPolicy named "default"), their validation and status,
// and their compilation into the route tables the gateway already
// evaluates (package route).
//
// Compile turns one policy into rules; an invalid one denies everything to
// the pods it would select, so a mistake never opens anything. Engine
// holds the compiled policies as immutable snapshots and, for a client
// identified by package identity (its pod's address, or a verified
// service-account token), returns the Effective policy: the policies that
// apply combined by precedence — any matching deny wins, then the most
// specific selector decides, then the cluster default — with report-only
// policies judged beside the enforced ones. Effective policies are cached
// per label set and snapshot, so a decision costs a few map lookups.
//
// Watch feeds an Engine from the API server (dynamic informers on both
// resources) and writes each policy's Accepted condition; Explain answers
// `egret policy explain`.
package policy
