// Package proxy is egret's data plane: the listeners that accept clients
// (HTTP forward proxy with absolute-URI requests and CONNECT; transparent and
// SOCKS5 listeners build on the same Dial and relay path) and the flow every
// request takes:
//
//	accept → classify (parse the destination) → route (route.Table) →
//	dial (direct, or through an upstream pool) → relay → one log line
//
// The explicit listener runs egret's own HTTP/1.1 engine (engine.go,
// forward.go, origin.go) on net/http's message primitives: a goroutine per
// client connection reads requests with http.ReadRequest; CONNECT becomes a
// tunnel on the same connection; an absolute-URI request is written to a
// pooled keep-alive connection to the origin or upstream member, its body
// and the response streamed, hop-by-hop fields stripped and Via added.
//
// A Server holds an immutable State (routes and pools) behind an atomic
// pointer so a reload swaps it without stopping traffic, and everything that
// must outlive a reload (tunnels, metrics, the pool of origin connections)
// beside it.
package proxy
