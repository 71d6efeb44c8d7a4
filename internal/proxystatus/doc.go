// Package proxystatus is the one place that turns a failure egret itself
// produces into what the client sees: an HTTP status, an RFC 9209
// Proxy-Status header naming egret and the error type, and a one-line
// plain-text body.
//
// Packages that fail on the way to a destination (resolve, upstream, proxy)
// return *Error values, or wrap them; the listener maps whatever it got with
// From and writes it with Write. Details never include secrets: an upstream
// is named by its redacted URL, never with its user info.
package proxystatus
