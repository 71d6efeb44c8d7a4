// Package kubetest runs a real kube-apiserver and etcd for tests, built from
// source by scripts/deps/30-kube.sh into a cache, and driven by
// controller-runtime's envtest (no kubectl, no downloads).
//
// One API server per test binary: start it from TestMain with Main, then call
// Require in each test. Without the binaries a test skips, or fails when
// EGRET_REQUIRE_ALL=1 (CI). Tests share the server, so each test works in its
// own namespaces (Namespace makes a unique one).
package kubetest
