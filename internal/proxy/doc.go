// Package proxy is egret's data plane: the listeners that accept clients —
// the explicit HTTP listener (absolute-URI forwarding and CONNECT), the
// transparent listener (iptables REDIRECT, SO_ORIGINAL_DST, SNI/Host
// sniffing) and the SOCKS5 listener — and the flow every request and
// tunnel takes:
//
//	accept → admit (admit.go: client allow-list and limits, destination,
//	loop check, route, deny, destination limits) → dial (dial.go: direct
//	through the SSRF guard, or through an upstream pool's Do) → relay or
//	forward → one log line (accesslog.go)
//
// Each listener speaks only its protocol and hands the destination it
// parsed to admit. Forwarded requests (forward.go, respond.go) are
// policy — where a request goes, when it may be sent again, what the
// client is answered — over internal/http1's wire.
//
// A Server holds an immutable State (routes and pools) behind an atomic
// pointer so a reload swaps it without stopping traffic, and everything
// that must outlive a reload (tunnels, metrics, the idle connections)
// beside it. internal/proxyd builds it from a configuration and runs the
// process around it.
package proxy
