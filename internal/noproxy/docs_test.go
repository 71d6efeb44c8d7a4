package noproxy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// clientsMarkdown is docs/noproxy.md's client table, from Clients().
func clientsMarkdown() string {
	var b strings.Builder
	b.WriteString("| client | family | releases | stands for | verified |\n|---|---|---|---|---|\n")
	for _, c := range Clients() {
		verified := "modelled from source: " + c.Source
		if c.Verified == VerifiedReal {
			verified = "live in CI at " + strings.Join(c.Checked, ", ")
			if c.Source != "" {
				verified += "; " + c.Source
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", c.Name, c.Family, c.Versions(), mdEscape(c.Runtime), mdEscape(verified))
	}
	return b.String()
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// TestDocsClientTable keeps docs/noproxy.md's table of client rows, their
// ranges and how each was verified in step with the code.
func TestDocsClientTable(t *testing.T) {
	const begin, end = "<!-- noproxy-clients:begin -->\n", "<!-- noproxy-clients:end -->"
	path := filepath.Join(moduleRoot(t), "docs", "noproxy.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("docs/noproxy.md lacks the %q ... %q markers", begin, end)
	}
	want := clientsMarkdown()
	if got := s[i+len(begin) : j]; got != want {
		if os.Getenv("EGRET_UPDATE_GOLDEN") == "1" {
			if err := os.WriteFile(path, []byte(s[:i+len(begin)]+want+s[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("docs/noproxy.md client table is out of date (EGRET_UPDATE_GOLDEN=1 rewrites it)")
	}
}

// TestRowsAreConsistent checks the table's own facts: unique names and
// aliases, ranges that do not overlap within a family, live rows listing
// releases inside their ranges, source rows saying what was read, and the
// contract's default names all resolving.
func TestRowsAreConsistent(t *testing.T) {
	names := map[string]bool{}
	for _, c := range Clients() {
		if names[c.Name] {
			t.Errorf("duplicate row name %s", c.Name)
		}
		names[c.Name] = true
		if c.Family == "" || len(c.Ranges) == 0 || c.Runtime == "" || c.decide == nil {
			t.Errorf("row %s lacks family, ranges, runtime or model", c.Name)
		}
		for _, r := range c.Ranges {
			if (r.To == "") == (r.Below == "") || compareVersions(r.From, r.last()) > 0 {
				t.Errorf("row %s: bad range %+v", c.Name, r)
			}
		}
		switch c.Verified {
		case VerifiedReal:
			for _, v := range c.Checked {
				if !c.ContainsVersion(v) {
					t.Errorf("row %s: checked release %s outside %s", c.Name, v, c.Versions())
				}
			}
			if len(c.Checked) == 0 {
				t.Errorf("live row %s lists no checked release", c.Name)
			}
		default:
			if c.Source == "" || len(c.Checked) != 0 {
				t.Errorf("row %s is not live: it must say its source and list no checked release", c.Name)
			}
		}
		if c.Family == c.Name {
			if best, _ := findRow(c.Family); best.Name != c.Name {
				t.Errorf("family %s resolves to %s, not to its newest row %s", c.Family, best.Name, c.Name)
			}
		}
	}
	for _, a := range Clients() {
		for _, b := range Clients() {
			if a.Name >= b.Name || a.Family != b.Family {
				continue
			}
			for _, ra := range a.Ranges {
				for _, rb := range b.Ranges {
					if ra.Contains(rb.From) || rb.Contains(ra.From) {
						t.Errorf("rows %s (%s) and %s (%s) overlap", a.Name, ra, b.Name, rb)
					}
				}
			}
		}
	}
	if _, err := SelectClients(nil); err != nil {
		t.Errorf("default clients: %v", err)
	}
}

// TestDefaultReportHasGRPC: explain and lint without --client judge the
// gRPC stacks too (issue 24), which read the variables their own way: an
// upper-case NO_PROXY that keeps Go direct leaves grpc-js and C-core on
// the proxy, and C-core reads no CIDR.
func TestDefaultReportHasGRPC(t *testing.T) {
	cs, err := SelectClients(nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, c := range cs {
		r, err := c.Decide("http://10.96.0.5:50051/", Env{"https_proxy": "http://gw:3128", "NO_PROXY": "10.96.0.0/12"})
		if err != nil {
			t.Fatal(err)
		}
		got[r.Client] = r
	}
	for name, want := range map[string]Decision{"go": DecisionDirect, "grpc-go": DecisionDirect, "grpc-js": DecisionProxy, "grpc-core": DecisionProxy} {
		if r, ok := got[name]; !ok || r.Decision != want {
			t.Errorf("default report, %s: %+v (present %v), want %s", name, r, ok, want)
		}
	}
	var cidr *Finding
	fs := Lint("10.96.0.0/12,.svc,.cluster.local", LintOptions{})
	for i, f := range fs {
		if f.Entry == "10.96.0.0/12" && f.Rule == RuleEntryMisread {
			cidr = &fs[i]
		}
	}
	if cidr == nil || !strings.Contains(cidr.Message, "grpc-core") {
		t.Errorf("default lint does not say grpc-core ignores the CIDR: %+v", cidr)
	}
}

// TestClientSelection covers --client: rows, families, aliases, versions.
func TestClientSelection(t *testing.T) {
	for in, want := range map[string]string{
		"undici":         "undici",
		"undici@8.10.0":  "undici-8.10.0",
		"undici@8.12":    "undici",
		"undici@8.10.1":  "undici-8.10.1",
		"undici@7.25.0":  "undici-7.23",
		"undici@8.5.0":   "undici-7.23",
		"undici@6.14":    "undici-6.14.0",
		"undici-7.22":    "undici-7.22",
		"axios":          "axios",
		"axios@1.21":     "axios",
		"axios@1.13.2":   "axios-1.7",
		"axios@1.7.6":    "axios-1.0",
		"curl@7.88.1":    "curl-7.88",
		"curl@8.14":      "curl-8.9",
		"curl-7.88@8.20": "curl",
		"node-http@24.5": "node-http-22.21",
		"python-urllib":  "python-urllib",
		"proxy-from-env": "proxy-from-env-2",
		"global-agent@3": "global-agent-3",
	} {
		c, err := lookupClient(in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if c.Name != want {
			t.Errorf("%s selects %s, want %s", in, c.Name, want)
		}
		if c.resultName() != in {
			t.Errorf("%s: results are named %q", in, c.resultName())
		}
	}
	for _, in := range []string{"axios@0.27", "undici@9", "undici@", "@1", "nope", "nope@1", "undici@x"} {
		if _, err := lookupClient(in); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
	if _, err := lookupClient("axios@0.27"); err == nil || !strings.Contains(err.Error(), "axios-1.0 1.0.0–<1.7.7") {
		t.Errorf("an unknown version must list the ranges: %v", err)
	}
	rs, err := Explain("http://example.com/", Env{"http_proxy": "http://p:1"}, must(SelectClients([]string{"all"})))
	if err != nil || len(rs) != len(Clients()) {
		t.Errorf("all: %d results, %v", len(rs), err)
	}
}

func must(cs []Client, err error) []Client {
	if err != nil {
		panic(err)
	}
	return cs
}
