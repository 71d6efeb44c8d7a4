package iptables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Command is one program run: name, arguments and standard input.
type Command struct {
	Name  string
	Args  []string
	Stdin string
}

func (c Command) String() string { return strings.Join(append([]string{c.Name}, c.Args...), " ") }

// Runner runs iptables programs. Implementations must be safe for
// sequential use; Manager never runs two commands at once.
type Runner interface {
	// Run runs cmd and returns its standard output. A non-zero exit is an
	// error that includes the program's standard error.
	Run(ctx context.Context, cmd Command) ([]byte, error)
	// LookPath reports whether the program name can be run.
	LookPath(name string) error
}

// ExecRunner runs programs with os/exec.
type ExecRunner struct {
	// Prefix is prepended to every command line, for example
	// ip netns exec NAME. Nil runs programs directly.
	Prefix []string
}

var _ Runner = ExecRunner{}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, c Command) ([]byte, error) {
	argv := append(append(append([]string(nil), r.Prefix...), c.Name), c.Args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if c.Stdin != "" {
		cmd.Stdin = strings.NewReader(c.Stdin)
	}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = msg[:2000] + "..."
		}
		if msg != "" {
			return stdout.Bytes(), fmt.Errorf("%s: %w: %s", c.Name, err, msg)
		}
		return stdout.Bytes(), fmt.Errorf("%s: %w", c.Name, err)
	}
	return stdout.Bytes(), nil
}

// LookPath implements Runner.
func (r ExecRunner) LookPath(name string) error {
	_, err := exec.LookPath(name)
	return err
}
