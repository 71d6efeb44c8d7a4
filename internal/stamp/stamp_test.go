package stamp

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestEncodeParse(t *testing.T) {
	s := Stamp{Mode: "transparent", NoProxy: Hash("a,b"), Proxy: "http://127.0.0.1:3128", Image: "egret:1",
		IptablesImage: "egret:1-iptables", ProxyUID: UID(15337), Mesh: "istio/exclude",
		Upstream: &Upstream{Secret: "up", Version: "42"},
		Trust:    &Trust{ConfigMap: "egret-trust-bundle", Owner: "egret", UID: "u-1", Digest: strings.Repeat("ab", 32)}}
	v := s.Encode()
	got, err := Parse(v)
	if err != nil {
		t.Fatal(err)
	}
	s.V = Version
	if got.Encode() != v || got.V != Version || *got.ProxyUID != 15337 || got.Trust.UID != "u-1" {
		t.Errorf("round trip: %s\n-> %+v", v, got)
	}
	if len(v) > 400 {
		t.Errorf("stamp is %d bytes: %s", len(v), v)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "no egret.io/injected-state"},
		{"{", "stamp:"},
		{`{"v":2}`, "version 2"},
		{strings.Repeat(" ", maxLen+1), "longer than"},
	} {
		_, err := Parse(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%.10q) = %v, want %q", tc.in, err, tc.want)
		}
	}
	if _, err := Parse(""); !errors.Is(err, ErrNone) {
		t.Errorf("empty: %v", err)
	}
}

func TestCompare(t *testing.T) {
	base := Stamp{V: 1, Mode: "sidecar", NoProxy: Hash("x"), Proxy: "http://127.0.0.1:3128", Image: "egret:1", ProxyUID: UID(15337),
		Upstream: &Upstream{Secret: "up", Version: "7"},
		Trust:    &Trust{ConfigMap: "egret-trust-bundle", Owner: "egret", UID: "u1", Digest: "d1"}}
	cur := Current{NoProxy: Hash("x"), Proxy: "http://127.0.0.1:3128", Image: "egret:1", ProxyUID: UID(15337),
		UpstreamVersion:  func(string) (string, bool) { return "7", true },
		TrustDigest:      "d1",
		TrustInNamespace: func() (string, string, bool) { return "d1", "u1", true }}
	if got := Compare(base, cur); len(got) != 0 {
		t.Fatalf("fresh pod reported stale: %v", got)
	}
	for _, tc := range []struct {
		name string
		edit func(*Current)
		want []Part
	}{
		{"noproxy-changed", func(c *Current) { c.NoProxy = Hash("y") }, []Part{PartNoProxy}},
		{"gateway-moved", func(c *Current) { c.Proxy = "http://gw.other:3128" }, []Part{PartProxy}},
		{"new-image", func(c *Current) { c.Image = "egret:2" }, []Part{PartImage}},
		{"new-uid", func(c *Current) { c.ProxyUID = UID(2000) }, []Part{PartUID}},
		{"secret-rotated", func(c *Current) { c.UpstreamVersion = func(string) (string, bool) { return "8", true } }, []Part{PartUpstream}},
		{"secret-unknown", func(c *Current) { c.UpstreamVersion = func(string) (string, bool) { return "", false } }, nil},
		{"secret-unreadable-now", func(c *Current) { c.UpstreamVersion = func(string) (string, bool) { return VersionUnknown, true } }, nil},
		{"ca-rotated", func(c *Current) { c.TrustDigest = "d2" }, []Part{PartTrust}},
		{"configmap-replaced", func(c *Current) { c.TrustInNamespace = func() (string, string, bool) { return "d1", "u2", true } }, []Part{PartTrust}},
		{"configmap-rewritten", func(c *Current) { c.TrustInNamespace = func() (string, string, bool) { return "evil", "u1", true } }, []Part{PartTrust}},
		{"unknowns-not-reported", func(c *Current) { *c = Current{} }, nil},
		{"several", func(c *Current) { c.NoProxy, c.Image = "sha256:0", "egret:3" }, []Part{PartNoProxy, PartImage}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cur
			tc.edit(&c)
			if got := Compare(base, c); !slices.Equal(got, tc.want) {
				t.Errorf("Compare = %v, want %v", got, tc.want)
			}
		})
	}
	gw := Stamp{V: 1, Mode: "gateway", NoProxy: Hash("x"), Proxy: "http://gw:3128"}
	if got := Compare(gw, Current{NoProxy: Hash("x"), Proxy: "http://gw:3128", Image: "egret:9", ProxyUID: UID(1)}); len(got) != 0 {
		t.Errorf("gateway pod has no sidecar image or UID to be stale on: %v", got)
	}
}

func TestParsePart(t *testing.T) {
	for _, p := range Parts {
		if got, err := ParsePart(string(p)); err != nil || got != p {
			t.Errorf("ParsePart(%s) = %v, %v", p, got, err)
		}
	}
	if _, err := ParsePart("nope"); err == nil || !strings.Contains(err.Error(), "noproxy, proxy") {
		t.Errorf("ParsePart(nope) = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Stamp{Mode: "sidecar", NoProxy: Hash("a"), Trust: &Trust{Digest: "d"}}.Encode())
	f.Add(`{"v":1,"proxyUID":-1}`)
	f.Add(`{"v":1,"upstream":null}`)
	f.Fuzz(func(t *testing.T, v string) {
		s, err := Parse(v)
		if err != nil {
			return
		}
		again, err := Parse(s.Encode())
		if err != nil || again.Encode() != s.Encode() {
			t.Fatalf("re-encode of %q: %v", v, err)
		}
		_ = Compare(s, Current{NoProxy: "x", Image: "i", ProxyUID: UID(1), TrustDigest: "t",
			UpstreamVersion: func(string) (string, bool) { return "1", true }})
	})
}
