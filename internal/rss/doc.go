// Package rss keeps egret's resident memory to what it actually uses.
//
// egret is one binary with many commands; Go runs every linked package's
// initialisation at start, so a proxy also touches the Kubernetes client
// libraries' code and type data once (scheme registration), and those pages
// then stay resident for the life of a sidecar that never runs that code
// again. ReleaseCode drops the binary's read-only, file-backed pages from
// the process: they are clean copies of the executable, so any page still
// in use faults straight back in from the page cache, and the resident set
// shrinks to the working set.
package rss
