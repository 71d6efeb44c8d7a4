// Package stamp is the record egret's webhook leaves on every pod it
// injects: annotation egret.io/injected-state, a small JSON object holding
// one value per part of what was injected — a hash of the NO_PROXY value,
// the proxy URL, the sidecar and iptables images, the sidecar's UID, the
// version of the upstream Secret the sidecar reads, and the trust bundle
// (its ConfigMap, owner, UID and content digest).
//
// Compare tells which parts of a pod's stamp differ from the values the
// webhook would inject now (Current): the drift report (`egret pods
// --stale`), its metric and the opt-in restarts all read one answer. The
// package depends on nothing of Kubernetes, so `egret doctor` can read a
// stamp too.
package stamp
