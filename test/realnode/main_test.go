// Package realnode holds the end-to-end scenarios on a real single-node
// cluster (internal/testutil/realnode): the shipped manifests, the image
// from the project's image builder, real pods, kubelet and containerd.
package realnode

import (
	"os"
	"testing"

	"egret.io/egret/internal/testutil/realnode"
)

func TestMain(m *testing.M) { os.Exit(realnode.Main(m)) }
