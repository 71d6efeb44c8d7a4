package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
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
