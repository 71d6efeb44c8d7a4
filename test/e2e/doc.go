// Package e2e runs the built egret binary the way users do: with the
// environment of a real sidecar manifest, real clients (curl, Python
// requests), a real Squid with Basic auth as the upstream, origins in a
// network namespace the test creates, and real signals for the drain.
//
// The tests need root (network namespaces) and the tools installed by
// `make test-deps`; without them they skip, or fail under EGRET_REQUIRE_ALL=1.
package e2e
