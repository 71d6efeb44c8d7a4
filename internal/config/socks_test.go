package config

import (
	"os"
	"strings"
	"testing"
)

func TestSOCKSAuth(t *testing.T) {
	files := map[string]string{"/run/secrets/socks/password": "from-file\n", "/run/secrets/empty": ""}
	read := func(name string) ([]byte, error) {
		if v, ok := files[name]; ok {
			return []byte(v), nil
		}
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	}
	long := strings.Repeat("x", 256)
	tests := []struct {
		name     string
		env      map[string]string
		wantUser string
		wantPass string
		wantErr  string // substring; "" = no error
		wantNote string // substring of a note; "" = no note about SOCKS
	}{
		{name: "no-auth-on-loopback", env: map[string]string{"SOCKS_LISTEN_ADDR": "127.0.0.1:1080"}},
		{name: "no-auth-on-all-interfaces-is-noted", env: map[string]string{"SOCKS_LISTEN_ADDR": ":1080"}, wantNote: "without authentication"},
		{name: "user-and-pass", env: map[string]string{"SOCKS_LISTEN_ADDR": ":1080", "SOCKS_USER": "app", "SOCKS_PASS": "p@ss"}, wantUser: "app", wantPass: "p@ss"},
		{name: "pass-file-trims-newline", env: map[string]string{"SOCKS_LISTEN_ADDR": "127.0.0.1:1080", "SOCKS_USER": "app", "SOCKS_PASS_FILE": "/run/secrets/socks/password"}, wantUser: "app", wantPass: "from-file"},
		{name: "pass-without-user", env: map[string]string{"SOCKS_PASS": "p"}, wantErr: "SOCKS_PASS is set without SOCKS_USER"},
		{name: "user-without-pass", env: map[string]string{"SOCKS_USER": "app"}, wantErr: "SOCKS_USER is set without SOCKS_PASS"},
		{name: "pass-and-file", env: map[string]string{"SOCKS_USER": "app", "SOCKS_PASS": "p", "SOCKS_PASS_FILE": "/run/secrets/socks/password"}, wantErr: "both set"},
		{name: "missing-file", env: map[string]string{"SOCKS_USER": "app", "SOCKS_PASS_FILE": "/nonexistent"}, wantErr: "SOCKS_PASS_FILE: open /nonexistent"},
		{name: "empty-file", env: map[string]string{"SOCKS_USER": "app", "SOCKS_PASS_FILE": "/run/secrets/empty"}, wantErr: "is empty"},
		{name: "user-too-long", env: map[string]string{"SOCKS_USER": long, "SOCKS_PASS": "p"}, wantErr: "at most 255"},
		{name: "password-too-long", env: map[string]string{"SOCKS_USER": "app", "SOCKS_PASS": long}, wantErr: "at most 255"},
		{name: "credentials-without-listener-are-noted", env: map[string]string{"SOCKS_USER": "app", "SOCKS_PASS": "p"}, wantUser: "app", wantPass: "p", wantNote: "listener is off"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			p, err := Load(Sources{Env: env, ReadFile: read, Flags: map[string]string{}})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), long) || (tc.env["SOCKS_PASS"] != "" && strings.Contains(err.Error(), tc.env["SOCKS_PASS"]) && len(tc.env["SOCKS_PASS"]) > 1) {
					t.Errorf("the error shows a credential: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantUser == "" && p.SOCKSAuth != nil:
				t.Errorf("SOCKSAuth = %+v, want none", *p.SOCKSAuth)
			case tc.wantUser != "" && (p.SOCKSAuth == nil || p.SOCKSAuth.User != tc.wantUser || p.SOCKSAuth.Password != tc.wantPass):
				t.Errorf("SOCKSAuth = %+v, want %s/%s", p.SOCKSAuth, tc.wantUser, tc.wantPass)
			}
			var note string
			for _, n := range p.Notes {
				if strings.Contains(n, "SOCKS") {
					note = n
				}
				if tc.wantPass != "" && strings.Contains(n, tc.wantPass) {
					t.Errorf("a note shows the password: %q", n)
				}
			}
			if (tc.wantNote == "") != (note == "") || !strings.Contains(note, tc.wantNote) {
				t.Errorf("notes %q, want one containing %q", p.Notes, tc.wantNote)
			}
		})
	}
}

// TestSOCKSCredentialsAreNotFlags keeps passwords off the command line:
// the SOCKS credential keys have no flag.
func TestSOCKSCredentialsAreNotFlags(t *testing.T) {
	for _, k := range Keys {
		if strings.HasPrefix(k.Env, "SOCKS_") && k.Env != "SOCKS_LISTEN_ADDR" && k.Flag != "" {
			t.Errorf("%s has flag --%s: credentials must come from the environment or a file", k.Env, k.Flag)
		}
	}
}
