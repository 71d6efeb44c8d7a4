// Command image builds egret's OCI image without a Docker daemon: the static
// egret binary on an empty base, run as user 1337, for one or more
// platforms, written as an OCI image layout (a directory: oci-layout,
// index.json, blobs/) whose index.json names one multi-platform image
// index. `make image` builds linux/amd64 and linux/arm64:
//
//	go run ./deploy/image -binary linux/amd64=bin/linux-amd64/egret -binary linux/arm64=bin/linux-arm64/egret \
//	    -version v0.1.0 -revision <commit> -created 2026-01-02T03:04:05Z -sbom bin -o bin/egret-oci -tag ghcr.io/egret-io/egret:v0.1.0
//
// `crane push bin/egret-oci REF` and `skopeo copy --all oci:bin/egret-oci
// docker://REF` push it; a tar of the directory is an OCI archive that
// `docker load` (25+), `podman load` and `kind load image-archive` read.
//
// Each image holds /egret, /etc/passwd and /etc/group naming user egret
// (1337) and, with -debs DIR (scripts/image-debs.sh fills it), files of
// Debian packages: the root CAs (for TLS to upstream proxies) built from
// the pinned ca-certificates package as update-ca-certificates builds
// them — never the build machine's —, base-files' /etc/os-release, their
// copyright files, and /var/lib/dpkg/status naming those packages, so
// that scanners (Trivy, Grype) see them. Its labels carry the build identity
// (org.opencontainers.image.version, .revision, .created); the builder
// refuses a binary that was not stamped with that version and commit (make
// build stamps it), one for another architecture, and a dynamically linked
// one. The image's creation time is -created, so the same commit gives the
// same digests.
//
// Beside each platform's image the index holds its SPDX 2.3 SBOM (the Go
// modules linked into that binary, read from its build information) as an
// OCI artifact whose subject is that image, with platform unknown/unknown so
// that no runtime pulls it as the image; -sbom DIR also writes them as
// DIR/egret-<os>-<arch>.spdx.json.
//
// With -iptables-debs DIR (make image-iptables) a second layer adds
// iptables-nft and iptables-legacy, their xtables extensions, the shared
// libraries they load and the dynamic loader, taken from the Debian
// packages in DIR (scripts/image-debs.sh downloads them), so the same
// image can run the `egret iptables` init container. PATH is set for it;
// the layer's dpkg status names the base's packages and the iptables ones,
// and its SBOM lists them. Each platform takes the packages of its Debian
// architecture (NAME_VERSION_ARCH.deb) and those for all.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// UID is the user the image runs as (the proxy UID transparent mode excludes).
const UID = 1337

// Options describe one platform's image.
type Options struct {
	Binary string // path of the static egret binary
	Arch   string // GOARCH of the binary
	// Debs is a directory of Debian packages (scripts/image-debs.sh) from
	// which every image takes its root CAs (the pinned ca-certificates
	// package), /etc/os-release (base-files) and a dpkg status database
	// naming them, so that scanners see what the image holds.
	Debs string
	// CACerts is a CA bundle file to include instead (tests, a private
	// build); "" = the one of Debs, or none.
	CACerts string
	Stamp
	// IptablesDebs, when set, is a directory of Debian packages
	// (scripts/image-debs.sh) from which a second layer adds
	// iptables-nft and iptables-legacy with their libraries, for the
	// `egret iptables` init container. "" builds the plain image.
	IptablesDebs string
}

// Stamp is the build identity the labels carry; make passes the values it
// stamped into the binaries.
type Stamp struct {
	Version  string // org.opencontainers.image.version (git describe)
	Revision string // org.opencontainers.image.revision (the commit); "" = not checked
	Created  string // org.opencontainers.image.created, RFC 3339; "" = the Unix epoch
}

// elfMachine maps GOARCH to the ELF machine of its binaries.
var elfMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM, "386": elf.EM_386,
	"ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV,
}

