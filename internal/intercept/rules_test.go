package intercept

import (
	"fmt"
	"strings"
	"testing"

	"egret.io/egret/internal/testutil/secretvol"
)

var testRules = RulesSpec{Rules: []RuleSpec{
	{Action: "deny", Paths: []string{"/v1/admin/**"}},
	{Action: "deny", Methods: []string{"DELETE"}},
	{Action: "allow", Methods: []string{"GET", "head"}, PathPrefixes: []string{"/v1"}},
	{Action: "allow", Methods: []string{"POST"}, Paths: []string{"/v1/*/completions", "/v1/embeddings"}},
	{Action: "allow", PathPrefixes: []string{"/public/"}},
}}

func TestDecide(t *testing.T) {
	r, err := CompileRules(testRules)
	if err != nil {
		t.Fatal(err)
	}
	if r.Default != Deny {
		t.Fatalf("default %v, want deny (a rule allows)", r.Default)
	}
	for _, tc := range []struct {
		method, path string
		denied       bool
		rule         string
	}{
		{"GET", "/v1/models", false, "rule 3"},
		{"HEAD", "/v1", false, "rule 3"},
		{"GET", "/v10", true, "default"},
		{"GET", "/v1/admin", false, "rule 3"},
		{"GET", "/v1/admin/x", true, "rule 1"},
		{"POST", "/v1/chat/completions", false, "rule 4"},
		{"POST", "/v1/a/b/completions", true, "default"},
		{"POST", "/v1/embeddings", false, "rule 4"},
		{"DELETE", "/public/x", true, "rule 2"},
		// A method in another case is the same method to origins that
		// read it so (Django, Werkzeug upper-case it).
		{"delete", "/public/x", true, "rule 2"},
		{"Delete", "/public/x", true, "rule 2"},
		{"get", "/v1/models", true, "default"}, // allowed only as GET
		{"PUT", "/public/x", false, "rule 5"},
		{"PUT", "/public", true, "default"},
		// Readings: each of these reaches /v1/admin/x on a lenient origin.
		{"GET", "/v1/x/../admin/x", true, "rule 1"},
		{"GET", "/v1/./admin/x", true, "rule 1"},
		{"GET", "/v1/%61dmin/x", true, "rule 1"},
		{"GET", "/v1/%2e%2e/v1/admin/x", true, "rule 1"},
		{"GET", "/v1//admin/x", true, "rule 1"},
		{"GET", "/v1/admin%2Fx", true, "rule 1"},
		{"GET", "/v1/admin%2fx", true, "rule 1"},
		{"GET", "/v1\\admin\\x", true, "default"}, // denied as sent already
		{"GET", "/v1/admin;jsessionid=1/x", true, "rule 1"},
		{"GET", "/v1/../../etc", true, "default"},
		// Letter case and trailing dots: a deny holds in any case (an
		// origin may ignore it), an allow only in the case written.
		{"GET", "/V1/ADMIN/x", true, "default"}, // not allowed as written
		{"GET", "/v1/Admin/x", true, "rule 1"},
		{"GET", "/v1/%41dmin/x", true, "rule 1"},
		{"GET", "/V1/models", true, "default"},
		{"DELETE", "/PUBLIC/x", true, "rule 2"},
		{"GET", "/v1/admin./x", true, "rule 1"},
		{"GET", "/v1/admin../x", true, "rule 1"},
		{"GET", "/v1/admin.;x/x", true, "rule 1"},
		{"GET", "/v1/models.", false, "rule 3"},
		// Escapes that change nothing stay allowed.
		{"GET", "/v1/models%20list", false, "rule 3"},
	} {
		v := r.Decide(tc.method, tc.path)
		if v.Denied != tc.denied || v.Allowed == tc.denied || v.RuleName() != tc.rule {
			t.Errorf("%s %s: %+v (%s), want denied=%v by %s", tc.method, tc.path, v, v.RuleName(), tc.denied, tc.rule)
		}
	}
	r.Mode = Report
	if v := r.Decide("GET", "/v1/admin/x"); !v.Denied || !v.Allowed {
		t.Errorf("report mode: %+v", v)
	}
	var none Rules
	if v := none.Decide("DELETE", "/anything"); v.Denied || !v.Allowed {
		t.Errorf("no rules: %+v", v)
	}
}

