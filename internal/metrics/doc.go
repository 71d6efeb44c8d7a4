// Package metrics is egret's one metric catalog. Every metric egret exports
// is declared here, named egret_<subsystem>_<name>_<unit>, with labels from
// closed sets only (kind, action, reason, pool, member, status class, error
// type): never a raw destination host, client address or anything secret.
//
// A *Metrics is created per process (or per test) with New and registered on
// its own prometheus.Registry; a nil *Metrics is valid and records nothing.
package metrics
