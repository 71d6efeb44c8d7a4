package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"egret.io/egret/internal/kubenode"
)

// renderNodeCA writes (or prints) the CA files of `egret node render
// --ca-file`.
func renderNodeCA(cmd *cobra.Command, r kubenode.Runtime, caFile string, registries []string, outDir string) error {
	ca, err := readSmallFileLimit(caFile, cmd, 1<<20)
	if err != nil {
		return nodeUsageErr(fmt.Errorf("--ca-file: %w", err))
	}
	out, err := kubenode.RenderCA(kubenode.CAOptions{Runtime: r, CA: ca, Registries: registries})
	if err != nil {
		return nodeUsageErr(err)
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	tail := ""
	if len(out.Steps) > 0 {
		tail = "then run: " + strings.Join(out.Steps, " && ") + "\n"
	}
	tail += "note: " + out.Note + "\n"
	if outDir == "" {
		for _, f := range out.Files {
			fmt.Fprintf(stdout, "# %s\n%s", f.Path, f.Content)
		}
		fmt.Fprintf(stderr, "egret: install these files on the node (--ca-file alone with --write-dir / writes them), %s", tail)
		return nil
	}
	for _, f := range out.Files {
		p := filepath.Join(outDir, f.Path)
		if err := writeFileMode(p, f.Content, os.FileMode(f.Mode)); err != nil {
			return &ExitError{Code: 1, Err: err}
		}
		fmt.Fprintf(stdout, "wrote %s\n", p)
	}
	fmt.Fprint(stdout, tail)
	return nil
}

// checkNodeCA is `egret node check --ca-file`.
func checkNodeCA(cmd *cobra.Command, r kubenode.Runtime, caFile, root string, registries []string, format string) error {
	if r == "" {
		return nodeUsageErr(errors.New("--ca-file needs --runtime"))
	}
	if len(registries) == 0 {
		return nodeUsageErr(errors.New("--ca-file needs --registry"))
	}
	ca, err := readSmallFileLimit(caFile, cmd, 1<<20)
	if err != nil {
		return nodeUsageErr(fmt.Errorf("--ca-file: %w", err))
	}
	checks, err := kubenode.InspectCA(r, root, registries, ca)
	if err != nil {
		return nodeUsageErr(err)
	}
	w := cmd.OutOrStdout()
	bad := 0
	for _, c := range checks {
		if !c.OK {
			bad++
		}
	}
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(checks); err != nil {
			return err
		}
	} else {
		for _, c := range checks {
			if c.OK {
				fmt.Fprintf(w, "ok   %s: %s trusts %s (%s)\n", c.Registry, r, strings.Join(c.CAs, ", "), strings.Join(c.Files, ", "))
			} else {
				fmt.Fprintf(w, "FAIL %s: %s\n", c.Registry, c.Problem)
			}
		}
	}
	if bad > 0 {
		return &ExitError{Code: nodeExitProblem}
	}
	return nil
}

// readSmallFileLimit reads a file of at most limit bytes ("-" is stdin).
func readSmallFileLimit(name string, cmd *cobra.Command, limit int64) ([]byte, error) {
	if name == "-" {
		return readSmallFile(name, cmd.InOrStdin())
	}
	st, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, limit)
	}
	return os.ReadFile(name)
}