// checkBinary refuses what would not run or would lie in the image: not an
// ELF, another architecture, dynamically linked (the image has no libc), or
// not stamped with the labels' version and commit.
func checkBinary(path string, bin []byte, o Options) error {
	if !bytes.HasPrefix(bin, []byte("\x7fELF")) {
		return fmt.Errorf("%s: not an ELF binary", path)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if want, ok := elfMachine[o.Arch]; !ok {
		return fmt.Errorf("unknown architecture %q", o.Arch)
	} else if f.Machine != want {
		return fmt.Errorf("%s is a %s binary, not %s", path, f.Machine, o.Arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: the image has no libc; build it with CGO_ENABLED=0 (make build)", path)
		}
	}
	// -X stores each value verbatim among the binary's strings.
	for _, v := range []struct{ what, s string }{{"version", o.Version}, {"commit", o.Revision}} {
		if v.s != "" && v.s != "dev" && !bytes.Contains(bin, []byte(v.s)) {
			return fmt.Errorf("%s was not built with %s %s, which the labels would claim (make image builds and labels in one step)", path, v.what, v.s)
		}
	}
	return nil
}

// name is the image's name in its SBOM: egret, or egret-iptables.
func (o Options) name() string {
	if o.IptablesDebs != "" {
		return "egret-iptables"
	}
	return "egret"
}

// created is the image creation time: Stamp.Created, else the epoch.
func (s Stamp) created() (time.Time, error) {
	if s.Created == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339, s.Created)
	if err != nil {
		return time.Time{}, fmt.Errorf("created %q: want RFC 3339 (2026-01-02T03:04:05Z)", s.Created)
	}
	return t.UTC(), nil
}

// Labels are the image's OCI labels.
func (s Stamp) Labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":   "egret",
		"org.opencontainers.image.version": s.Version,
		"org.opencontainers.image.source":  "https://github.com/egret-io/egret",
	}
	if s.Revision != "" {
		l["org.opencontainers.image.revision"] = s.Revision
	}
	if s.Created != "" {
		l["org.opencontainers.image.created"] = s.Created
	}
	return l
}

// Build returns one platform's image.
func Build(o Options) (v1.Image, error) {
	img, _, err := build(o)
	return img, err
}

// Contents is what an image holds besides egret: the Debian packages it
// took files from, for its SBOM, and their distribution (debian-12).
type Contents struct {
	Debs   []debPkg
	Distro string
}

