//go:build !linux

package netns

import "testing"

// Require skips t: network namespaces exist only on Linux.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	t.Skip("network namespaces need Linux")
}
