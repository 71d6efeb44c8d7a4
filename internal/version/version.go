// Package version is egret's build identity: the version (from the git
// tag), the commit, whether the work tree had uncommitted changes, the build
// date and the Go version. `make build` sets the first four with -ldflags
// (LDFlags shows the flags); a build without them (go build, go run) falls
// back to what the Go toolchain stamped into the binary, and to "dev".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set with -ldflags "-X egret.io/egret/internal/version.version=..." (see
// LDFlags); empty when the build did not set them.
var (
	version string // git describe --tags --always --dirty
	commit  string // the full commit hash
	dirty   string // "true" or "false"
	date    string // the build date, RFC 3339
)

// Package is the import path the -X flags name.
const Package = "egret.io/egret/internal/version"

// Info is what `egret version` prints, the image labels and the
// egret_build_info metric show.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Dirty     bool   `json:"dirty"`
	BuildDate string `json:"build_date"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// Get returns this binary's build identity.
func Get() Info {
	i := Info{Version: version, Commit: commit, Dirty: dirty == "true", BuildDate: date,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		fill(&i, bi)
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	return i
}

// fill completes i from the toolchain's stamp: the main module's version
// (Go derives it from the tag) and the vcs.* settings, where the -X flags
// left a field empty.
func fill(i *Info, bi *debug.BuildInfo) {
	s := map[string]string{}
	for _, kv := range bi.Settings {
		s[kv.Key] = kv.Value
	}
	if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		i.Version = bi.Main.Version
	}
	if i.Commit == "" {
		i.Commit = s["vcs.revision"]
	}
	if dirty == "" && s["vcs.modified"] == "true" {
		i.Dirty = true
	}
	if i.BuildDate == "" {
		i.BuildDate = s["vcs.time"]
	}
}

// LDFlags returns the -X flags that stamp i into a build of egret (the
// Makefile writes the same ones).
func LDFlags(i Info) string {
	return fmt.Sprintf("-X %[1]s.version=%[2]s -X %[1]s.commit=%[3]s -X %[1]s.dirty=%[4]t -X %[1]s.date=%[5]s",
		Package, i.Version, i.Commit, i.Dirty, i.BuildDate)
}

// String is the one line of `egret --version`.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "egret %s", i.Version)
	var parts []string
	if i.Commit != "" {
		tree := "clean"
		if i.Dirty {
			tree = "dirty"
		}
		parts = append(parts, "commit "+i.Commit+" ("+tree+")")
	}
	if i.BuildDate != "" {
		parts = append(parts, "built "+i.BuildDate)
	}
	parts = append(parts, i.GoVersion+" "+i.Platform)
	fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	return b.String()
}