func build(o Options) (v1.Image, Contents, error) {
	var c Contents
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, c, fmt.Errorf("read binary: %w", err)
	}
	if err := checkBinary(o.Binary, bin, o); err != nil {
		return nil, c, err
	}
	created, err := o.created()
	if err != nil {
		return nil, c, err
	}
	files := []file{
		{name: "etc/", dir: true},
		{name: "etc/passwd", data: []byte(fmt.Sprintf("root:x:0:0:root:/:/sbin/nologin\negret:x:%d:%d:egret:/:/sbin/nologin\n", UID, UID))},
		{name: "etc/group", data: []byte(fmt.Sprintf("root:x:0:\negret:x:%d:\n", UID))},
		{name: "tmp/", dir: true, mode: 0o1777},
		{name: "egret", data: bin, mode: 0o755},
	}
	if o.CACerts != "" {
		ca, err := os.ReadFile(o.CACerts)
		switch {
		case err == nil:
			files = append(files, file{name: "etc/ssl/", dir: true}, file{name: "etc/ssl/certs/", dir: true},
				file{name: "etc/ssl/certs/ca-certificates.crt", data: ca})
		case !errors.Is(err, os.ErrNotExist):
			return nil, c, fmt.Errorf("read ca certificates: %w", err)
		}
	} else if o.Debs != "" {
		pkgs, err := debsFor(o.Debs, o.Arch)
		if err != nil {
			return nil, c, err
		}
		base, distro, err := baseFiles(pkgs)
		if err != nil {
			return nil, c, fmt.Errorf("%s: %w", o.Debs, err)
		}
		files = mergeFiles(files, base)
		c.Debs = append(c.Debs, *find(pkgs, "base-files"), *find(pkgs, "ca-certificates"))
		c.Distro = distro
	}
	layer, err := layerOf(files)
	if err != nil {
		return nil, c, fmt.Errorf("layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, c, err
	}
	var iptablesVersion string
	if o.IptablesDebs != "" {
		pkgs, err := debsFor(o.IptablesDebs, o.Arch)
		if err != nil {
			return nil, c, err
		}
		files, used, err := iptablesLayer(pkgs, o.IptablesDebs, o.Arch)
		if err != nil {
			return nil, c, err
		}
		iptablesVersion = debVersion(pkgs, "iptables")
		if len(c.Debs) > 0 {
			// The database of the upper layer replaces the base's: it
			// names every package of the image.
			c.Debs = append(c.Debs, used...)
			files = mergeFiles(files, statusFiles(c.Debs))
		}
		layer, err := layerOf(files)
		if err != nil {
			return nil, c, fmt.Errorf("iptables layer: %w", err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return nil, c, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, c, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: created}
	cf.Config.Entrypoint = []string{"/egret"}
	cf.Config.Cmd = nil
	cf.Config.User = fmt.Sprintf("%d:%d", UID, UID)
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	if o.IptablesDebs != "" {
		// `egret iptables` finds iptables-nft-restore & co. on PATH.
		cf.Config.Env = append(cf.Config.Env, "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	}
	cf.Config.ExposedPorts = map[string]struct{}{"3128/tcp": {}, "9901/tcp": {}, "9443/tcp": {}}
	cf.Config.Labels = o.Labels()
	if o.IptablesDebs != "" {
		cf.Config.Labels["io.egret.iptables"] = iptablesVersion
	}
	if p := find(c.Debs, "ca-certificates"); p != nil {
		cf.Config.Labels["io.egret.ca-certificates"] = p.Version
	}
	img, err = mutate.ConfigFile(img, cf)
	return img, c, err
}

func layerOf(files []file) (v1.Layer, error) {
	b, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

type file struct {
	name string
	data []byte
	dir  bool
	link string // set for a symbolic link to link
	mode int64
}

func tarOf(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg,
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		}
		if f.link != "" {
			h.Typeflag, h.Linkname, h.Mode, h.Size = tar.TypeSymlink, f.link, 0o777, 0
		}
		if f.mode != 0 {
			h.Mode = f.mode
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Platform is one image of the index: "linux/arm64" and its binary.
type Platform struct {
	OS, Arch, Binary string
}

// ParsePlatform reads "linux/arm64=path".
func ParsePlatform(s string) (Platform, error) {
	plat, bin, ok := strings.Cut(s, "=")
	osName, arch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || bin == "" || osName != "linux" || arch == "" {
		return Platform{}, fmt.Errorf("-binary %q: want linux/ARCH=PATH (e.g. linux/arm64=bin/linux-arm64/egret)", s)
	}
	return Platform{OS: osName, Arch: arch, Binary: bin}, nil
}

// Built is the result of BuildIndex.
type Built struct {
	Index  v1.ImageIndex
	Images map[string]v1.Image // by "linux/arch"
	SBOMs  map[string][]byte   // SPDX JSON by "linux/arch"
}

// BuildIndex builds one image per platform (the binary given for each, the
// rest of o shared) and the index of them with their SBOMs.
func BuildIndex(o Options, platforms []Platform) (*Built, error) {
	if len(platforms) == 0 {
		return nil, errors.New("no -binary given")
	}
	b := &Built{Images: map[string]v1.Image{}, SBOMs: map[string][]byte{}}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	var sboms []mutate.IndexAddendum
	sort.Slice(platforms, func(i, j int) bool { return platforms[i].Arch < platforms[j].Arch })
	for _, p := range platforms {
		key := p.OS + "/" + p.Arch
		if _, dup := b.Images[key]; dup {
			return nil, fmt.Errorf("platform %s given twice", key)
		}
		po := o
		po.Binary, po.Arch = p.Binary, p.Arch
		img, contents, err := build(po)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		b.Images[key] = img
		desc, err := descriptorOf(img)
		if err != nil {
			return nil, err
		}
		desc.Platform = &v1.Platform{OS: p.OS, Architecture: p.Arch}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: *desc})
		doc, err := SBOM(p.Binary, key, o.Stamp, o.name(), contents)
		if err != nil {
			return nil, fmt.Errorf("%s: sbom: %w", key, err)
		}
		b.SBOMs[key] = doc
		art, err := sbomArtifact(doc, *desc, o.Stamp)
		if err != nil {
			return nil, fmt.Errorf("%s: sbom: %w", key, err)
		}
		adesc, err := descriptorOf(art)
		if err != nil {
			return nil, err
		}
		adesc.ArtifactType = SPDXMediaType
		adesc.Platform = &v1.Platform{OS: "unknown", Architecture: "unknown"}
		adesc.Annotations = map[string]string{"org.opencontainers.image.ref.name": "sbom-" + p.OS + "-" + p.Arch}
		sboms = append(sboms, mutate.IndexAddendum{Add: art, Descriptor: *adesc})
	}
	// Images first: a runtime that picks the first usable entry never sees
	// an SBOM before them.
	b.Index = mutate.AppendManifests(idx, append(adds, sboms...)...)
	return b, nil
}

func descriptorOf(img v1.Image) (*v1.Descriptor, error) {
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	sz, err := img.Size()
	if err != nil {
		return nil, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	return &v1.Descriptor{MediaType: mt, Size: sz, Digest: d}, nil
}

// WriteLayout writes the index as an OCI image layout in dir (replacing
// it), its one entry annotated with the tag, and returns the index digest.
func WriteLayout(dir string, idx v1.ImageIndex, tag string) (v1.Hash, error) {
	ref, err := name.NewTag(tag)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("tag %q: %w", tag, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", dir, err)
	}
	err = p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          ref.Name(),
	}))
	if err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", dir, err)
	}
	return idx.Digest()
}

type platformFlags []Platform

func (p *platformFlags) String() string { return fmt.Sprint(*p) }
func (p *platformFlags) Set(s string) error {
	pl, err := ParsePlatform(s)
	if err != nil {
		return err
	}
	*p = append(*p, pl)
	return nil
}

func main() {
	var o Options
	var platforms platformFlags
	var out, tag, sbomDir string
	flag.Var(&platforms, "binary", "linux/ARCH=PATH: a static egret binary for that platform (repeatable; make image builds them)")
	flag.StringVar(&o.Debs, "debs", "", "directory of Debian packages (scripts/image-debs.sh): the root CAs of the pinned ca-certificates, os-release and a dpkg database")
	flag.StringVar(&o.CACerts, "ca-certs", "", "a CA bundle file to include instead of -debs' (not the build machine's by default)")
	flag.StringVar(&o.Version, "version", "dev", "org.opencontainers.image.version: the version stamped into the binaries")
	flag.StringVar(&o.Revision, "revision", "", "org.opencontainers.image.revision: the commit stamped into the binaries")
	flag.StringVar(&o.Created, "created", "", "org.opencontainers.image.created and the image time, RFC 3339 (default: the Unix epoch)")
	flag.StringVar(&o.IptablesDebs, "iptables-debs", "", "directory of Debian packages (scripts/image-debs.sh) for the iptables variant")
	flag.StringVar(&out, "o", "bin/egret-oci", "output directory: an OCI image layout")
	flag.StringVar(&tag, "tag", "ghcr.io/egret-io/egret:dev", "image reference recorded in the layout")
	flag.StringVar(&sbomDir, "sbom", "", "also write each platform's SBOM as DIR/egret-<os>-<arch>.spdx.json")
	flag.Parse()
	if o.Debs == "" && o.CACerts == "" {
		fmt.Fprintln(os.Stderr, "image: warning: neither -debs nor -ca-certs: the image has no root CAs")
	}
	if err := run(o, platforms, out, tag, sbomDir); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o Options, platforms []Platform, out, tag, sbomDir string) error {
	b, err := BuildIndex(o, platforms)
	if err != nil {
		return err
	}
	d, err := WriteLayout(out, b.Index, tag)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(b.SBOMs))
	for k := range b.SBOMs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if sbomDir == "" {
			break
		}
		p := filepath.Join(sbomDir, o.name()+"-"+strings.ReplaceAll(k, "/", "-")+".spdx.json")
		if err := os.WriteFile(p, b.SBOMs[k], 0o644); err != nil {
			return err
		}
		fmt.Println("sbom", p)
	}
	fmt.Printf("%s %s %s (%s)\n", out, tag, d, strings.Join(keys, ", "))
	return nil
}
