package proxystatus

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []Entry
	}{
		{"egret-upstream-auth", []string{`egret; error=upstream_auth_required; next-hop="http://u:xxxxx@squid:3128"; details="upstream rejected egret's credentials (407)"`},
			[]Entry{{"egret", map[string]string{"error": "upstream_auth_required", "next-hop": "http://u:xxxxx@squid:3128", "details": "upstream rejected egret's credentials (407)"}}}},
		{"list-and-several-fields", []string{`"gw.example"; error=dns_timeout, egret; error=pool_unavailable`, `edge; received-status=502`},
			[]Entry{{"gw.example", map[string]string{"error": "dns_timeout"}}, {"egret", map[string]string{"error": "pool_unavailable"}}, {"edge", map[string]string{"received-status": "502"}}}},
		{"commas-and-semicolons-inside-strings", []string{`egret; error=http_request_denied; details="a, b; c \"d\""`},
			[]Entry{{"egret", map[string]string{"error": "http_request_denied", "details": `a, b; c "d"`}}}},
		{"boolean-param-and-junk", []string{`egret; x; error=connection_refused, "unterminated; error=y, ; =z`},
			[]Entry{{"egret", map[string]string{"x": "?1", "error": "connection_refused"}}}},
		{"empty", []string{""}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Parse(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`egret; error=upstream_auth_required; next-hop="http://squid:3128"; details="x"`)
	f.Add(`a, b; c="d,e"; f`)
	f.Fuzz(func(t *testing.T, s string) {
		es := Parse([]string{s})
		if len(es) > 16 {
			t.Fatalf("%d entries", len(es))
		}
		for _, e := range es {
			if e.Proxy == "" || e.Params == nil {
				t.Fatalf("%q: entry %#v", s, e)
			}
		}
	})
}

// TestParseReadsHeader: what Header writes, Parse reads back — the error
// type, the next hop and the details.
func TestParseReadsHeader(t *testing.T) {
	e := &Error{Type: UpstreamAuthRequired, Upstream: "http://squid:3128", Detail: `upstream http://squid:3128 rejected egret's credentials (407); "quoted", too`}
	got := Parse([]string{e.Header()})
	if len(got) != 1 || got[0].Proxy != "egret" || got[0].Params["error"] != string(UpstreamAuthRequired) || got[0].Params["next-hop"] != "http://squid:3128" {
		t.Fatalf("Parse(%q) = %#v", e.Header(), got)
	}
	if !strings.Contains(got[0].Params["details"], `"quoted", too`) {
		t.Errorf("details = %q", got[0].Params["details"])
	}
}
