package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"egret.io/egret/internal/version"
)

// ExitError carries a specific process exit code out of a command. Commands
// that have documented exit codes (lint, doctor, iptables validation) return
// it; any other error exits with 1.
type ExitError struct {
	Code int
	Err  error // may be nil when the command already reported its result
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Main runs egret with args and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := NewRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(stderr, "egret:", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, "egret:", err)
	return 1
}

// NewRoot builds the egret command tree.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "egret",
		Short:         "Egress for Kubernetes pods, done right",
		Long:          "egret makes outbound traffic from Kubernetes pods go through proxies correctly:\na forward proxy (sidecar and gateway), transparent interception, an admission\nwebhook, and tools that explain and prove the result.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(
		newProxyCmd(),
		newEchoCmd(),
		newNoproxyCmd(),
		newIptablesCmd(),
		newWebhookCmd(),
		newLintCmd(),
		newDoctorCmd(),
		newNodeCmd(),
		newVersionCmd(),
	)
	return root
}
