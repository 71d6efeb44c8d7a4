package doctor

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"egret.io/egret/internal/proxystatus"
)

// egretAnswer builds the answer egret itself writes for e.
func egretAnswer(e *proxystatus.Error) *answer {
	h := http.Header{}
	h.Set("Proxy-Status", e.Header())
	return &answer{code: e.Code(), status: strconv.Itoa(e.Code()) + " " + http.StatusText(e.Code()), header: h, body: []byte(e.Body())}
}

func plainAnswer(code int, kv ...string) *answer {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return &answer{code: code, status: strconv.Itoa(code) + " " + http.StatusText(code), header: h}
}

func TestDecodeAnswer(t *testing.T) {
	ext := decodeIn{proxy: "http://gw:3128", source: "HTTPS_PROXY, https_proxy", target: "partner.example:443"}
	withUser := ext
	withUser.user, withUser.proxy = "alice", "http://alice:xxxxx@squid:3128"
	internal := ext
	internal.target, internal.internal, internal.noProxy = "kubernetes.default.svc:443", true, ".svc"
	tests := []struct {
		name       string
		a          *answer
		in         decodeIn
		status     Status
		summary    []string // substrings
		advice     string   // substring
		notInWords string   // must not appear anywhere (secrets)
	}{
		{"ok-200", plainAnswer(200), ext, Pass, []string{"answered"}, "", ""},
		{"squid-407-wrong-password", plainAnswer(407, "Proxy-Authenticate", `Basic realm="corp"`, "X-Squid-Error", "ERR_CACHE_ACCESS_DENIED 0"), withUser, Fail,
			[]string{`rejected the credentials of user "alice"`, "407"}, "Fix the password in HTTPS_PROXY", "s3cret"},
		{"407-no-credentials", plainAnswer(407), ext, Fail, []string{"requires credentials", "has none"}, "Add user:password@", ""},
		{"egret-upstream-auth", egretAnswer(&proxystatus.Error{Type: proxystatus.UpstreamAuthRequired, Status: 502, Upstream: "http://bob:xxxxx@squid:3128",
			Detail: "upstream http://bob:xxxxx@squid:3128 rejected egret's credentials (407)"}), ext, Fail,
			[]string{"its upstream http://bob:xxxxx@squid:3128 rejected egret's credentials"}, "Fix the credentials the egret proxy holds", ""},
		{"egret-deny-rule", egretAnswer(proxystatus.New(proxystatus.HTTPRequestDenied, "denied by route 0", nil)), ext, Fail,
			[]string{"by policy", "deny rule"}, "add a route for it before the deny rule", ""},
		{"egret-upstream-403", egretAnswer(&proxystatus.Error{Type: proxystatus.UpstreamRefused, Status: 403, Upstream: "http://squid:3128"}), ext, Fail,
			[]string{"http://squid:3128 refused", "IP allow-list"}, "allow partner.example:443 and the address egret connects from", ""},
		{"squid-403", plainAnswer(403, "X-Squid-Error", "ERR_ACCESS_DENIED 0"), ext, Fail, []string{"Squid", "http_access"}, "ACLs", ""},
		{"plain-403", plainAnswer(403), ext, Fail, []string{"403 Forbidden", "policy or IP allow-list"}, "egress IP", ""},
		{"internal-name-502-is-a-no-proxy-hole", egretAnswer(proxystatus.New(proxystatus.DestinationNotFound, "no such host", nil)), internal, Fail,
			[]string{"NO_PROXY hole", "kubernetes.default.svc:443", "destination_not_found"}, "Add .svc to NO_PROXY", ""},
		{"external-name-unknown-is-dead-target", egretAnswer(proxystatus.New(proxystatus.DestinationNotFound, "no such host", nil)), ext, Fail,
			[]string{"dead target", "cannot resolve partner.example"}, "Check the name partner.example", ""},
		{"squid-dns-fail", plainAnswer(503, "X-Squid-Error", "ERR_DNS_FAIL 0"), ext, Fail, []string{"dead target", "cannot resolve"}, "", ""},
		{"egret-connection-refused", egretAnswer(proxystatus.New(proxystatus.ConnectionRefused, "connect: connection refused", nil)), ext, Fail,
			[]string{"dead target", "nothing listens"}, "the proxy path works", ""},
		{"egret-connection-timeout", egretAnswer(proxystatus.New(proxystatus.ConnectionTimeout, "i/o timeout", nil)), ext, Fail,
			[]string{"dead target", "cannot connect", "504"}, "firewall", ""},
		{"egret-pool-unavailable", egretAnswer(proxystatus.New(proxystatus.PoolUnavailable, "no member", nil)), ext, Fail,
			[]string{"no upstream proxy left"}, "upstream pool members", ""},
		{"not-a-proxy-400", plainAnswer(400), ext, Fail, []string{"refuses CONNECT", "not a forward proxy"}, "Check the port", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := decodeAnswer(tt.a, tt.in)
			if v.status != tt.status {
				t.Errorf("status %s, want %s: %s", v.status, tt.status, v.summary)
			}
			for _, s := range tt.summary {
				if !strings.Contains(v.summary, s) {
					t.Errorf("summary %q lacks %q", v.summary, s)
				}
			}
			if !strings.Contains(v.advice, tt.advice) {
				t.Errorf("advice %q lacks %q", v.advice, tt.advice)
			}
			if tt.notInWords != "" && strings.Contains(v.summary+v.advice+strings.Join(v.details, "\n"), tt.notInWords) {
				t.Errorf("%q leaked", tt.notInWords)
			}
		})
	}
}

func TestDecodeProxyFailure(t *testing.T) {
	in := decodeIn{proxy: "http://gw:3128", source: "HTTP_PROXY"}
	tests := []struct {
		name   string
		err    error
		status Status
		want   string
		advice string
	}{
		{"refused", syscall.ECONNREFUSED, Fail, "refused: nothing listens on that port, or a NetworkPolicy rejects it", "Check the port in HTTP_PROXY"},
		{"timeout", errDeadline{}, Fail, "timeout): a route or a NetworkPolicy drops", "NetworkPolicy"},
		{"no-route", syscall.EHOSTUNREACH, Fail, "no route to the proxy", "not reachable"},
		{"blackhole-route-einval", syscall.EINVAL, Fail, "no route to the proxy", ""},
		{"reset", syscall.ECONNRESET, Fail, "closed the connection", "HTTP proxy port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := decodeProxyFailure(failureOf("connect to the proxy gw:3128", tt.err), in)
			if v.status != tt.status || !strings.Contains(v.summary, tt.want) || !strings.Contains(v.advice, tt.advice) {
				t.Errorf("got %s %q / %q", v.status, v.summary, v.advice)
			}
		})
	}
	if k := failureOf("x", errors.New("weird")).kind; k != fkOther {
		t.Errorf("unknown error classified as %d", k)
	}
}

// errDeadline is a net.Error timeout.
type errDeadline struct{}

func (errDeadline) Error() string   { return "i/o timeout" }
func (errDeadline) Timeout() bool   { return true }
func (errDeadline) Temporary() bool { return true }
