package main

import (
	"os"
	"strings"
	"testing"
)

// testdata/run.json is `go test -json` of a package with a passing test
// that has a skipped subtest, a skipped test and a failing test.
func TestRun(t *testing.T) {
	f, err := os.Open("testdata/run.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	s, err := Run(f, &out)
	if err != nil {
		t.Fatal(err)
	}
	if s.Passed != 1 || s.Failed != 1 || s.Skipped != 2 || len(s.FailedPackages) != 1 {
		t.Errorf("summary %+v", s)
	}
	got := out.String()
	for _, want := range []string{"--- FAIL: TestC", "s_test.go:5: boom", "FAIL\texample.com/m"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"hello", "=== RUN"} {
		if strings.Contains(got, not) {
			t.Errorf("output has %q (a passing test's log or a RUN line):\n%s", not, got)
		}
	}
	var sum strings.Builder
	s.Write(&sum)
	for _, want := range []string{"1 passed, 1 failed, 2 skipped", "example.com/m TestA/x: s_test.go:3: no tool x", "example.com/m TestB: s_test.go:4: needs root"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}
}

func TestSkipReasonMultiLine(t *testing.T) {
	got := skipReason([]string{"=== RUN   TestX\n", "    x_test.go:9: first\n", "    x_test.go:10: needs squid\n", "        (run make test-deps)\n", "--- SKIP: TestX (0.00s)\n"})
	if got != "x_test.go:10: needs squid (run make test-deps)" {
		t.Errorf("reason %q", got)
	}
	if got := skipReason([]string{"--- SKIP: TestY (0.00s)\n"}); got != "(no reason given)" {
		t.Errorf("reason %q", got)
	}
}
