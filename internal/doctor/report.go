package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes outcomes as a JSON array, one object per check in run
// order: name, target, status ("pass", "warn", "fail"), summary, details
// (an array, maybe empty) and advice ("" when there is nothing to do).
func WriteJSON(w io.Writer, outs []Outcome) error {
	if outs == nil {
		outs = []Outcome{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(outs)
}

// WriteReportJSON writes a whole run as one JSON object: "record" (where
// and how it ran, and what the network answered: record.go) and "checks"
// (the array WriteJSON writes).
func WriteReportJSON(w io.Writer, r *Report) error {
	if r.Checks == nil {
		r.Checks = []Outcome{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteReportText writes the checks (WriteText), then the run record's
// essentials: the pod, the four paths, the egress addresses.
func WriteReportText(w io.Writer, r *Report, verbose bool) error {
	if err := WriteText(w, r.Checks, verbose); err != nil {
		return err
	}
	var b strings.Builder
	rec := r.Record
	fmt.Fprintf(&b, "\nrun: egret %s at %s", orDefault(rec.EgretVersion, "dev"), rec.Time.Format(time.RFC3339))
	if rec.Pod.Name != "" {
		fmt.Fprintf(&b, " in pod %s/%s", orDefault(rec.Pod.Namespace, "?"), rec.Pod.Name)
	}
	if rec.Pod.Node != "" {
		fmt.Fprintf(&b, " on node %s", rec.Pod.Node)
	}
	b.WriteString("\n")
	if rec.App.PID != 0 {
		fmt.Fprintf(&b, "app: PID %d %s\n", rec.App.PID, rec.App.Command)
	}
	for _, c := range rec.Pod.Containers {
		fmt.Fprintf(&b, "image: %s %s %s\n", c.Name, c.Image, c.ImageID)
	}
	if len(rec.Pod.ConfigHashes) > 0 {
		var parts []string
		for _, k := range sortedKeys(rec.Pod.ConfigHashes) {
			parts = append(parts, k+"="+rec.Pod.ConfigHashes[k])
		}
		fmt.Fprintf(&b, "injected: %s\n", strings.Join(parts, " "))
	}
	var paths []string
	for _, p := range []string{PathServiceDirect, PathIntranetDirect, PathOutsideViaProxy, PathForbidden} {
		paths = append(paths, p+" "+rec.Paths[p])
	}
	fmt.Fprintf(&b, "paths: %s\n", strings.Join(paths, ", "))
	if len(rec.EgressIPs.Proxy)+len(rec.EgressIPs.Direct) > 0 {
		fmt.Fprintf(&b, "egress: via proxy %s; direct %s\n", orDefault(strings.Join(rec.EgressIPs.Proxy, ", "), "-"), orDefault(strings.Join(rec.EgressIPs.Direct, ", "), "-"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteText writes outcomes for people: a table with one line per check,
// then, for each warning and failure (every check when verbose), what was
// seen and what to do, and a count.
func WriteText(w io.Writer, outs []Outcome, verbose bool) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tCHECK\tTARGET\tSUMMARY")
	for _, o := range outs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Status, o.Name, orDefault(o.Target, "-"), o.Summary)
	}
	tw.Flush()
	counts := map[Status]int{}
	for _, o := range outs {
		counts[o.Status]++
		if o.Status == Pass && !verbose {
			continue
		}
		fmt.Fprintf(&b, "\n%s %s", strings.ToUpper(o.Status.String()), o.Name)
		if o.Target != "" {
			fmt.Fprintf(&b, " %s", o.Target)
		}
		fmt.Fprintf(&b, "\n  %s\n", o.Summary)
		for _, d := range o.Details {
			fmt.Fprintf(&b, "    - %s\n", d)
		}
		if o.Advice != "" {
			fmt.Fprintf(&b, "  do: %s\n", o.Advice)
		}
	}
	warnings := "warnings"
	if counts[Warn] == 1 {
		warnings = "warning"
	}
	fmt.Fprintf(&b, "\n%d passed, %d %s, %d failed\n", counts[Pass], counts[Warn], warnings, counts[Fail])
	_, err := io.WriteString(w, b.String())
	return err
}
