// Command coredns is CoreDNS v1.15 with only the plugins the real-node tests
// use (internal/testutil/realnode): cluster names from the API server and
// nothing forwarded, so no test name ever reaches a real resolver. It is a
// separate module so that CoreDNS never becomes a dependency of egret.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The order in which a query passes the plugins (CoreDNS' plugin.cfg).
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "hosts", "kubernetes"}
}

func main() { coremain.Run() }
