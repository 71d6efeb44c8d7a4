// Package transport is the one way egret talks to what it dials — origins
// and upstream proxies alike. One Transport, keyed like its idle pool
// (Key: member, scheme, address, credential identity), owns:
//
//   - the dial: destinations at the addresses admission approved
//     (DialAddrs), members (DialMember), TLS to https origins and members;
//   - tunnels through a member (OpenTunnel, DialTunnel with Pool.Do's
//     failover): CONNECT with the Basic, NTLM and Negotiate rounds on one
//     connection, or SOCKS5;
//   - forwarded requests (RoundTrip): directly or through members, in
//     absolute form or through a tunnel, NTLM's negotiate round first on
//     a new connection, the idle keep-alive connections by Key.
//
// Nothing else in the data plane dials (internal/deptest checks it). The
// wire of a request (framing, bodies, 1xx) is internal/http1's; the
// members' order and health internal/upstream's.
//
// Its errors are typed, and failover and Proxy-Status read them with
// errors.As:
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
