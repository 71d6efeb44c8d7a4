package credentials

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/testutil/secretvol"
)

func TestParseToken(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"eyJhbGc.payload.sig\n", "Bearer eyJhbGc.payload.sig", ""},
		{"  tok  ", "Bearer tok", ""},
		{"", "", "empty"},
		{"a b", "", "more than one word"},
		{"a\x01b", "", "cannot go in a header"},
	} {
		c, err := parseToken([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || c.AuthHeader() != tc.want || !c.IsBearer() {
			t.Errorf("%q: %v %v", tc.in, c, err)
		}
	}
	c := NewBearer("s3cret-token")
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, c); strings.Contains(out, "s3cret") {
			t.Errorf("%s printed the token: %s", f, out)
		}
	}
	if NewBearer("a").Same(NewBearer("b")) || !NewBearer("a").Same(NewBearer("a")) || NewBearer("a").Same(New("", "")) {
		t.Error("Same on bearer credentials")
	}
}

// TestTokenFileFollowsTheKubelet: the projected token volume is swapped
// the way the kubelet refreshes it, and the store follows.
func TestTokenFileFollowsTheKubelet(t *testing.T) {
	vol := secretvol.New(t, map[string]string{"token": "first.token.sig"})
	s := NewStore(nil)
	tf := &TokenFile{Path: filepath.Join(vol.Dir, "token"), Store: s, Interval: time.Hour}
	if err := tf.Load(); err != nil {
		t.Fatal(err)
	}
	if got := s.Current().AuthHeader(); got != "Bearer first.token.sig" {
		t.Fatalf("loaded %q", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tf.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	time.Sleep(50 * time.Millisecond)
	vol.Update(t, map[string]string{"token": "second.token.sig"})
	deadline := time.Now().Add(5 * time.Second)
	for s.Current().AuthHeader() != "Bearer second.token.sig" {
		if time.Now().After(deadline) {
			t.Fatal("the refreshed token was not picked up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Until the new token works once, the previous one is the fallback.
	if fb := s.Fallback(); fb == nil || fb.AuthHeader() != "Bearer first.token.sig" {
		t.Errorf("fallback = %v", fb)
	}
}

// FuzzTokenFile: whatever a token file holds, it is refused or becomes a
// bearer credential whose header cannot split (one word of visible ASCII).
func FuzzTokenFile(f *testing.F) {
	for _, s := range []string{"eyJhbGciOi.payload.sig\n", "", " \n", "two words", "tok\r\nX-Injected: 1", "caf\u00e9"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseToken(b)
		if err != nil {
			if c != nil {
				t.Fatal("a credential with an error")
			}
			return
		}
		if !c.IsBearer() || c.AuthHeader() != "Bearer "+c.token {
			t.Fatalf("credential %v, header %q", c, c.AuthHeader())
		}
		for _, r := range []byte(c.token) {
			if r < 0x21 || r > 0x7e {
				t.Fatalf("token byte %#x accepted", r)
			}
		}
		if c.String() != "bearer token" {
			t.Fatalf("String() = %q", c.String())
		}
	})
}
