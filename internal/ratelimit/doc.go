// Package ratelimit enforces a workload's limits at the egress gateway: new
// requests and tunnels per unit of time, and requests and tunnels in
// flight.
//
// Local keeps a token bucket and a counter per workload in the gateway
// replica (the default); its table of workloads is bounded. Service sends
// each new request's hit to an Envoy rate-limit service (gRPC
// envoy.service.ratelimit.v3, such as envoyproxy/ratelimit with Redis), so
// the rate holds across every gateway replica; the limit itself travels in
// the request (a descriptor limit override), so the service needs only the
// domain in its configuration. When the service fails or is slow, the
// request is let through (fail open) or refused (fail closed), as set.
// Concurrency is always counted locally.
package ratelimit
