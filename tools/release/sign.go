package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"

	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/sign"
)

// BundleSuffix is what sign appends to an artefact's name.
const BundleSuffix = ".sigstore.json"

func signFiles(args []string) error {
	fs := flag.NewFlagSet("sign", flag.ExitOnError)
	keyPath := fs.String("key", "", "the private key (cosign.key)")
	fs.Parse(args)
	if *keyPath == "" || fs.NArg() == 0 {
		return errUsage
	}
	kp, err := loadKey(*keyPath)
	if err != nil {
		return err
	}
	for _, f := range fs.Args() {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := writeBundle(f+BundleSuffix, &sign.PlainData{Data: data}, kp); err != nil {
			return fmt.Errorf("%s: %v", f, err)
		}
	}
	return nil
}

func writeBundle(path string, content sign.Content, kp *keypair) error {
	pb, err := sign.Bundle(content, kp, sign.BundleOptions{})
	if err != nil {
		return err
	}
	b, err := bundle.NewBundle(pb)
	if err != nil {
		return err
	}
	out, err := b.MarshalJSON()
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(out, '\n'), 0o644)
}

// The SLSA v1 provenance statement (https://slsa.dev/spec/v1.0/provenance).
const (
	statementType  = "https://in-toto.io/Statement/v1"
	slsaProvenance = "https://slsa.dev/provenance/v1"
	inTotoPayload  = "application/vnd.in-toto+json"
	buildType      = "https://egret.io/release/make-release/v1"
)

type subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

func provenance(args []string) error {
	fs := flag.NewFlagSet("provenance", flag.ExitOnError)
	keyPath := fs.String("key", "", "the private key (cosign.key)")
	out := fs.String("out", "", "the signed statement, a Sigstore bundle (DSSE)")
	version := fs.String("version", "", "the release version")
	commit := fs.String("commit", "", "the source commit")
	repo := fs.String("repo", "https://github.com/egret-io/egret", "the source repository")
	builder := fs.String("builder", "https://egret.io/release/make-release@local", "builder.id: who ran make release")
	started := fs.String("started", "", "when the build started, RFC 3339")
	fs.Parse(args)
	if *keyPath == "" || *out == "" || *version == "" || *commit == "" || fs.NArg() == 0 {
		return errUsage
	}
	kp, err := loadKey(*keyPath)
	if err != nil {
		return err
	}
	var subjects []subject
	for _, f := range fs.Args() {
		sum, err := sha256File(f)
		if err != nil {
			return err
		}
		subjects = append(subjects, subject{Name: filepath.Base(f), Digest: map[string]string{"sha256": sum}})
	}
	sort.Slice(subjects, func(i, j int) bool { return subjects[i].Name < subjects[j].Name })
	src := map[string]any{"uri": "git+" + *repo + "@" + *version, "digest": map[string]string{"gitCommit": *commit}}
	meta := map[string]any{}
	if *started != "" {
		meta["startedOn"] = *started
	}
	st := map[string]any{
		"_type":         statementType,
		"subject":       subjects,
		"predicateType": slsaProvenance,
		"predicate": map[string]any{
			"buildDefinition": map[string]any{
				"buildType":            buildType,
				"externalParameters":   map[string]any{"version": *version, "source": src, "target": "make release"},
				"internalParameters":   map[string]any{"goVersion": runtime.Version()},
				"resolvedDependencies": []any{src},
			},
			"runDetails": map[string]any{
				"builder":  map[string]any{"id": *builder},
				"metadata": meta,
			},
		},
	}
	payload, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return writeBundle(*out, &sign.DSSEData{Data: payload, PayloadType: inTotoPayload}, kp)
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
