// Package proxy is egret's data plane: the listeners that accept clients
// (HTTP forward proxy with absolute-URI requests and CONNECT; transparent and
// SOCKS5 listeners build on the same Dial and relay path) and the flow every
// request takes:
//
//	accept → classify (parse the destination) → route (route.Table) →
//	dial (direct, or through an upstream pool) → relay → one log line
//
// A Server holds an immutable State (routes and pools) behind an atomic
// pointer so a reload swaps it without stopping traffic, and everything that
// must outlive a reload (tunnels, metrics, the HTTP transport) beside it.
package proxy
