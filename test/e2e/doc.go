// Package e2e holds end-to-end tests that run the built egret binary the
// way a cluster does, against real clients and a real Squid, in network
// namespaces the tests create (root only; they skip without it, and fail
// under EGRET_REQUIRE_ALL=1).
//
// transparent_linux_test.go is the pod of issue 5: `egret iptables apply`
// in a "pod" namespace, the sidecar as UID 1337 with the transparent and
// SOCKS5 listeners, an application as another UID without any proxy
// variable, an upstream Squid with Basic auth on the pod's gateway (a "gw"
// namespace) and origins in an "outside" namespace.
package e2e
