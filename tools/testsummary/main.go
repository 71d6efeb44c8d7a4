// Command testsummary reads `go test -json` on stdin and writes what plain
// `go test` would (package results, the output of failing tests, build
// errors), then a summary: counts and the list of skipped tests with the
// reason each gave. `make test` pipes the suite through it, so a test that
// skips is never silent. It exits 1 when a test or a package failed, or
// when the input is not test2json.
//
//	go test -json -race ./... | go run ./tools/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// event is one line of test2json (cmd/test2json documents the fields).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	Test       string
	Output     string
	Elapsed    float64
	ImportPath string // build-output and build-fail events
}

// Skip is a skipped test and why.
type Skip struct {
	Package, Test, Reason string
}

// Summary counts a run.
type Summary struct {
	Passed, Failed, Skipped int
	FailedPackages          []string
	Skips                   []Skip
}

type key struct{ pkg, test string }

// logLine is the first line of a t.Log/t.Skip message: "    file_test.go:12: ...".
var logLine = regexp.MustCompile(`^\s+\S+\.go:\d+: `)

// Run copies the readable part of the stream in to out and returns the
// summary.
func Run(in io.Reader, out io.Writer) (Summary, error) {
	var s Summary
	buf := map[key][]string{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not an event: go's own messages (a build error printed before
			// the stream, for instance). Pass it through.
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "build-output":
			io.WriteString(out, e.Output)
		case "output":
			if e.Test == "" {
				io.WriteString(out, e.Output)
			} else {
				buf[k] = append(buf[k], e.Output)
			}
		case "pass":
			if e.Test != "" {
				s.Passed++
			}
			delete(buf, k)
		case "skip":
			if e.Test != "" {
				s.Skipped++
				s.Skips = append(s.Skips, Skip{Package: e.Package, Test: e.Test, Reason: skipReason(buf[k])})
			}
			delete(buf, k)
		case "fail":
			if e.Test == "" {
				s.FailedPackages = append(s.FailedPackages, e.Package)
				// A panic or a timeout ends tests that never report: show
				// what they wrote.
				var open []key
				for ok := range buf {
					if ok.pkg == e.Package {
						open = append(open, ok)
					}
				}
				sort.Slice(open, func(i, j int) bool { return open[i].test < open[j].test })
				for _, ok := range open {
					io.WriteString(out, strings.Join(buf[ok], ""))
					delete(buf, ok)
				}
				continue
			}
			s.Failed++
			for _, l := range buf[k] {
				if !strings.HasPrefix(l, "=== ") {
					io.WriteString(out, l)
				}
			}
			delete(buf, k)
		}
	}
	return s, sc.Err()
}

// skipReason is the last message logged before "--- SKIP", with its
// continuation lines.
func skipReason(lines []string) string {
	start := -1
	for i, l := range lines {
		if logLine.MatchString(l) {
			start = i
		}
	}
	if start < 0 {
		return "(no reason given)"
	}
	var parts []string
	for i, l := range lines[start:] {
		if i > 0 && (logLine.MatchString(l) || strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "=== ")) {
			break
		}
		parts = append(parts, strings.TrimSpace(l))
	}
	return strings.Join(parts, " ")
}

// Write prints the summary: counts, then every skipped test and why.
func (s Summary) Write(w io.Writer) {
	// "N passed, N failed, N skipped" alone on its line: the closing line
	// CI reads.
	fmt.Fprintf(w, "\nsummary: %d passed, %d failed, %d skipped\n", s.Passed, s.Failed, s.Skipped)
	if len(s.FailedPackages) > 0 {
		fmt.Fprintf(w, "failed packages: %s\n", strings.Join(s.FailedPackages, ", "))
	}
	if len(s.Skips) == 0 {
		return
	}
	sort.Slice(s.Skips, func(i, j int) bool {
		a, b := s.Skips[i], s.Skips[j]
		if a.Package != b.Package {
			return a.Package < b.Package
		}
		return a.Test < b.Test
	})
	fmt.Fprintf(w, "skipped tests (%d):\n", len(s.Skips))
	for _, sk := range s.Skips {
		fmt.Fprintf(w, "  %s %s: %s\n", sk.Package, sk.Test, sk.Reason)
	}
}

func main() {
	s, err := Run(os.Stdin, os.Stdout)
	s.Write(os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	if s.Failed > 0 || len(s.FailedPackages) > 0 {
		os.Exit(1)
	}
}
