// Package upstream keeps the upstream proxies egret reaches destinations
// through: members, pools, their order, failover and health. It does not
// dial: internal/transport talks to members (dial, TLS, CONNECT, SOCKS5,
// the Basic/NTLM/Negotiate handshakes, requests in absolute form) and runs
// each attempt Pool.Do hands it; probes go through the transport too
// (Opener).
//
// A Member is one http://, https:// or socks5:// proxy with a weight, an
// optional backup flag and credentials (its own, from its URL, or the
// shared, rotating credentials.Store of its pool). A Pool orders its members
// for each attempt by a Policy (round-robin, random, least-connections or
// sticky per destination, all weighted), healthy primaries first, then
// healthy backups; members in back-off are left out, and when none is left
// the pool is unavailable (egret answers 503, never direct).
//
// Health is passive and active. An attempt that fails because of the member
// (it cannot be reached, resets the connection, or answers CONNECT with 407,
// 403 or a 5xx that does not blame the destination) marks the member down
// for a back-off that doubles with each consecutive failure up to a maximum;
// a success resets it. Probes (a CONNECT to a configured target on an
// interval) mark members up or down between requests. Health lives in the
// Member and survives a change of the member list (SetMembers keeps the
// state of members whose URL stays).
//
// Credentials are decoded from the member URL's user info once, when the
// member is parsed (so "p%40ss" is the password "p@ss"), and are never part
// of a member's Name, its errors or anything logged.
package upstream
