package main

import (
	"testing"

	"egret.io/egret/internal/testutil"
)

// TestMain removes the egret binary the tests built once they are done.
func TestMain(m *testing.M) { testutil.Main(m) }
