// Package proxyauth is how egret authenticates itself to upstream proxies:
// Basic, NTLM and Negotiate (Kerberos).
//
// Basic (RFC 7617) is a header on every request; NTLM ([MS-NLMP] over HTTP
// as [MS-NTHT] describes it) and Negotiate (RFC 4559, Kerberos through
// SPNEGO) authenticate the connection they run on.
//
// A Handshake is one authentication of one connection: its First value
// goes in the first request's Proxy-Authorization field, and Next answers
// the proxy's 407 (its Proxy-Authenticate challenges) with the next value —
// NTLM's Type 3 message after the Type 2 challenge — or with an *Error
// naming what failed. NTLM messages come from github.com/Azure/go-ntlmssp;
// Kerberos tickets from github.com/jcmturner/gokrb5 (pure Go: no system
// Kerberos library, no credential cache on disk), with one client per
// credential, logged in once and renewed by gokrb5 (Kerberos).
//
// Errors say what failed — the proxy refused the credential, it does not
// offer the scheme, its NTLM challenge cannot be answered, the KDC refused
// the password, knows no such service principal, cannot be reached, the
// clocks differ, the realm is unknown — and never hold a password, a hash,
// a token or a ticket.
package proxyauth
