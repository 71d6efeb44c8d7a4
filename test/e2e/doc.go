// Package e2e runs the built egret binary the way users do: with the
// environment of a real sidecar manifest, real clients (curl, Python
// requests, openssl s_client), a real Squid with Basic auth as the
// upstream, origins in network namespaces the test creates, and real
// signals for the drain.
//
// transparent_linux_test.go is the pod of issue 5: `egret iptables apply`
// in a "pod" namespace, the sidecar as UID 1337 with the transparent and
// SOCKS5 listeners, an application as another UID without any proxy
// variable, an upstream Squid with Basic auth on the pod's gateway (a "gw"
// namespace) and origins in an "outside" namespace.
//
// The tests need root (network namespaces) and the tools installed by
// `make test-deps`; without them they skip, or fail under EGRET_REQUIRE_ALL=1.
package e2e
