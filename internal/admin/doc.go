// Package admin serves egret's admin listener: /healthz (the process is
// alive), /readyz (listeners are up and, when a pool is required, a member
// is usable), /metrics (Prometheus) and a small status page.
package admin
