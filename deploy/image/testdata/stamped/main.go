// Command stamped is a small binary that carries the build stamp, the
// second platform of TestImageLayout's index (compiling all of egret for
// another architecture would double the test's cost).
package main

import (
	"fmt"

	"egret.io/egret/internal/version"
)

func main() { fmt.Println(version.Get()) }
