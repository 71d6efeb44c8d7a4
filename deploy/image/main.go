// Command image builds egret's OCI image without a Docker daemon: the static
// egret binary on an empty base, run as user 1337, written as a tarball that
// `docker load`, `podman load`, `crane push` and kind/k3s image import read.
//
//	go run ./deploy/image -binary bin/egret -o bin/egret-image.tar -tag ghcr.io/egret-io/egret:dev
//
// The image holds /egret, /etc/passwd and /etc/group naming user egret
// (1337), and the CA certificates of the build machine (for TLS to upstream
// proxies) when -ca-certs exists. Timestamps are zero, so the same inputs
// give the same image digest.
//
// With -iptables-debs DIR (make image-iptables) a second layer adds
// iptables-nft and iptables-legacy, their xtables extensions, the shared
// libraries they load and the dynamic loader, taken from the Debian
// packages in DIR (scripts/iptables-debs.sh downloads them), so the same
// image can run the `egret iptables` init container. PATH is set for it.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// UID is the user the image runs as (the proxy UID transparent mode excludes).
const UID = 1337

// Options describe the image.
type Options struct {
	Binary  string // path of the static egret binary
	CACerts string // CA bundle to include; "" or missing: none
	Arch    string // GOARCH of the binary
	Version string // org.opencontainers.image.version label
	// IptablesDebs, when set, is a directory of Debian packages
	// (scripts/iptables-debs.sh) from which a second layer adds
	// iptables-nft and iptables-legacy with their libraries, for the
	// `egret iptables` init container. "" builds the plain image.
	IptablesDebs string
}

// Build returns the image.
func Build(o Options) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("read binary: %w", err)
	}
	if !bytes.HasPrefix(bin, []byte("\x7fELF")) {
		return nil, fmt.Errorf("%s: not an ELF binary", o.Binary)
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
			return nil, fmt.Errorf("read ca certificates: %w", err)
		}
	}
	layerTar, err := tarOf(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, err
	}
	if o.IptablesDebs != "" {
		files, err := IptablesLayerFiles(o.IptablesDebs, o.Arch)
		if err != nil {
			return nil, err
		}
		ipt, err := tarOf(files)
		if err != nil {
			return nil, err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(ipt)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("iptables layer: %w", err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
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
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "egret",
		"org.opencontainers.image.version": o.Version,
		"org.opencontainers.image.source":  "https://github.com/egret-io/egret",
	}
	if o.IptablesDebs != "" {
		cf.Config.Labels["io.egret.iptables"] = debVersion(o.IptablesDebs, "iptables")
	}
	return mutate.ConfigFile(img, cf)
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

// Write builds the image and writes it as a tarball tagged tag.
func Write(o Options, out, tag string) (v1.Hash, error) {
	ref, err := name.NewTag(tag)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("tag %q: %w", tag, err)
	}
	img, err := Build(o)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", out, err)
	}
	return img.Digest()
}

func main() {
	var o Options
	var out, tag string
	flag.StringVar(&o.Binary, "binary", "bin/egret", "static egret binary (make build)")
	flag.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to include (skipped when missing)")
	flag.StringVar(&o.Arch, "arch", "amd64", "architecture of the binary")
	flag.StringVar(&o.Version, "version", "dev", "image version label")
	flag.StringVar(&o.IptablesDebs, "iptables-debs", "", "directory of Debian packages (scripts/iptables-debs.sh) for the iptables variant")
	flag.StringVar(&out, "o", "bin/egret-image.tar", "output tarball")
	flag.StringVar(&tag, "tag", "ghcr.io/egret-io/egret:dev", "image reference recorded in the tarball")
	flag.Parse()
	d, err := Write(o, out, tag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s %s\n", out, tag, d)
}
