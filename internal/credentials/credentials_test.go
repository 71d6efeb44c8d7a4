package credentials

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"egret.io/egret/internal/testutil/secretvol"
)

func TestStoreRotation(t *testing.T) {
	a, b, c := New("u", "a"), New("u", "b"), New("u", "c")
	tests := []struct {
		name         string
		steps        func(s *Store)
		cur, fb      *Credential
		wantRetired  int
		wantRotating bool
	}{
		{"initial-has-no-fallback", func(s *Store) {}, a, nil, 0, false},
		{"rotation-keeps-previous", func(s *Store) { s.Set(b) }, b, a, 0, true},
		{"confirm-new-drops-previous", func(s *Store) { s.Set(b); s.Confirm(b) }, b, nil, 1, false},
		{"confirm-old-keeps-waiting", func(s *Store) { s.Set(b); s.Confirm(a) }, b, a, 0, true},
		{"second-rotation-before-success-keeps-known-good", func(s *Store) { s.Confirm(a); s.Set(b); s.Set(c) }, c, a, 0, true},
		{"second-rotation-after-success", func(s *Store) { s.Set(b); s.Confirm(b); s.Set(c) }, c, b, 1, true},
		{"rotate-back-to-fallback", func(s *Store) { s.Confirm(a); s.Set(b); s.Set(New("u", "a")) }, nil, nil, 0, false},
		{"same-value-is-no-change", func(s *Store) { s.Set(New("u", "a")) }, a, nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore(a)
			var retired int
			s.OnRetire(func() { retired++ })
			tt.steps(s)
			if tt.cur != nil && !s.Current().Same(tt.cur) {
				t.Errorf("current = %v, want %v", s.Current(), tt.cur)
			}
			if !s.Fallback().Same(tt.fb) {
				t.Errorf("fallback = %v, want %v", s.Fallback(), tt.fb)
			}
			if retired != tt.wantRetired {
				t.Errorf("retire hook ran %d times, want %d", retired, tt.wantRetired)
			}
			if s.Rotating() != tt.wantRotating {
				t.Errorf("Rotating = %v", s.Rotating())
			}
		})
	}
}

func TestCredentialNeverPrintsPassword(t *testing.T) {
	c := New("alice", "s3cret-pw")
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, c); strings.Contains(out, "s3cret") {
			t.Errorf("%s printed the password: %s", f, out)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, user, pass string
		wantUser, wantPw string
		wantErr          string
	}{
		{"plain", "alice", "pw", "alice", "pw", ""},
		{"trailing-newline", "alice\n", "pw\r\n", "alice", "pw", ""},
		{"inner-spaces-kept", "alice", " p w ", "alice", " p w ", ""},
		{"empty-password-allowed", "alice", "", "alice", "", ""},
		{"empty-user", "", "pw", "", "", "username file is empty"},
		{"colon-in-user", "a:b", "pw", "", "", "colon"},
		{"two-line-password", "alice", "a\nb\n", "", "", "more than one line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse([]byte(tt.user), []byte(tt.pass), nil, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), tt.pass) && tt.pass != "" {
					t.Errorf("error holds the password: %v", err)
				}
				return
			}
			if err != nil || c.User != tt.wantUser || c.Password != tt.wantPw {
				t.Fatalf("got %q/%q, %v", c.User, c.Password, err)
			}
		})
	}
}

