package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"egret.io/egret/internal/route"
	"egret.io/egret/internal/testutil/secretvol"
)

// TestEnvDir: a mounted Secret's keys are read as settings, under the
// environment; each Load reads the directory again (what a reload sees);
// an empty directory (an optional Secret not created yet) is no error, a
// missing one is; files that are no setting are named in a note, never
// their content.
func TestEnvDir(t *testing.T) {
	vol := secretvol.New(t, nil)
	src := Sources{Env: env("EGRET_ENV_DIR", vol.Dir), DefaultCredentialsDir: "-"}
	p := load(t, src)
	if p.EnvDir != vol.Dir || p.Default != route.Direct || len(p.Pools[DefaultPool].Members) != 0 {
		t.Fatalf("empty settings directory: env dir %q, default %v, pools %v", p.EnvDir, p.Default, p.Pools)
	}
	// The Secret appears (kubectl create secret --from-literal: no newline;
	// --from-file: one).
	vol.Update(t, map[string]string{"UPSTREAM_PROXY": "http://user:s3cret@proxy.corp:3128\n", "NO_PROXY": ".internal.example", "token": "s3cret-too"})
	p = load(t, src)
	if p.Default != route.Upstream || len(p.Pools[DefaultPool].Members) != 1 {
		t.Fatalf("UPSTREAM_PROXY from the directory: default %v, pools %v", p.Default, p.Pools)
	}
	if m := p.Pools[DefaultPool].Members[0]; m.URL.Host != "proxy.corp:3128" || m.Password != "s3cret" {
		t.Errorf("member %s (password %q)", m.URL.Redacted(), m.Password)
	}
	if d := decide(t, p, "a.internal.example:443"); d.Action != route.Direct {
		t.Errorf("NO_PROXY from the directory: %v", d)
	}
	notes := strings.Join(p.Notes, "\n")
	if !strings.Contains(notes, "token not read") || strings.Contains(notes, "s3cret") {
		t.Errorf("notes: %q", notes)
	}
	// The environment wins, and says so.
	withEnv := src
	withEnv.Env = env("EGRET_ENV_DIR", vol.Dir, "UPSTREAM_PROXY", "http://other.corp:8080")
	p = load(t, withEnv)
	if m := p.Pools[DefaultPool].Members; len(m) != 1 || m[0].URL.Host != "other.corp:8080" {
		t.Errorf("the environment does not win over the directory: %v", m)
	}
	if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.Contains(n, "UPSTREAM_PROXY also set in the environment") }) {
		t.Errorf("no note for the shadowed setting: %q", p.Notes)
	}
	// A bad value in the directory is the configuration's error, with the
	// variable's name and without the password.
	vol.Update(t, map[string]string{"UPSTREAM_PROXY": "ftp://user:s3cret@proxy.corp:3128"})
	if _, err := Load(src); err == nil || !strings.Contains(err.Error(), "UPSTREAM_PROXY") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("bad UPSTREAM_PROXY in the directory: %v", err)
	}
	// The Secret is deleted: back to direct.
	vol.Update(t, map[string]string{})
	for _, f := range []string{"UPSTREAM_PROXY", "NO_PROXY", "token"} {
		os.Remove(filepath.Join(vol.Dir, f)) // the kubelet removes the links of keys that went
	}
	if p = load(t, src); p.Default != route.Direct {
		t.Errorf("after the Secret went: default %v", p.Default)
	}
	// The flag names it too; a directory that is not there is an error
	// that names the fix.
	_, err := Load(Sources{Env: env(), Flags: map[string]string{"EGRET_ENV_DIR": filepath.Join(vol.Dir, "nope")}, DefaultCredentialsDir: "-"})
	if err == nil || !strings.Contains(err.Error(), "no such directory (mount the Secret or ConfigMap there") {
		t.Errorf("missing settings directory: %v", err)
	}
}
