// Package doctor runs the in-pod egress runbook (`egret doctor`): the proxy
// variables in both cases and PID 1's real environment, DNS for internal and
// external names, the egress IP seen by an `egret echo` with and without the
// proxy, the proxy's answer to a CONNECT decoded (407 credentials, 403
// policy, 502/503 NO_PROXY hole or dead target, refused, timeout), the
// internal names and ClusterIP reached directly, and what each runtime in
// the image would do with those URLs (package noproxy's client models).
//
// Each check is a Check{Name, Target, Run} built by Checks from Options and
// Deps; one file per check (check_*.go). RunChecks runs them in parallel,
// each under a deadline; a network failure is a result, never an error.
// Every Result says pass, warn or fail, what was seen and what to do.
// WriteText and WriteJSON render the outcomes.
//
// Everything the checks read from the system is injectable through Deps (the
// process environment, /proc/1/environ, resolv.conf, the resolver, the
// dialer, PATH lookup), so tests run unprivileged or inside a network
// namespace of their own. Proxy credentials never appear in a result: URLs
// are shown redacted.
package doctor
