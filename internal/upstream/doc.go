// Package upstream reaches destinations through upstream proxies: members
// (http://, https:// and socks5:// proxies with optional credentials),
// pools of members with round-robin selection that skip a member when it
// fails, and the CONNECT handshake through a member.
//
// Credentials are decoded from the member URL's user info once, when the
// member is parsed (so "p%40ss" is the password "p@ss"), and are never part
// of a member's Name, its errors or anything logged.
package upstream
