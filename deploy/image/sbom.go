package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// SPDXMediaType is the media type of an SPDX 2.3 JSON document, the
// artifact type of the SBOM manifests.
const SPDXMediaType = "application/spdx+json"

// spdx is the part of an SPDX 2.3 document egret writes.
type spdx struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      spdxCreation   `json:"creationInfo"`
	Packages          []spdxPackage  `json:"packages"`
	Relationships     []spdxRelation `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID           string         `json:"SPDXID"`
	Name             string         `json:"name"`
	VersionInfo      string         `json:"versionInfo"`
	DownloadLocation string         `json:"downloadLocation"`
	Supplier         string         `json:"supplier,omitempty"`
	LicenseDeclared  string         `json:"licenseDeclared,omitempty"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
	Purpose          string         `json:"primaryPackagePurpose,omitempty"`
	Comment          string         `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelation struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// SBOM writes the SPDX 2.3 document of one platform's image: egret (the
// main module) and every Go module linked into it, with the Go standard
// library, read from the binary's build information (what `go version -m`
// prints), so it lists exactly what was compiled in; and the Debian
// packages the image took files from (c.Debs, each with its package URL
// pkg:deb/debian/NAME@VERSION?arch=A&distro=debian-12, which scanners
// match against Debian's security tracker). name is the image's (egret,
// egret-iptables).
func SBOM(binary, platform string, st Stamp, name string, c Contents) ([]byte, error) {
	bi, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("read build information of %s: %w", binary, err)
	}
	f, err := os.Open(binary)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	created := st.Created
	if created == "" {
		created = "1970-01-01T00:00:00Z"
	}
	purl := func(path, version string) []spdxRef {
		return []spdxRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/" + path + "@" + version}}
	}
	var settings []string
	for _, s := range bi.Settings {
		if s.Key == "GOOS" || s.Key == "GOARCH" || s.Key == "CGO_ENABLED" || s.Key == "-trimpath" {
			settings = append(settings, s.Key+"="+s.Value)
		}
	}
	main := spdxPackage{SPDXID: "SPDXRef-Package-egret", Name: bi.Main.Path, VersionInfo: st.Version,
		DownloadLocation: "https://github.com/egret-io/egret", FilesAnalyzed: false, LicenseDeclared: "Apache-2.0",
		Checksums:    []spdxChecksum{{Algorithm: "SHA256", Value: sum}},
		ExternalRefs: purl(bi.Main.Path, st.Version), Purpose: "APPLICATION",
		Comment: "the egret binary for " + platform + ", built with " + bi.GoVersion + " (" + strings.Join(settings, " ") + ")"}
	doc := spdx{SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              name + "-" + st.Version + "-" + strings.ReplaceAll(platform, "/", "-"),
		DocumentNamespace: "https://github.com/egret-io/egret/spdx/" + name + "/" + st.Version + "/" + platform + "/" + sum,
		CreationInfo:      spdxCreation{Created: created, Creators: []string{"Tool: egret-deploy-image", "Organization: egret"}},
		Packages: []spdxPackage{main, {SPDXID: "SPDXRef-Package-stdlib", Name: "stdlib", VersionInfo: bi.GoVersion,
			DownloadLocation: "https://go.dev/dl/", ExternalRefs: purl("stdlib", bi.GoVersion), Purpose: "LIBRARY"}},
		Relationships: []spdxRelation{{"SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Package-egret"},
			{"SPDXRef-Package-egret", "DEPENDS_ON", "SPDXRef-Package-stdlib"}}}
	for i, d := range bi.Deps {
		m := d
		comment := ""
		if d.Replace != nil {
			m = d.Replace
			comment = "replaces " + d.Path + " " + d.Version
		}
		id := fmt.Sprintf("SPDXRef-Package-go-%d", i+1)
		p := spdxPackage{SPDXID: id, Name: m.Path, VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
			ExternalRefs: purl(m.Path, m.Version), Purpose: "LIBRARY", Comment: comment}
		if m.Sum != "" {
			// The go.sum hash (h1: is SHA-256 over the module's files).
			p.Comment = strings.TrimSpace(p.Comment + " go.sum " + m.Sum)
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelation{"SPDXRef-Package-egret", "DEPENDS_ON", id})
	}
	for _, d := range c.Debs {
		id := "SPDXRef-Package-deb-" + spdxIDPart(d.Name)
		comment := "Debian package " + filepath.Base(d.File) + " (files taken from it into the image)"
		if d.Source != "" && d.Source != d.Name {
			comment += "; source package " + d.Source
		}
		doc.Packages = append(doc.Packages, spdxPackage{SPDXID: id, Name: d.Name, VersionInfo: d.Version,
			Supplier: "Organization: Debian", DownloadLocation: "NOASSERTION",
			Checksums:    []spdxChecksum{{Algorithm: "SHA256", Value: d.SHA256}},
			ExternalRefs: []spdxRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: d.purl(c.Distro)}},
			Purpose:      "OPERATING-SYSTEM", Comment: comment})
		doc.Relationships = append(doc.Relationships, spdxRelation{"SPDXRef-DOCUMENT", "DESCRIBES", id})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// spdxIDPart keeps the characters an SPDX identifier may hold.
func spdxIDPart(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

// emptyJSON is the OCI empty descriptor's content.
var emptyJSON = []byte("{}")

// sbomArtifact is the OCI 1.1 artifact manifest carrying doc, whose subject
// is the platform image it describes.
func sbomArtifact(doc []byte, subject v1.Descriptor, st Stamp) (v1.Image, error) {
	subject.Platform = nil
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  SPDXMediaType,
		Config: v1.Descriptor{MediaType: "application/vnd.oci.empty.v1+json", Size: int64(len(emptyJSON)),
			Digest: digestOf(emptyJSON), Data: emptyJSON},
		Layers: []v1.Descriptor{{MediaType: SPDXMediaType, Size: int64(len(doc)), Digest: digestOf(doc),
			Annotations: map[string]string{"org.opencontainers.image.title": "sbom.spdx.json"}}},
		Subject: &subject,
	}
	if st.Created != "" {
		m.Annotations = map[string]string{"org.opencontainers.image.created": st.Created}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, doc: doc})
}

func digestOf(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}

// artifact is a manifest with the empty config and one blob.
type artifact struct {
	manifest, doc []byte
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return emptyJSON, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h == digestOf(a.doc) {
		return blob{a.doc, SPDXMediaType}, nil
	}
	if h == digestOf(emptyJSON) {
		return blob{emptyJSON, "application/vnd.oci.empty.v1+json"}, nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}

type blob struct {
	b  []byte
	mt types.MediaType
}

func (b blob) Digest() (v1.Hash, error)            { return digestOf(b.b), nil }
func (b blob) Compressed() (io.ReadCloser, error)  { return io.NopCloser(bytes.NewReader(b.b)), nil }
func (b blob) Size() (int64, error)                { return int64(len(b.b)), nil }
func (b blob) MediaType() (types.MediaType, error) { return b.mt, nil }
