// Package route decides where a request or tunnel goes: direct, through an
// upstream pool, or nowhere (deny).
//
// A Table is an ordered list of rules; the first rule that matches decides,
// otherwise the table's default does. Matchers are exact hosts, DNS suffixes,
// CIDRs and ports. A CIDR matches IP literals and also names whose resolved
// addresses fall inside it; names are resolved only when a CIDR could decide
// the outcome, once per decision, through the Resolver passed in. Loopback
// destinations are always direct and are never sent to an upstream.
//
// Deciding is pure apart from that lookup: Decide returns a Decision value
// carrying the reason, which is logged, counted and shown to users. A Table is
// immutable once built and safe for concurrent use.
package route