func TestCompileRulesErrors(t *testing.T) {
	for _, tc := range []struct {
		spec RulesSpec
		err  string
	}{
		{RulesSpec{Mode: "audit"}, "want enforce or report"},
		{RulesSpec{Default: "maybe"}, "want allow or deny"},
		{RulesSpec{Rules: []RuleSpec{{Action: "permit"}}}, "rule 1: action"},
		{RulesSpec{Rules: []RuleSpec{{Action: "allow", Methods: []string{"GET POST"}}}}, "not an HTTP method"},
		{RulesSpec{Rules: []RuleSpec{{Action: "allow", Paths: []string{"v1/models"}}}}, "must start with '/'"},
		{RulesSpec{Rules: []RuleSpec{{Action: "allow", Paths: []string{"/v1?x=1"}}}}, "never the query"},
		{RulesSpec{Rules: []RuleSpec{{Action: "allow", Paths: []string{"/v1/../admin"}}}}, "normal form"},
		{RulesSpec{Rules: []RuleSpec{{Action: "allow", Paths: []string{"/v1/%61"}}}}, "normal form"},
		{RulesSpec{Rules: []RuleSpec{{Action: "allow", Paths: []string{"/a b"}}}}, "space"},
		{RulesSpec{Rules: []RuleSpec{{Action: "allow", Paths: []string{"/a/***"}}}}, "'***'"},
		{RulesSpec{Rules: []RuleSpec{{Action: "allow", PathPrefixes: []string{"/a/*"}}}}, "holds '*'"},
		{RulesSpec{Rules: []RuleSpec{{Action: "allow", Paths: []string{""}}}}, "empty path"},
	} {
		if _, err := CompileRules(tc.spec); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: %v, want %q", tc.spec, err, tc.err)
		}
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string][2]string{
		"/a/b":        {"/a/b", "/a/b"},
		"/a/./b/../c": {"/a/c", "/a/c"},
		"/a/%7e%41":   {"/a/~A", "/a/~A"},
		"/a/%2fb":     {"/a/%2Fb", "/a/b"},
		"/a//b/":      {"/a//b/", "/a/b/"},
		"/a;x/b;y":    {"/a;x/b;y", "/a/b"},
		"/a./b..":     {"/a./b..", "/a/b"},
		"/a/.../b":    {"/a/.../b", "/a/.../b"},
		"/a/%2e/b.":   {"/a/b.", "/a/b"},
		"/..":         {"/", "/"},
		"/a/..":       {"/", "/"},
		"/a/.":        {"/a/", "/a/"},
		"/%":          {"/%25", "/%25"},
		"/%%370":      {"/%2570", "/%2570"},
		"/%zz":        {"/%25zz", "/%25zz"},
		"/a\\..\\b":   {"/a\\..\\b", "/b"},
		"/%2e%2E/%2e": {"/", "/"},
		"/x/%25/y":    {"/x/%25/y", "/x/%25/y"},
		"/ü":          {"/ü", "/ü"},
		"*":           {"*", "*"},
	} {
		if got := normalize(in, false); got != want[0] {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want[0])
		}
		if got := normalize(in, true); got != want[1] {
			t.Errorf("normalize(%q, loose) = %q, want %q", in, got, want[1])
		}
	}
}

