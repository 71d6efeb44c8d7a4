package deptest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "egret.io/egret/internal/"

// The data plane, in the order a request or tunnel crosses it. A package
// may import those after it, never one before it: the listeners (proxy)
// accept and admit, route and policy decide, the transport dials (through
// upstream's pools and http1's wire), relay pumps bytes. Each is a row of
// rules below too; this order is checked on top of them.
var dataPlane = []string{
	"proxy",     // accept, admit, the shared tail
	"policy",    // decide: a workload's egress policy
	"route",     // decide: the routes
	"sniff",     // classify: SNI and Host from a connection's first bytes
	"transport", // dial: the one transport (origins and upstream members)
	"upstream",  // dial: pools, members, health
	"proxyauth", // dial: Basic/NTLM/Negotiate to a member
	"http1",     // the HTTP/1 wire
	"relay",     // the byte pump
}

// rules lists, for each internal package, the internal packages it may
// import (none: a leaf). A package missing from the table fails the test,
// so a new package states its place here. The builders (cli, config,
// proxyd) sit above the data plane and may wire it together; nothing in
// the data plane imports them.
var rules = map[string][]string{
	// builders and commands
	"cli":    {"config", "discovery", "doctor", "drift", "echo", "ipaddr", "iptables", "kubenode", "lint", "logging", "logsink", "netpol", "noproxy", "policy", "proxyd", "route", "suggest", "version", "webhook"},
	"proxyd": {"admin", "config", "credentials", "identity", "intercept", "limit", "metrics", "policy", "proxy", "proxyauth", "ratelimit", "resolve", "route", "socks5", "transport", "trust", "upstream", "watch"},
	"config": {"credentials", "intercept", "ipaddr", "limit", "noproxy", "proxy", "proxyauth", "resolve", "route", "suggest", "transport", "upstream"},

	// the data plane
	"proxy":     {"http1", "identity", "intercept", "ipaddr", "limit", "metrics", "origdst", "policy", "proxyauth", "proxystatus", "relay", "resolve", "route", "sniff", "socks5", "transport", "upstream"},
	"policy":    {"identity", "intercept", "ipaddr", "ratelimit", "route"},
	"route":     {"ipaddr"},
	"sniff":     nil,
	"transport": {"credentials", "http1", "proxyauth", "proxystatus", "upstream"},
	"upstream":  {"credentials", "proxyauth", "proxystatus"},
	"proxyauth": {"credentials", "proxystatus"},
	"http1":     {"proxystatus"},
	"relay":     nil,

	// what the data plane uses beside it
	"socks5":      nil,
	"origdst":     nil,
	"resolve":     {"ipaddr"},
	"identity":    nil,
	"limit":       nil,
	"ratelimit":   {"limit"},
	"credentials": {"watch"},
	"proxystatus": nil,
	"metrics":     {"version"},
	"ipaddr":      nil,

	// the control plane and tools
	"admin":     {"metrics"},
	"discovery": {"ipaddr"},
	"doctor":    {"echo", "noproxy", "proxystatus", "resolve", "trust", "version"},
	"drift":     {"metrics", "stamp"},
	"echo":      nil,
	"intercept": {"proxystatus", "watch"},
	"iptables":  {"ipaddr", "origdst"},
	"kubenode":  {"noproxy", "trust"},
	"lint":      {"netpol", "noproxy", "severity", "trust"},
	"netpol":    {"discovery"},
	"logging":   nil,
	"logsink":   nil,
	"noproxy":   {"severity"},
	"severity":  nil,
	"stamp":     nil,
	"suggest":   nil,
	"trust":     {"noproxy"},
	"version":   nil,
	"watch":     nil,
	"webhook":   {"discovery", "drift", "lint", "metrics", "netpol", "noproxy", "stamp", "trust"},

	// helpers for tests (imported only by tests): testutil/... may import
	// only testutil/... (checked in TestImportRules, no rows)
	"deptest": nil,
}

