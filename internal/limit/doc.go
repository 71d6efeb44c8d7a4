// Package limit protects destinations and the proxy itself: per-destination
// circuit breakers, per-destination rate and concurrency limits, and
// per-client concurrency limits.
//
// Everything here sits on the request path, so the common case is cheap: a
// breaker costs one lock-free map lookup for a destination that has not
// failed lately, and nothing is allocated for destinations that stay within
// their limits. The maps are bounded; an entry that holds no state (closed
// breaker, full token bucket, nothing in flight) is dropped when room is
// needed.
package limit
