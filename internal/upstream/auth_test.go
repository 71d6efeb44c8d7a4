package upstream

import (
	"strings"
	"testing"

	"egret.io/egret/internal/proxyauth"
)

func TestMemberAuthAttributes(t *testing.T) {
	tests := []struct {
		spec, err string
		auth      proxyauth.Scheme
		spn       string
	}{
		{"http://proxy.corp:8080 auth=ntlm", "", proxyauth.NTLM, ""},
		{"http://proxy.corp:8080 auth=Negotiate", "", proxyauth.Negotiate, "HTTP/proxy.corp"},
		{"http://proxy.corp:8080 auth=negotiate spn=HTTP/Proxy-VIP.corp", "", proxyauth.Negotiate, "HTTP/Proxy-VIP.corp"},
		{"http://proxy.corp:8080 auth=basic weight=2", "", proxyauth.Basic, ""},
		{"http://proxy.corp:8080 auth=digest", "want basic, ntlm or negotiate", 0, ""},
		{"socks5://proxy.corp auth=ntlm", "needs an http:// or https:// member", 0, ""},
		{"http://proxy.corp auth=ntlm spn=HTTP/x", "spn= is for auth=negotiate", 0, ""},
		{"http://proxy.corp auth=negotiate spn=HTTP", "want service/host", 0, ""},
	}
	for _, tt := range tests {
		m, err := ParseMemberSpec(tt.spec)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err = %v, want %q", tt.spec, err, tt.err)
			}
			continue
		}
		if err != nil || m.Auth != tt.auth || (tt.spn != "" && m.ServicePrincipal() != tt.spn) {
			t.Errorf("%s: %v, %v", tt.spec, m, err)
		}
	}
	a, _ := ParseMemberSpec("http://p:1 auth=ntlm")
	b, _ := ParseMemberSpec("http://p:1")
	if NewMember(a).same(NewMember(b)) {
		t.Error("members that differ in auth are the same configuration")
	}
}
