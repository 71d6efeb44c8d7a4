package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestOnePackageComment checks that every package in the module documents
// itself exactly once ("// Package x ..." or, for commands, "// Command
// x ..."), so `go doc` shows one coherent description.
func TestOnePackageComment(t *testing.T) {
	dirs := map[string]bool{}
	filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && p != "../..") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dirs[filepath.Dir(p)] = true
		}
		return nil
	})
	if len(dirs) < 20 {
		t.Fatalf("found only %d package directories: the walk is wrong", len(dirs))
	}
	for dir := range dirs {
		if strings.Contains(dir, "tools/") {
			continue // the tools module builds test binaries; not egret's code
		}
		pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		for name, pkg := range pkgs {
			n := 0
			for _, f := range pkg.Files {
				if f.Doc != nil && (strings.HasPrefix(f.Doc.Text(), "Package "+name+" ") || strings.HasPrefix(f.Doc.Text(), "Command ")) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%s: package %s has %d package comments, want 1", dir, name, n)
			}
		}
	}
}

// TestArchitectureDoc keeps docs/architecture.md's package table the
// first sentence of each package's own comment (EGRET_UPDATE_GOLDEN=1
// rewrites it), so the map cannot name a package that is gone or miss one.
func TestArchitectureDoc(t *testing.T) {
	const path, begin, end = "../../docs/architecture.md", "<!-- packages:begin -->\n", "<!-- packages:end -->"
	var rows []string
	filepath.WalkDir("../../internal", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		pkgs, err := parser.ParseDir(token.NewFileSet(), p, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		for name, pkg := range pkgs {
			for _, f := range pkg.Files {
				if f.Doc == nil || !strings.HasPrefix(f.Doc.Text(), "Package "+name+" ") {
					continue
				}
				rel, _ := filepath.Rel("../..", p)
				rows = append(rows, "| `"+filepath.ToSlash(rel)+"` | "+synopsis(f.Doc.Text(), name)+" |")
			}
		}
		return nil
	})
	sort.Strings(rows)
	table := "| package | what it is (its package comment) |\n|---|---|\n" + strings.Join(rows, "\n") + "\n"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the %q ... %q markers", path, begin, end)
	}
	want := doc[:i+len(begin)] + table + doc[j:]
	if want == doc {
		return
	}
	if os.Getenv("EGRET_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's package table is out of date; run EGRET_UPDATE_GOLDEN=1 go test ./cmd/egret", path)
}

// synopsis is the first sentence of a package comment, without
// "Package name", on one line.
func synopsis(text, name string) string {
	text, _, _ = strings.Cut(text, "\n\n") // the first paragraph
	s := strings.Join(strings.Fields(text), " ")
	s = strings.TrimPrefix(s, "Package "+name+" ")
	s = strings.TrimPrefix(s, "is ")
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSuffix(strings.TrimSuffix(s, ":"), ".")
	return strings.ReplaceAll(s, "|", "\\|")
}
