package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// iptablesPrograms are the programs `egret iptables` runs (Backend.Save and
// Backend.Restore in internal/iptables), plus the plain commands for
// debugging; all are symlinks to the two multi-call binaries.
var iptablesPrograms = []string{
	"usr/sbin/iptables-nft", "usr/sbin/iptables-nft-save", "usr/sbin/iptables-nft-restore",
	"usr/sbin/ip6tables-nft", "usr/sbin/ip6tables-nft-save", "usr/sbin/ip6tables-nft-restore",
	"usr/sbin/iptables-legacy", "usr/sbin/iptables-legacy-save", "usr/sbin/iptables-legacy-restore",
	"usr/sbin/ip6tables-legacy", "usr/sbin/ip6tables-legacy-save", "usr/sbin/ip6tables-legacy-restore",
}

// multiarch maps GOARCH to the Debian multiarch triplet of library paths.
var multiarch = map[string]string{
	"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "arm": "arm-linux-gnueabihf",
	"386": "i386-linux-gnu", "ppc64le": "powerpc64le-linux-gnu", "s390x": "s390x-linux-gnu", "riscv64": "riscv64-linux-gnu",
}

// debEntry is one file of an unpacked Debian package.
type debEntry struct {
	typ  byte // tar.TypeReg, tar.TypeSymlink or tar.TypeDir
	mode int64
	data []byte
	link string
	from string // the package file, for errors
}

// readDebs unpacks the .deb files (dpkg-deb --fsys-tarfile) into one
// tree keyed by clean relative path. A path shipped by two packages with
// different content is an error (for example two versions of a package).
func readDebs(debs []string) (map[string]*debEntry, error) {
	sort.Strings(debs)
	tree := map[string]*debEntry{}
	for _, deb := range debs {
		var stderr bytes.Buffer
		cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", deb, err, strings.TrimSpace(stderr.String()))
		}
		tr := tar.NewReader(bytes.NewReader(out))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", deb, err)
			}
			name := path.Clean(strings.TrimPrefix(h.Name, "./"))
			if name == "." || strings.HasPrefix(name, "../") {
				continue
			}
			e := &debEntry{typ: h.Typeflag, mode: h.Mode & 0o7777, link: h.Linkname, from: deb}
			switch h.Typeflag {
			case tar.TypeReg:
				if e.data, err = io.ReadAll(tr); err != nil {
					return nil, fmt.Errorf("read %s from %s: %w", name, deb, err)
				}
			case tar.TypeDir, tar.TypeSymlink:
			case tar.TypeLink:
				e.typ, e.link = tar.TypeSymlink, "/"+path.Clean(strings.TrimPrefix(h.Linkname, "./"))
			default:
				continue
			}
			if old, ok := tree[name]; ok && old.typ != tar.TypeDir &&
				(old.typ != e.typ || old.link != e.link || !bytes.Equal(old.data, e.data)) {
				return nil, fmt.Errorf("%s is in both %s and %s: keep one version of each package", name, filepath.Base(old.from), filepath.Base(e.from))
			}
			tree[name] = e
		}
	}
	return tree, nil
}

// resolve follows symlinks from name (relative, clean) inside tree and
// returns every path on the way, the final one last.
func resolve(tree map[string]*debEntry, name string) ([]string, error) {
	var chain []string
	for i := 0; i < 40; i++ {
		e, ok := tree[name]
		if !ok {
			return nil, fmt.Errorf("%s is not in the packages", "/"+name)
		}
		chain = append(chain, name)
		if e.typ != tar.TypeSymlink {
			return chain, nil
		}
		if strings.HasPrefix(e.link, "/") {
			name = path.Clean(strings.TrimPrefix(e.link, "/"))
		} else {
			name = path.Join(path.Dir(name), e.link)
		}
	}
	return nil, fmt.Errorf("/%s: too many symlinks", chain[0])
}

// IptablesLayerFiles selects, from the Debian packages in debDir for
// goarch, what the iptables programs need in an otherwise empty image: the
// programs, the xtables extensions, every shared library they load (their
// ELF DT_NEEDED closure, found by soname in the multiarch library
// directories) and the dynamic loader, with the copyright file of each
// package they come from. A library missing from the packages is an error,
// so a build never produces an image whose iptables cannot start.
func IptablesLayerFiles(debDir, goarch string) ([]file, error) {
	pkgs, err := debsFor(debDir, goarch)
	if err != nil {
		return nil, err
	}
	files, _, err := iptablesLayer(pkgs, debDir, goarch)
	return files, err
}

