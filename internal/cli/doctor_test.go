package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestDoctorUsageExitsTwo: bad usage is exit 2 and nothing is checked.
func TestDoctorUsageExitsTwo(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"bad-output", []string{"doctor", "-o", "xml"}, "unknown output format"},
		{"unknown-flag", []string{"doctor", "--nope"}, "unknown flag"},
		{"positional-argument", []string{"doctor", "kubernetes"}, "use --internal"},
		{"bad-echo", []string{"doctor", "--echo", "echo.example:8080"}, "--echo"},
		{"bad-internal", []string{"doctor", "--internal", "x:0"}, "--internal"},
		{"bad-timeout", []string{"doctor", "--timeout", "soon"}, "invalid argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := Main(tc.args, strings.NewReader(""), &out, &errb); code != 2 {
				t.Fatalf("exit %d, want 2; stderr %s", code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.stderr) || out.Len() != 0 {
				t.Errorf("stderr %q lacks %q, or a report was printed: %q", errb.String(), tc.stderr, out.String())
			}
		})
	}
}
