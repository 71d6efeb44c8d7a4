package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
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
