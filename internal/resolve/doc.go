// Package resolve looks destination names up for routing and dialing: a
// cache in front of the system resolver (or configured name servers), with
// static host entries, a TTL for answers, negative caching of failures,
// stale answers served when a refresh fails, and concurrent lookups of one
// name collapsed into one query. A *Cache is safe for concurrent use.
package resolve
