// Package drift finds the pods egret injected with values that have
// changed since — the cluster's NO_PROXY, the proxy, the sidecar's image or
// UID, the upstream Secret, the trust bundle — and, where a workload or its
// namespace opted in, restarts them the way `kubectl rollout restart`
// does: one workload at a time, never when a PodDisruptionBudget would not
// allow it, with a dry run.
//
// Compare is pure: the pods' stamps (package stamp) and what the webhook
// would inject now in, a Report out. Plan is pure too: a Report and the
// workloads' state in, the next restart (or why none) out. Controller runs
// both in the webhook's elected leader and publishes the Report in a
// ConfigMap of egret's namespace, which `egret pods --stale` and `egret
// status` read, and as metrics.
package drift
