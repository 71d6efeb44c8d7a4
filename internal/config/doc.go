// Package config turns egret proxy's configuration — a YAML file, the
// environment of real sidecar manifests, and command-line flags — into one
// validated, immutable model.
//
// There are three layers. File is the wire schema (YAML, strings, versioned).
// The environment and flags are applied on top of a File, in that order, so
// the precedence is: flags > environment > file > built-in defaults. For list
// settings (DIRECT_CIDRS, ...) a later layer replaces the earlier list; it
// does not append. Compile validates the result and produces a Proxy with
// real types (route rules, upstream members, durations).
//
// Flags and environment variables share one set of keys (see Keys): a flag
// is applied as if its key were set in the environment. Credentials are only
// read from the environment or files, never from flags, so they never appear
// in a process's argv.
package config