// iptablesLayer is IptablesLayerFiles of the packages pkgs (read from
// debDir) and the packages it took files from.
func iptablesLayer(pkgs []debPkg, debDir, goarch string) ([]file, []debPkg, error) {
	triplet, ok := multiarch[goarch]
	if !ok {
		return nil, nil, fmt.Errorf("iptables layer: no Debian multiarch triplet known for %s", goarch)
	}
	if len(pkgs) == 0 {
		return nil, nil, fmt.Errorf("no .deb files for %s in %s (run scripts/image-debs.sh %s %s)", goarch, debDir, debDir, debArch[goarch])
	}
	var debs []string
	for _, p := range pkgs {
		debs = append(debs, p.File)
	}
	tree, err := readDebs(debs)
	if err != nil {
		return nil, nil, err
	}
	libDirs := []string{"lib/" + triplet, "usr/lib/" + triplet, "lib", "usr/lib"}
	xtDir := "usr/lib/" + triplet + "/xtables"

	want := map[string]bool{}
	var queue []string
	add := func(name string) error {
		chain, err := resolve(tree, name)
		if err != nil {
			return err
		}
		for _, n := range chain {
			if !want[n] {
				want[n] = true
				queue = append(queue, n)
			}
		}
		return nil
	}
	for _, p := range iptablesPrograms {
		if err := add(p); err != nil {
			return nil, nil, fmt.Errorf("iptables layer: %w", err)
		}
	}
	extensions := 0
	for name, e := range tree {
		if path.Dir(name) == xtDir && strings.HasSuffix(name, ".so") && e.typ != tar.TypeDir {
			if err := add(name); err != nil {
				return nil, nil, fmt.Errorf("iptables layer: %w", err)
			}
			extensions++
		}
	}
	if extensions == 0 {
		return nil, nil, fmt.Errorf("iptables layer: no xtables extensions in /%s", xtDir)
	}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		e := tree[name]
		if e.typ != tar.TypeReg || !bytes.HasPrefix(e.data, []byte("\x7fELF")) {
			continue
		}
		f, err := elf.NewFile(bytes.NewReader(e.data))
		if err != nil {
			return nil, nil, fmt.Errorf("iptables layer: /%s: %w", name, err)
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			return nil, nil, fmt.Errorf("iptables layer: /%s: %w", name, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b, err := io.ReadAll(p.Open())
				if err != nil {
					return nil, nil, fmt.Errorf("iptables layer: /%s: interpreter: %w", name, err)
				}
				interp := strings.TrimRight(string(b), "\x00")
				if err := add(path.Clean(strings.TrimPrefix(interp, "/"))); err != nil {
					return nil, nil, fmt.Errorf("iptables layer: /%s needs its loader %s: %w (add its package to scripts/image-debs.sh)", name, interp, err)
				}
			}
		}
		for _, lib := range needed {
			found := false
			for _, d := range libDirs {
				if _, ok := tree[path.Join(d, lib)]; ok {
					if err := add(path.Join(d, lib)); err != nil {
						return nil, nil, fmt.Errorf("iptables layer: /%s needs %s: %w", name, lib, err)
					}
					found = true
					break
				}
			}
			if !found {
				return nil, nil, fmt.Errorf("iptables layer: /%s needs %s, which none of the packages in %s ships (add its package to scripts/image-debs.sh)", name, lib, debDir)
			}
		}
	}

	// Emit the files with their parent directories, sorted, plus /run for
	// iptables-legacy's lock file.
	dirs := map[string]bool{"run": true}
	for name := range want {
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var names []string
	for d := range dirs {
		names = append(names, d+"/")
	}
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []file
	for _, n := range names {
		if strings.HasSuffix(n, "/") {
			out = append(out, file{name: n, dir: true})
			continue
		}
		e := tree[n]
		switch e.typ {
		case tar.TypeSymlink:
			out = append(out, file{name: n, link: e.link})
		case tar.TypeReg:
			mode := e.mode
			if mode == 0 {
				mode = 0o644
			}
			out = append(out, file{name: n, data: e.data, mode: mode})
		}
	}
	// The packages the files came from: their copyright files and their
	// entries in the dpkg database (written by Build with the base's).
	var used []debPkg
	for _, p := range pkgs {
		for n := range want {
			if tree[n].from == p.File {
				used = append(used, p)
				break
			}
		}
	}
	return mergeFiles(out, copyrights(tree, used)), used, nil
}

// debVersion returns the version of package pkg among pkgs, or "".
func debVersion(pkgs []debPkg, pkg string) string {
	if p := find(pkgs, pkg); p != nil {
		return p.Version
	}
	return ""
}
