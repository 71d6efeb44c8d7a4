// Package socks5 is the server side of SOCKS version 5 (RFC 1928) with
// username/password authentication (RFC 1929), for the proxy's SOCKS
// listener.
//
// Handshake reads the greeting, negotiates the method (no authentication,
// or username/password checked by Auth.Check), and reads the request. It
// answers protocol failures itself — no acceptable method, bad credentials,
// an unknown address type, and the commands egret does not serve (BIND,
// UDP ASSOCIATE: "command not supported") — and returns the CONNECT request
// otherwise, leaving the connection between request and reply: the proxy
// routes and dials, then calls Reply exactly once with the outcome
// (ReplyCodeFor maps a dial error to a reply code) and relays.
//
// Handshake reads exactly the bytes of the protocol, never more, so the
// connection can be relayed as is afterwards. The pure encoders and parsers
// (ReadGreeting, ReadUserPass, ReadRequest, AppendReply, AppendRequest) are
// exported for tests and clients; the parsers are fuzzed.
package socks5
