// Package proxyd is the egret proxy process: it turns a configuration
// (internal/config) into the live proxy (internal/proxy) — routes, pools
// and their members with their health table, the hardening and limits —
// opens the listeners and the admin endpoint (internal/admin), follows the
// credential directory, the member files and the configuration file itself
// (internal/watch; SIGHUP too), reloads routes, rules and pools without a
// restart, keeps memory trimmed, and drains on shutdown.
//
// It is the one place that wires the process: internal/proxy knows nothing
// of configuration files, admin pages or file watches.
package proxyd
