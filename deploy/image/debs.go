package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// debArch maps GOARCH to Debian's architecture name.
var debArch = map[string]string{
	"amd64": "amd64", "arm64": "arm64", "arm": "armhf", "386": "i386",
	"ppc64le": "ppc64el", "s390x": "s390x", "riscv64": "riscv64",
}

// debPkg is one Debian package an image takes files from.
type debPkg struct {
	File    string // the .deb
	Name    string
	Version string
	Arch    string // Debian architecture, or "all"
	Source  string // source package name, "" = Name
	SHA256  string // of the .deb
	Control string // dpkg-deb -f: the control stanza
}

// debsFor returns the packages of dir for goarch: those whose file name
// (NAME_VERSION_ARCH.deb, as apt-get download writes it) is for its Debian
// architecture or for all, one version of each package. A package in
// another version twice is an error.
func debsFor(dir, goarch string) ([]debPkg, error) {
	arch, ok := debArch[goarch]
	if !ok {
		return nil, fmt.Errorf("no Debian architecture known for %s", goarch)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.deb"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []debPkg
	seen := map[string]string{}
	for _, f := range files {
		parts := strings.Split(strings.TrimSuffix(filepath.Base(f), ".deb"), "_")
		if len(parts) != 3 || (parts[2] != arch && parts[2] != "all") {
			continue
		}
		if prev, dup := seen[parts[0]]; dup {
			return nil, fmt.Errorf("%s and %s are the same package: keep one version of each in %s", prev, filepath.Base(f), dir)
		}
		seen[parts[0]] = filepath.Base(f)
		p, err := readDebPkg(f)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// readDebPkg reads a package's control stanza and digest.
func readDebPkg(file string) (debPkg, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("dpkg-deb", "-f", file)
	cmd.Stderr = &stderr
	ctl, err := cmd.Output()
	if err != nil {
		return debPkg{}, fmt.Errorf("dpkg-deb -f %s: %w: %s", file, err, strings.TrimSpace(stderr.String()))
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return debPkg{}, err
	}
	sum := sha256.Sum256(b)
	p := debPkg{File: file, SHA256: hex.EncodeToString(sum[:]), Control: strings.TrimRight(string(ctl), "\n")}
	for _, l := range strings.Split(p.Control, "\n") {
		k, v, ok := strings.Cut(l, ": ")
		if !ok || strings.HasPrefix(l, " ") {
			continue
		}
		switch k {
		case "Package":
			p.Name = v
		case "Version":
			p.Version = v
		case "Architecture":
			p.Arch = v
		case "Source":
			p.Source, _, _ = strings.Cut(v, " ") // "iptables (1.8.9-2)"
		}
	}
	if p.Name == "" || p.Version == "" || p.Arch == "" {
		return debPkg{}, fmt.Errorf("%s: control without Package, Version or Architecture", file)
	}
	return p, nil
}

// find returns the package named name, or nil.
func find(pkgs []debPkg, name string) *debPkg {
	for i := range pkgs {
		if pkgs[i].Name == name {
			return &pkgs[i]
		}
	}
	return nil
}

// purl is the package URL of a Debian package (what scanners match).
func (p debPkg) purl(distro string) string {
	q := "?arch=" + p.Arch
	if distro != "" {
		q += "&distro=" + distro
	}
	return "pkg:deb/debian/" + p.Name + "@" + strings.ReplaceAll(p.Version, ":", "%3A") + q
}

// dpkgStatus is /var/lib/dpkg/status listing pkgs as installed, the
// database Trivy, Grype (syft) and other scanners read to know the image's
// Debian packages and versions.
func dpkgStatus(pkgs []debPkg) []byte {
	sorted := append([]debPkg(nil), pkgs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var b strings.Builder
	for i, p := range sorted {
		if i > 0 {
			b.WriteString("\n")
		}
		for _, l := range strings.Split(p.Control, "\n") {
			b.WriteString(l + "\n")
			if strings.HasPrefix(l, "Package: ") {
				b.WriteString("Status: install ok installed\n")
			}
		}
	}
	return []byte(b.String())
}

// baseFiles are the files the Debian packages give every image: the CA
// bundle built from the ca-certificates package, the os-release of
// base-files (scanners read it to know the distribution), each package's
// copyright file, and the dpkg status database naming them.
func baseFiles(pkgs []debPkg) ([]file, string, error) {
	ca, bf := find(pkgs, "ca-certificates"), find(pkgs, "base-files")
	if ca == nil || bf == nil {
		return nil, "", fmt.Errorf("the Debian packages lack ca-certificates or base-files (run scripts/image-debs.sh)")
	}
	tree, err := readDebs([]string{ca.File, bf.File})
	if err != nil {
		return nil, "", err
	}
	bundle, _, err := caBundle(tree)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", filepath.Base(ca.File), err)
	}
	osRelease := tree["usr/lib/os-release"]
	debianVersion := tree["etc/debian_version"]
	if osRelease == nil || osRelease.typ != tar.TypeReg || debianVersion == nil {
		return nil, "", fmt.Errorf("%s has no usr/lib/os-release or etc/debian_version", filepath.Base(bf.File))
	}
	files := []file{
		{name: "etc/debian_version", data: debianVersion.data},
		{name: "etc/os-release", link: "../usr/lib/os-release"},
		{name: "etc/ssl/", dir: true}, {name: "etc/ssl/certs/", dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", data: bundle},
		{name: "usr/", dir: true}, {name: "usr/lib/", dir: true},
		{name: "usr/lib/os-release", data: osRelease.data},
	}
	files = append(files, copyrights(tree, []debPkg{*bf, *ca})...)
	files = append(files, statusFiles([]debPkg{*bf, *ca})...)
	return files, distroOf(osRelease.data), nil
}

// mergeFiles is a and b without repeated names (a's entry wins), sorted by
// name, so each directory comes before what it holds.
func mergeFiles(a, b []file) []file {
	seen := map[string]bool{}
	var out []file
	for _, f := range append(append([]file(nil), a...), b...) {
		if !seen[f.name] {
			seen[f.name] = true
			out = append(out, f)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// statusFiles are the dpkg database's directories and status file.
func statusFiles(pkgs []debPkg) []file {
	return []file{{name: "var/", dir: true}, {name: "var/lib/", dir: true}, {name: "var/lib/dpkg/", dir: true},
		{name: "var/lib/dpkg/status", data: dpkgStatus(pkgs)}}
}

// copyrights are usr/share/doc/PKG/copyright of each package (the licences
// of what the image ships), with their directories.
func copyrights(tree map[string]*debEntry, pkgs []debPkg) []file {
	out := []file{{name: "usr/share/", dir: true}, {name: "usr/share/doc/", dir: true}}
	for _, p := range pkgs {
		name := "usr/share/doc/" + p.Name + "/copyright"
		e := tree[name]
		if e == nil || e.typ != tar.TypeReg {
			continue
		}
		out = append(out, file{name: path.Dir(name) + "/", dir: true}, file{name: name, data: e.data})
	}
	return out
}

// caBundle concatenates the package's certificates as update-ca-certificates
// does on a Debian system with the default /etc/ca-certificates.conf (every
// certificate, in the C-locale order of their paths), and returns the
// bundle and how many certificates it holds.
func caBundle(tree map[string]*debEntry) ([]byte, int, error) {
	var names []string
	for name, e := range tree {
		if strings.HasPrefix(name, "usr/share/ca-certificates/") && strings.HasSuffix(name, ".crt") && e.typ == tar.TypeReg {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, 0, fmt.Errorf("no certificates under /usr/share/ca-certificates")
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range names {
		b.Write(tree[n].data)
		if !bytes.HasSuffix(tree[n].data, []byte("\n")) {
			b.WriteByte('\n')
		}
	}
	return b.Bytes(), len(names), nil
}

// distroOf is the purl distro qualifier of an os-release: debian-12.
func distroOf(osRelease []byte) string {
	var id, ver string
	for _, l := range strings.Split(string(osRelease), "\n") {
		k, v, _ := strings.Cut(l, "=")
		v = strings.Trim(v, `"`)
		switch k {
		case "ID":
			id = v
		case "VERSION_ID":
			ver = v
		}
	}
	if id == "" || ver == "" {
		return ""
	}
	return id + "-" + ver
}
