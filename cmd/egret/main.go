// Command egret makes outbound traffic from Kubernetes pods go through proxies
// correctly: a forward proxy (sidecar and gateway), transparent interception,
// an admission webhook and the tools that explain and prove it.
package main

import (
	"os"

	"egret.io/egret/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
