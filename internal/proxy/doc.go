// Package proxy is egret's data plane: the listeners that accept clients —
// the explicit HTTP listener (absolute-URI forwarding and CONNECT), the
// transparent listener (iptables REDIRECT, SO_ORIGINAL_DST, SNI/Host
// sniffing) and the SOCKS5 listener — and the flow every request and
// tunnel takes:
//
//	accept (accept.go: the loop every listener shares, the client's
//	connection slot) → admit (admit.go: client allow-list and limits,
//	destination, loop check, route, deny, the approved address a member
//	is asked for, destination limits) → dial (dial.go: direct through the
//	SSRF guard, or through an upstream pool's Do; failures typed by
//	internal/transport) → relay or forward → one log line (accesslog.go)
//
// Each connection has its own context, derived from the server's, which
// Shutdown cancels when it cuts connections off.
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
