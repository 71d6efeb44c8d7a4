package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"egret.io/egret/internal/suggest"

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

// exitUsage is the exit code of every usage error: an unknown command or
// flag, a bad flag value, a wrong number of arguments.
const exitUsage = 2

// usageError makes err exit with exitUsage.
func usageError(err error) error { return &ExitError{Code: exitUsage, Err: err} }

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
	fmt.Fprintln(stderr, "egret:", strings.TrimSpace(err.Error()))
	if cobraUsage(err) {
		return exitUsage
	}
	return 1
}

// cobraUsage reports the usage errors cobra finds itself, before any
// command runs: an unknown command (with its "Did you mean this?") and
// required flags not set.
func cobraUsage(err error) bool {
	m := err.Error()
	return strings.HasPrefix(m, "unknown command ") || strings.HasPrefix(m, "required flag(s) ") ||
		strings.HasPrefix(m, "if any flags in the group ")
}

// flagError is every command's flag error: exit 2, and for an unknown
// flag the closest one the command has.
func flagError(cmd *cobra.Command, err error) error {
	if name, ok := strings.CutPrefix(err.Error(), "unknown flag: --"); ok {
		var names []string
		add := func(f *pflag.Flag) { names = append(names, f.Name) }
		cmd.Flags().VisitAll(add)
		cmd.InheritedFlags().VisitAll(add)
		if s, ok := suggest.Closest(name, names); ok {
			err = fmt.Errorf("%w; did you mean --%s? (%s --help lists them)", err, s, cmd.CommandPath())
		} else {
			err = fmt.Errorf("%w (%s --help lists the flags)", err, cmd.CommandPath())
		}
	}
	return usageError(err)
}

// usageArgs makes the argument checks of cmd and its subcommands exit 2.
func usageArgs(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error {
			err := check(c, args)
			var ee *ExitError
			if err != nil && !errors.As(err, &ee) {
				return usageError(fmt.Errorf("%s: %w", c.CommandPath(), err))
			}
			return err
		}
	}
	cmd.SetFlagErrorFunc(flagError)
	for _, c := range cmd.Commands() {
		usageArgs(c)
	}
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
		newPolicyCmd(),
		newPodsCmd(),
		newRenderCmd(),
		newStatusCmd(),
		newVersionCmd(),
	)
	root.SuggestionsMinimumDistance = 2
	usageArgs(root)
	return root
}
