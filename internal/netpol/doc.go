// Package netpol makes "egress only via the gateway" a computed object
// instead of a hand-patched file: a NetworkPolicy per opted-in namespace
// that lets its pods reach the cluster DNS pods, the cluster's own ranges
// (as package discovery finds them for NO_PROXY) and the egress gateway's
// pods on its proxy port — nothing else.
//
// Render is pure: the namespace and Inputs (the DNS and gateway peers, the
// cluster ranges) in, the NetworkPolicy out. ReadPeers reads the peers from
// the kube-dns and gateway Services. Controller runs in the webhook's
// elected leader and keeps the policy current in every namespace labelled
// Label=Enabled. Evaluate answers, for a set of NetworkPolicies, whether a
// pod may reach a destination — the NetworkPolicy semantics `egret lint`
// and the tests judge policies with.
package netpol
