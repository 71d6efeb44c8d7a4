package identity

import (
	"encoding/base64"
	"testing"
)

// FuzzExpiry: any token text, accepted or not by the API server, gives an
// expiry or none, never a panic.
func FuzzExpiry(f *testing.F) {
	claims := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, s := range []string{
		"h." + claims(`{"exp":1700000000,"aud":["egret"]}`) + ".sig",
		"h." + claims(`{"exp":-1}`) + ".sig",
		"h." + claims(`{"exp":1e30}`) + ".sig",
		"h." + claims(`{"exp":"soon"}`) + ".sig",
		"h.!!!.sig", "a.b", "", "...",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		exp, ok := expiry(tok)
		if ok && exp.Unix() <= 0 {
			t.Fatalf("expiry %v accepted", exp)
		}
		if !ok && !exp.IsZero() {
			t.Fatalf("no expiry but %v", exp)
		}
	})
}
