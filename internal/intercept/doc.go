// Package intercept is egret's selective TLS interception: for the
// destinations a policy marks, it terminates the client's TLS with a leaf
// certificate it issues on the fly from egret's interception CA, originates
// a new, verified TLS connection to the destination, and proxies HTTP/1.1
// and HTTP/2 between them — applying the destination's method and path
// rules and injecting the credential egret holds for it, so the workload
// never has it. Everything else stays an opaque tunnel, and so do the
// exempted names (pinned-certificate and client-certificate origins).
//
// The parts, in the order a tunnel meets them:
//
//   - Authority and Issuer: the CA egret signs with (loaded from the
//     files of one Secret, reloaded on rotation, with the previous or next
//     CA kept trusted for the overlap) and the leaf issuer: ECDSA P-256,
//     short-lived leaves, one per name, kept in a bounded cache so a repeat
//     name costs no signature. LeafName decides the one name a leaf is for:
//     the CONNECT target and the TLS server name must agree.
//   - Engine: given a client connection whose CONNECT was admitted and a
//     function that dials the admitted destination, it runs the client's
//     handshake (ALPN h2 and http/1.1), then serves the requests on it,
//     each sent on over a TLS connection to the origin verified against
//     the system roots plus the configured CAs — never skipped. Bodies
//     stream both ways; WebSocket upgrades and server-sent events pass
//     through.
//   - Site: what egret does inside one intercepted destination for one
//     workload: its L7 Rules (allow or deny by method and path, enforced
//     or reported) and its Injections (a header from a Secret that
//     replaces whatever the client sent).
//
// A credential value never reaches a log line, an error, a Proxy-Status
// header, a metric or an answer: Injection values are held in a type that
// prints as its name only, and every message names the Secret file, not
// its content.
package intercept
