package doctor

import (
	"os"
	"testing"

	"egret.io/egret/internal/testutil"
	"egret.io/egret/internal/testutil/kubetest"
)

// TestMain starts the test API server (the run record reads the pod's own
// object from it) and removes the egret binary the tests built.
func TestMain(m *testing.M) {
	code := kubetest.Main(m)
	testutil.RemoveEgretBinary()
	os.Exit(code)
}
