package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFillFromToolchainStamp(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}}}
	var i Info
	fill(&i, bi)
	if i.Version != "v0.3.0" || i.Commit != "0123abcd" || !i.Dirty || i.BuildDate != "2026-01-02T03:04:05Z" {
		t.Errorf("from the stamp: %+v", i)
	}
	// -X values win over the stamp.
	i = Info{Version: "v1.0.0", Commit: "feed", BuildDate: "2027-01-01T00:00:00Z"}
	fill(&i, bi)
	if i.Version != "v1.0.0" || i.Commit != "feed" || i.BuildDate != "2027-01-01T00:00:00Z" {
		t.Errorf("-X values lost: %+v", i)
	}
	i = Info{}
	fill(&i, &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}})
	if i.Version != "" || i.Commit != "" {
		t.Errorf("a devel build: %+v", i)
	}
}

func TestString(t *testing.T) {
	i := Info{Version: "v0.3.0-2-gabc-dirty", Commit: "abc", Dirty: true, BuildDate: "2026-01-02T03:04:05Z", GoVersion: "go1.26.8", Platform: "linux/arm64"}
	if got, want := i.String(), "egret v0.3.0-2-gabc-dirty (commit abc (dirty), built 2026-01-02T03:04:05Z, go1.26.8 linux/arm64)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := (Info{Version: "dev", GoVersion: "go1.26.8", Platform: "linux/amd64"}).String(); got != "egret dev (go1.26.8 linux/amd64)" {
		t.Errorf("String() = %q", got)
	}
	if f := LDFlags(i); !strings.Contains(f, "-X egret.io/egret/internal/version.commit=abc") || !strings.Contains(f, ".dirty=true") {
		t.Errorf("LDFlags = %q", f)
	}
}
