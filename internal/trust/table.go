package trust

import (
	"fmt"
	"strings"
)

// Table renders the model as the Markdown table of docs/trust.md: per
// runtime, what it reads (first set wins), whether that adds to or
// replaces its roots, the default directory still read, when it re-reads,
// how the row was checked and its sources.
func Table() string {
	var b strings.Builder
	b.WriteString("| runtime | reads (first set wins) | the file … | default roots | re-read | checked | sources |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range Runtimes() {
		var reads, eff []string
		for _, s := range r.Settings {
			reads = append(reads, "`"+s.String()+"`")
			e := s.Effect.String()
			if s.Dir != "" {
				e += "; " + s.Dir + " still read"
			}
			eff = append(eff, "`"+s.String()+"`: "+e)
		}
		var src []string
		for i, u := range r.Sources {
			src = append(src, fmt.Sprintf("[%d](%s)", i+1, u))
		}
		fmt.Fprintf(&b, "| **%s** — %s | %s | %s | %s | %s | %s | %s |\n",
			r.Name, esc(r.Description), strings.Join(reads, ", "), esc(strings.Join(eff, "<br>")), esc(r.Default), r.Reread, r.Verified, strings.Join(src, " "))
	}
	b.WriteString("\nNotes:\n\n")
	for _, r := range Runtimes() {
		fmt.Fprintf(&b, "- **%s**: %s\n", r.Name, r.Note)
	}
	return b.String()
}

func esc(s string) string { return strings.ReplaceAll(s, "|", "\\|") }
