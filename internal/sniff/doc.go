// Package sniff peeks at the first bytes a client sends, without consuming
// them, to learn the name it wants: the SNI of a TLS ClientHello or the Host
// of an HTTP/1 request. The transparent listener uses it to route a
// redirected connection by name and to send a name-based CONNECT upstream.
//
// Sniff reads from the connection and returns every byte it read in
// Result.Peeked; the caller replays them first (NewConn, or by writing them
// upstream before relaying). Reading is bounded in size (Options.MaxBytes)
// and time (Options.FirstByteTimeout for the first byte, so server-first
// protocols such as SMTP or MySQL are not held up long, and
// Options.Timeout in all). ParseClientHello and ParseHTTP are the pure,
// incremental parsers underneath; both are fuzzed.
package sniff
