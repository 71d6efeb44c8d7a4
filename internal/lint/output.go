package lint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// jsonFinding is the stable JSON form of a Finding (`egret lint -o json`).
type jsonFinding struct {
	Rule      string   `json:"rule"`
	Severity  Severity `json:"severity"`
	Message   string   `json:"message"`
	File      string   `json:"file"`
	Line      int      `json:"line,omitempty"`
	Object    string   `json:"object"`
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace,omitempty"`
	Name      string   `json:"name"`
	Container string   `json:"container,omitempty"`
	Field     string   `json:"field,omitempty"`
	Docs      string   `json:"docs"`
}

// WriteJSON writes findings as a JSON array (an empty array when there are
// none). Each element has rule, severity, message, file, object ("Kind/
// namespace/name"), kind, name, docs (DocsURL(docsBase, rule)) and, when
// known, line, namespace, container and field.
func WriteJSON(w io.Writer, fs []Finding, docsBase string) error {
	out := make([]jsonFinding, 0, len(fs))
	for _, f := range fs {
		out = append(out, jsonFinding{
			Rule: f.Rule, Severity: f.Severity, Message: f.Message, File: f.File, Line: f.Line,
			Object: f.Object.String(), Kind: f.Object.Kind, Namespace: f.Object.Namespace, Name: f.Object.Name,
			Container: f.Container, Field: f.Field, Docs: DocsURL(docsBase, f.Rule),
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

// WriteText writes findings for people: one block per finding (with its
// DocsURL under docsBase) and a summary line counting them over objects
// objects.
func WriteText(w io.Writer, fs []Finding, objects int, docsBase string) error {
	var b strings.Builder
	counts := map[Severity]int{}
	for _, f := range fs {
		counts[f.Severity]++
		loc := f.File
		if f.Line > 0 {
			loc = fmt.Sprintf("%s:%d", f.File, f.Line)
		}
		if loc != "" {
			loc += ": "
		}
		what := f.Object.String()
		if f.Container != "" {
			what += ", container " + f.Container
		}
		fmt.Fprintf(&b, "%s%s [%s] %s\n    %s\n    see %s\n", loc, f.Severity, f.Rule, what, f.Message, DocsURL(docsBase, f.Rule))
	}
	plural := func(n int, s string) string {
		if n == 1 || s == "info" {
			return fmt.Sprintf("%d %s", n, s)
		}
		return fmt.Sprintf("%d %ss", n, s)
	}
	fmt.Fprintf(&b, "%s, %s, %s in %s\n", plural(counts[Error], "error"), plural(counts[Warning], "warning"),
		plural(counts[Info], "info"), plural(objects, "object"))
	_, err := io.WriteString(w, b.String())
	return err
}

// SARIF 2.1.0, the subset GitHub code scanning reads.
type (
	sarifLog struct {
		Schema  string     `json:"$schema"`
		Version string     `json:"version"`
		Runs    []sarifRun `json:"runs"`
	}
	sarifRun struct {
		Tool    sarifTool     `json:"tool"`
		Results []sarifResult `json:"results"`
	}
	sarifTool struct {
		Driver sarifDriver `json:"driver"`
	}
	sarifDriver struct {
		Name           string      `json:"name"`
		Version        string      `json:"version,omitempty"`
		InformationURI string      `json:"informationUri,omitempty"`
		Rules          []sarifRule `json:"rules"`
	}
	sarifRule struct {
		ID                   string         `json:"id"`
		Name                 string         `json:"name"`
		ShortDescription     sarifText      `json:"shortDescription"`
		FullDescription      sarifText      `json:"fullDescription"`
		Help                 sarifHelp      `json:"help"`
		HelpURI              string         `json:"helpUri,omitempty"`
		DefaultConfiguration sarifConfig    `json:"defaultConfiguration"`
		Properties           map[string]any `json:"properties,omitempty"`
	}
	sarifText struct {
		Text string `json:"text"`
	}
	sarifHelp struct {
		Text     string `json:"text"`
		Markdown string `json:"markdown,omitempty"`
	}
	sarifConfig struct {
		Level string `json:"level"`
	}
	sarifResult struct {
		RuleID              string            `json:"ruleId"`
		RuleIndex           int               `json:"ruleIndex"`
		Level               string            `json:"level"`
		Message             sarifText         `json:"message"`
		Locations           []sarifLocation   `json:"locations"`
		PartialFingerprints map[string]string `json:"partialFingerprints,omitempty"`
	}
	sarifLocation struct {
		PhysicalLocation *sarifPhysical `json:"physicalLocation,omitempty"`
		LogicalLocations []sarifLogical `json:"logicalLocations,omitempty"`
	}
	sarifPhysical struct {
		ArtifactLocation sarifArtifact `json:"artifactLocation"`
		Region           *sarifRegion  `json:"region,omitempty"`
	}
	sarifArtifact struct {
		URI string `json:"uri"`
	}
	sarifRegion struct {
		StartLine int `json:"startLine"`
	}
	sarifLogical struct {
		FullyQualifiedName string `json:"fullyQualifiedName"`
		Kind               string `json:"kind"`
	}
)

// SARIFSchema is the schema URI written into SARIF logs.
const SARIFSchema = "https://json.schemastore.org/sarif-2.1.0.json"

// sarifLevel maps a severity to a SARIF level.
func sarifLevel(s Severity) string {
	switch s {
	case Error:
		return "error"
	case Warning:
		return "warning"
	default:
		return "note"
	}
}

// WriteSARIF writes findings as a SARIF 2.1.0 log for code-scanning tools.
// Every rule is listed in tool.driver.rules; version is the tool version.
// The help text links DocsURL(docsBase, rule); helpUri and informationUri,
// which SARIF wants absolute, are written only when docsBase is an absolute
// URL.
func WriteSARIF(w io.Writer, fs []Finding, version, docsBase string) error {
	if docsBase == "" {
		docsBase = DefaultDocsBase
	}
	abs := absoluteURI(docsBase)
	run := sarifRun{Tool: sarifTool{Driver: sarifDriver{Name: "egret", Version: version}}, Results: []sarifResult{}}
	if abs {
		run.Tool.Driver.InformationURI = docsBase
	}
	index := map[string]int{}
	for i, r := range rules {
		index[r.ID] = i
		docs := DocsURL(docsBase, r.ID)
		rule := sarifRule{
			ID:                   r.ID,
			Name:                 camel(r.ID),
			ShortDescription:     sarifText{Text: r.Summary},
			FullDescription:      sarifText{Text: r.Help},
			Help:                 sarifHelp{Text: r.Help + "\nSee " + docs, Markdown: r.Help + "\n\n[Documentation](" + docs + ")"},
			DefaultConfiguration: sarifConfig{Level: sarifLevel(r.Severity)},
			Properties:           map[string]any{"tags": []string{"kubernetes", "egress", "proxy"}, "scope": r.Scope()},
		}
		if abs {
			rule.HelpURI = docs
		}
		run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, rule)
	}
	for _, f := range fs {
		idx, ok := index[f.Rule]
		if !ok {
			return fmt.Errorf("unknown rule %q", f.Rule)
		}
		msg := f.Object.String()
		if f.Container != "" {
			msg += ", container " + f.Container
		}
		msg += ": " + f.Message
		loc := sarifLocation{LogicalLocations: []sarifLogical{{FullyQualifiedName: logicalName(f), Kind: "object"}}}
		if f.File != "" {
			loc.PhysicalLocation = &sarifPhysical{ArtifactLocation: sarifArtifact{URI: artifactURI(f.File)}}
			if f.Line > 0 {
				loc.PhysicalLocation.Region = &sarifRegion{StartLine: f.Line}
			}
		}
		run.Results = append(run.Results, sarifResult{
			RuleID: f.Rule, RuleIndex: idx, Level: sarifLevel(f.Severity), Message: sarifText{Text: msg},
			Locations:           []sarifLocation{loc},
			PartialFingerprints: map[string]string{"egretFinding/v1": fingerprint(f)},
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(sarifLog{Schema: SARIFSchema, Version: "2.1.0", Runs: []sarifRun{run}})
}

// camel turns "no-proxy-missing" into "NoProxyMissing".
func camel(id string) string {
	var b strings.Builder
	for _, p := range strings.Split(id, "-") {
		if p != "" {
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
	}
	return b.String()
}

func logicalName(f Finding) string {
	s := f.Object.String()
	if f.Container != "" {
		s += "/" + f.Container
	}
	return s
}

// artifactURI turns a file name into a URI reference: relative paths stay
// relative (with forward slashes), absolute ones become file: URIs.
func artifactURI(file string) string {
	p := filepath.ToSlash(file)
	abs := filepath.IsAbs(file)
	p = strings.TrimPrefix(p, "./")
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~/!$&'()*+,;=", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if abs {
		return "file://" + b.String()
	}
	return b.String()
}

// fingerprint identifies a finding across runs independent of line moves.
func fingerprint(f Finding) string {
	h := sha256.Sum256([]byte(strings.Join([]string{f.Rule, f.File, f.Object.String(), f.Container, f.Field}, "\x00")))
	return hex.EncodeToString(h[:8])
}