// imports returns the internal packages the non-test Go files of each
// package under root import (every build variant: _linux and _other files
// alike), by package path relative to internal/.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || strings.HasPrefix(n, ".") || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		for _, is := range f.Imports {
			p, _ := strconv.Unquote(is.Path.Value)
			if q, ok := strings.CutPrefix(p, module); ok && !slices.Contains(out[pkg], q) {
				out[pkg] = append(out[pkg], q)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImportRules(t *testing.T) {
	got := imports(t, "..")
	pkgs := make([]string, 0, len(got))
	for p := range got {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		if p == "testutil" || strings.HasPrefix(p, "testutil/") {
			for _, q := range got[p] {
				if q != "testutil" && !strings.HasPrefix(q, "testutil/") {
					t.Errorf("internal/%s imports internal/%s: test helpers import only test helpers", p, q)
				}
			}
			continue
		}
		allowed, ok := rules[p]
		if !ok {
			// A package without a row may not touch the data plane: it
			// states its place here first.
			for _, q := range got[p] {
				if slices.Contains(dataPlane, q) {
					t.Errorf("internal/%s imports internal/%s (data plane) and has no row in deptest's rules: add one", p, q)
				}
			}
			t.Logf("internal/%s has no row in deptest's rules", p)
			continue
		}
		for _, q := range got[p] {
			if slices.Contains(allowed, q) {
				continue
			}
			// The rows are enforced where the data plane is concerned:
			// a data-plane package or one that wires it (proxyd, config)
			// importing anything, or anything importing the data plane.
			// Elsewhere (the control plane and tools) a missing entry is
			// reported, so a new package does not break the build.
			if slices.Contains(dataPlane, p) || slices.Contains(dataPlane, q) || p == "proxyd" || p == "config" {
				t.Errorf("internal/%s imports internal/%s, which its row in deptest's rules does not allow", p, q)
			} else {
				t.Logf("internal/%s imports internal/%s, not in its row in deptest's rules: add it", p, q)
			}
		}
	}
}

// TestDataPlaneOrder checks that no data-plane package imports one that
// comes before it (reaches back up), whatever the rows say.
func TestDataPlaneOrder(t *testing.T) {
	got := imports(t, "..")
	for i, p := range dataPlane {
		for _, q := range got[p] {
			if j := slices.Index(dataPlane, q); j >= 0 && j <= i {
				t.Errorf("internal/%s imports internal/%s, which comes before it on the data plane (%s)", p, q, strings.Join(dataPlane, " → "))
			}
		}
	}
	// The rows agree with the order too, so a row cannot grant what the
	// order forbids.
	for i, p := range dataPlane {
		for _, q := range rules[p] {
			if j := slices.Index(dataPlane, q); j >= 0 && j <= i {
				t.Errorf("deptest's row for %s allows %s, which comes before it on the data plane", p, q)
			}
		}
	}
}

// TestRulesAreTight reports rows that name a package that does not exist,
// so the table does not rot.
func TestRulesAreTight(t *testing.T) {
	got := imports(t, "..")
	for p, allowed := range rules {
		if _, ok := got[p]; !ok {
			t.Errorf("deptest's rules have a row for internal/%s, which does not exist", p)
		}
		for _, q := range allowed {
			if _, ok := got[q]; !ok {
				t.Errorf("deptest's row for %s names internal/%s, which does not exist", p, q)
			}
		}
	}
}

// dialers are the functions and types that open connections: calling or
// naming one outside internal/transport is a second way to dial.
var dialers = map[string][]string{
	"net":                    {"Dial", "DialTimeout", "DialTCP", "DialUDP", "DialIP", "DialUnix", "Dialer"},
	"crypto/tls":             {"Dial", "DialWithDialer", "Client", "Dialer"},
	"golang.org/x/net/proxy": nil, // any of it: SOCKS5 and friends dial
}

// TestOnlyTransportDials checks that in the data plane only
// internal/transport dials: no other data-plane package's code names
// net.Dial*, net.Dialer, tls.Dial*, tls.Client, tls.Dialer or
// golang.org/x/net/proxy. The listeners, the pools and the wire reach
// destinations and members through the one transport.
func TestOnlyTransportDials(t *testing.T) {
	fset := token.NewFileSet()
	for _, pkg := range dataPlane {
		if pkg == "transport" {
			continue
		}
		dir := filepath.Join("..", filepath.FromSlash(pkg))
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]string{} // local name → import path
			for _, is := range f.Imports {
				p, _ := strconv.Unquote(is.Path.Value)
				if _, ok := dialers[p]; !ok {
					continue
				}
				name := p[strings.LastIndexByte(p, '/')+1:]
				if is.Name != nil {
					name = is.Name.Name
				}
				names[name] = p
			}
			if len(names) == 0 {
				continue
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				id, ok := sel.X.(*ast.Ident)
				if !ok {
					return true
				}
				p, ok := names[id.Name]
				if !ok {
					return true
				}
				if fs := dialers[p]; fs == nil || slices.Contains(fs, sel.Sel.Name) {
					t.Errorf("%s: %s.%s: only internal/transport dials in the data plane (%s)", fset.Position(sel.Pos()), id.Name, sel.Sel.Name, strings.Join(dataPlane, " → "))
				}
				return true
			})
		}
	}
}