func TestParseKerberos(t *testing.T) {
	kt := []byte{5, 2, 0, 0}
	c, err := parse([]byte("alice@CORP.EXAMPLE\n"), nil, kt, []byte("[libdefaults]\n"))
	if err != nil || c.User != "alice@CORP.EXAMPLE" || c.Password != "" || c.Keytab == nil || c.Krb5Conf == nil {
		t.Fatalf("keytab without a password: %v, %v", c, err)
	}
	if s := fmt.Sprint(c); s != "user alice@CORP.EXAMPLE (keytab)" {
		t.Errorf("printed %q", s)
	}
	if c.Same(New("alice@CORP.EXAMPLE", "")) || !c.Same(NewKerberos("alice@CORP.EXAMPLE", "", kt, []byte("[libdefaults]\n"))) {
		t.Error("Same ignores the keytab or krb5.conf")
	}
	if _, err := parse([]byte("alice"), nil, nil, nil); err == nil || !strings.Contains(err.Error(), "password") {
		t.Errorf("no password and no keytab: %v", err)
	}
	if _, err := parse([]byte("alice"), nil, []byte{}, nil); err == nil || !strings.Contains(err.Error(), "keytab file is empty") {
		t.Errorf("empty keytab: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("alice\n"), []byte("pw\n"))
	f.Add([]byte("a:b"), []byte("x\ny"))
	f.Fuzz(func(t *testing.T, u, p []byte) {
		c, err := parse(u, p, nil, nil)
		if err != nil {
			if len(p) > 3 && strings.Contains(err.Error(), string(p)) {
				t.Fatalf("error holds the password: %v", err)
			}
			return
		}
		if strings.ContainsAny(c.User, ":\r\n") || c.User == "" {
			t.Fatalf("accepted user %q", c.User)
		}
	})
}

// TestDirKubeletSwap rotates the files the way the kubelet does and checks
// the store follows within seconds, through fsnotify (the periodic re-read
// is set far beyond the test's deadline).
func TestDirKubeletSwap(t *testing.T) {
	vol := secretvol.New(t, map[string]string{"username": "alice", "password": "one"})
	s := NewStore(nil)
	var mu sync.Mutex
	var errs []string
	var oks atomic.Int32
	d := &Dir{Path: vol.Dir, Store: s, Interval: time.Hour, Reloaded: func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err.Error())
			mu.Unlock()
			return
		}
		oks.Add(1)
	}}
	if err := d.Load(); err != nil {
		t.Fatal(err)
	}
	if c := s.Current(); c.User != "alice" || c.Password != "one" {
		t.Fatalf("loaded %v", c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	waitCred := func(user, pw string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if c := s.Current(); c != nil && c.User == user && c.Password == pw {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("store has %v, want user %s with the new password", s.Current(), user)
	}
	time.Sleep(50 * time.Millisecond) // let the watch start
	start := time.Now()
	vol.Update(t, map[string]string{"username": "alice", "password": "two"})
	waitCred("alice", "two")
	t.Logf("kubelet-style swap picked up in %v", time.Since(start))
	if fb := s.Fallback(); fb == nil || fb.Password != "one" {
		t.Errorf("fallback = %v, want the previous password", fb)
	}

	// A bad update is refused and reported; the last good credential stays.
	vol.Update(t, map[string]string{"username": "", "password": "three"})
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(errs)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	got := strings.Join(errs, "; ")
	mu.Unlock()
	if !strings.Contains(got, "username file is empty") {
		t.Errorf("errors = %q, want the refusal", got)
	}
	if strings.Contains(got, "three") || strings.Contains(got, "two") {
		t.Errorf("an error holds a password: %q", got)
	}
	if c := s.Current(); c.Password != "two" {
		t.Errorf("a refused update replaced the credential")
	}
	vol.Update(t, map[string]string{"username": "bob", "password": "four"})
	waitCred("bob", "four")
	if oks.Load() < 2 {
		t.Errorf("Reloaded(nil) called %d times, want 2", oks.Load())
	}
}

// TestDirPeriodicCheck covers file systems without inotify events: with the
// watch unable to see the change (files replaced in place under a watch
// that is not running), the periodic re-read still picks it up.
func TestDirPeriodicCheck(t *testing.T) {
	vol := secretvol.New(t, map[string]string{"username": "alice", "password": "one"})
	s := NewStore(nil)
	d := &Dir{Path: vol.Dir, Store: s, Interval: 100 * time.Millisecond}
	if err := d.Load(); err != nil {
		t.Fatal(err)
	}
	d.w.Settle = time.Hour // events never lead to a read: only the ticker does
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	vol.Update(t, map[string]string{"username": "alice", "password": "two"})
	deadline := time.Now().Add(5 * time.Second)
	for s.Current().Password != "two" {
		if time.Now().After(deadline) {
			t.Fatal("the periodic check did not pick up the change")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDirMissingFiles(t *testing.T) {
	d := &Dir{Path: t.TempDir(), Store: NewStore(nil)}
	err := d.Load()
	if err == nil || !strings.Contains(err.Error(), "username") {
		t.Fatalf("err = %v", err)
	}
	if Present(d.Path) {
		t.Error("Present on an empty directory")
	}
}

func BenchmarkStoreHotPath(b *testing.B) {
	s := NewStore(New("u", "p"))
	c := s.Current()
	s.Confirm(c)
	b.ReportAllocs()
	for b.Loop() {
		c := s.Current()
		_ = s.Fallback()
		s.Confirm(c)
	}
}

// TestDirKerberosFiles loads a Secret with a keytab and a krb5.conf and no
// password, then follows a swap that adds a password and drops the keytab.
func TestDirKerberosFiles(t *testing.T) {
	vol := secretvol.New(t, map[string]string{"username": "svc@CORP.EXAMPLE", "keytab": "\x05\x02kt", "krb5.conf": "[libdefaults]\n"})
	s := NewStore(nil)
	d := &Dir{Path: vol.Dir, Store: s, Interval: 50 * time.Millisecond}
	if err := d.Load(); err != nil {
		t.Fatal(err)
	}
	if c := s.Current(); c.User != "svc@CORP.EXAMPLE" || string(c.Keytab) != "\x05\x02kt" || string(c.Krb5Conf) != "[libdefaults]\n" || c.Password != "" {
		t.Fatalf("loaded %#v", c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	vol.Update(t, map[string]string{"username": "svc@CORP.EXAMPLE", "password": "pw", "krb5.conf": "[libdefaults]\n"})
	deadline := time.Now().Add(5 * time.Second)
	for c := s.Current(); c.Keytab != nil || c.Password != "pw"; c = s.Current() {
		if time.Now().After(deadline) {
			t.Fatalf("store has %v", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fb := s.Fallback(); fb == nil || fb.Keytab == nil {
		t.Errorf("fallback = %v, want the keytab credential", fb)
	}
}
