// Package echo is `egret echo`: an HTTP server that answers every request
// with JSON describing it — the caller's address as the server sees it (the
// egress IP), method, URL, protocol and headers. Tests and `egret doctor`
// use it to see what a proxy changed.
package echo
