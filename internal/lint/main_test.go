package lint

import (
	"testing"

	"egret.io/egret/internal/testutil"
)

// TestMain fails a full run that leaves a golden file unused.
func TestMain(m *testing.M) { testutil.Main(m) }
