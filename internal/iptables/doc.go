// Package iptables writes, prints, removes and validates the NAT rules of
// egret's transparent mode (the `egret iptables` init container).
//
// Rules are data: Build turns a Config into a Ruleset (egret's own chains
// EGRET_OUTPUT and EGRET_REDIRECT, one jump from the built-in OUTPUT chain,
// an `egret:` comment on every rule) and the Ruleset renders as
// iptables-restore text. The operating system sits behind a Runner. A
// Manager applies a Ruleset as check (iptables-save) -> clean residue ->
// restore in one `iptables-restore --noflush` transaction, so applying twice
// leaves the same rules and Remove leaves nothing. Detect picks iptables-nft
// or iptables-legacy the way Kubernetes' iptables-wrapper does: whichever
// already holds rules in this network namespace. Probe confirms that the
// redirect really works before the application starts.
//
// Chain names starting with EGRET_ are reserved for egret: residue in such
// chains is deleted by Apply and Remove.
package iptables