// FuzzDecide: for any method and path, a deny in any reading is a deny;
// normalizing is idempotent; and an allowed request's every reading is
// allowed by the rules on its own.
func FuzzDecide(f *testing.F) {
	for _, p := range []string{"/v1/models", "/v1/../admin", "/v1/%2e%2e/admin", "/v1//admin/x", "/a%2Fb", "/;x", "/%", "*", "/\\"} {
		f.Add("GET", p)
	}
	r, err := CompileRules(testRules)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path string) {
		for _, loose := range []bool{false, true} {
			n := normalize(path, loose)
			if normalize(n, loose) != n {
				t.Fatalf("normalize(%q, %v) = %q is not a fixed point (%q)", path, loose, n, normalize(n, loose))
			}
			if strings.HasPrefix(path, "/") && !strings.HasPrefix(n, "/") {
				t.Fatalf("normalize(%q) = %q lost the leading slash", path, n)
			}
			if !strings.HasPrefix(path, "/") {
				continue // not a path a server reads (net/http refuses it)
			}
			if strings.Contains(n, "/../") || strings.HasSuffix(n, "/..") || strings.Contains(n, "/./") {
				t.Fatalf("normalize(%q) = %q kept a dot segment", path, n)
			}
		}
		v := r.Decide(method, path)
		if !v.Denied {
			for _, p := range readings(path) {
				if r.decide(method, p, false).Denied || r.decide(method, p, true).Denied {
					t.Fatalf("%s %q allowed, but its reading %q is denied", method, path, p)
				}
			}
		}
	})
}

func TestCredentialValues(t *testing.T) {
	for _, tc := range []struct {
		spec    CredentialSpec
		files   map[string]string
		header  string
		want    string
		err     string
		specErr string
	}{
		{CredentialSpec{Name: "b"}, map[string]string{"token": "tok123\n"}, "Authorization", "Bearer tok123", "", ""},
		{CredentialSpec{Name: "basic", Scheme: "basic"}, map[string]string{"username": "alice\n", "password": "p@ss word\n"}, "Authorization", "Basic YWxpY2U6cEBzcyB3b3Jk", "", ""},
		{CredentialSpec{Name: "k", Scheme: "raw", Header: "x-api-key"}, map[string]string{"token": " key-1 \n"}, "X-Api-Key", "key-1", "", ""},
		{CredentialSpec{Name: "two-words"}, map[string]string{"token": "first second"}, "", "", "more than one word", ""},
		{CredentialSpec{Name: "crlf"}, map[string]string{"token": "a\r\nX-Evil: 1"}, "", "", "line break", ""},
		{CredentialSpec{Name: "ctl", Scheme: "raw", Header: "k"}, map[string]string{"token": "a\x00b"}, "", "", "control character", ""},
		{CredentialSpec{Name: "empty"}, map[string]string{"token": "\n"}, "", "", "is empty", ""},
		{CredentialSpec{Name: "colon", Scheme: "basic"}, map[string]string{"username": "a:b", "password": "x"}, "", "", "colon", ""},
		{CredentialSpec{Name: "host", Header: "Host"}, nil, "", "", "", "does not set Host"},
		{CredentialSpec{Name: "cl", Header: "content-length", Scheme: "raw"}, nil, "", "", "", "does not set Content-Length"},
		{CredentialSpec{Name: "raw-no-header", Scheme: "raw"}, nil, "", "", "", "needs a header name"},
		{CredentialSpec{Name: "bad-header", Header: "x api"}, nil, "", "", "", "not a header name"},
		{CredentialSpec{Name: "scheme", Scheme: "digest"}, nil, "", "", "", "want bearer, basic or raw"},
		{CredentialSpec{Name: "files", Scheme: "basic", Files: []string{"/x"}}, nil, "", "", "", "reads 2 file(s)"},
	} {
		t.Run(tc.spec.Name, func(t *testing.T) {
			vol := secretvol.New(t, tc.files)
			c, err := NewCredential(tc.spec, vol.Dir)
			if tc.specErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.specErr) {
					t.Fatalf("err %v, want %q", err, tc.specErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			err = c.Load()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				for _, v := range tc.files {
					if len(strings.TrimSpace(v)) > 2 && strings.Contains(err.Error(), strings.TrimSpace(v)) {
						t.Errorf("the error quotes the file: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			h := map[string][]string{tc.header: {"client value"}}
			if err := c.Apply(h); err != nil {
				t.Fatal(err)
			}
			if got := h[tc.header]; len(got) != 1 || got[0] != tc.want {
				t.Errorf("header %q", got)
			}
			for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", *c.val.Load()), fmt.Sprint(*c.val.Load())} {
				if strings.Contains(s, strings.TrimPrefix(strings.TrimPrefix(tc.want, "Bearer "), "Basic ")) {
					t.Errorf("printing shows the value: %s", s)
				}
			}
		})
	}
}
