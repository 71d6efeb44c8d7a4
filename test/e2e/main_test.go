package e2e

import (
	"fmt"
	"os"
	"testing"

	"egret.io/egret/internal/testutil"
)

// egretBin is the binary under test, built once by TestMain.
var egretBin string

func TestMain(m *testing.M) {
	var err error
	if egretBin, err = testutil.EgretBinary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testutil.Main(m)
}
