// Package transport is the one way egret talks to what it dials — origins
// and upstream proxies alike — and the typed errors it returns, which
// failover and Proxy-Status read with errors.As:
//
//   - NotSent: the attempt failed before the request could have reached
//     the origin; any method may be tried again;
//   - ClientGone: the client left or could not be written to; logged,
//     never answered, never blamed on a destination or a member;
//   - Upstream: a member's own refusal, with its status (UpstreamStatus).
//
// Attempt types a failed attempt once, where it happened, so nothing
// downstream infers "not sent" from a field or "client gone" from a
// string.
package transport
