package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"egret.io/egret/internal/version"
)

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version [-o text|json]",
		Short: "Print egret's version, commit, dirty flag, build date and Go version",
		Long: `version prints the build identity: the version (git describe of the tag the
binary was built from), the commit and whether the work tree had uncommitted
changes, the build date, and the Go version and platform. The image labels
(org.opencontainers.image.version, .revision, .created) and the
egret_build_info metric carry the same values. egret --version prints the
same line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			i := version.Get()
			switch output {
			case "json":
				return writeJSON(cmd.OutOrStdout(), i)
			case "text", "":
				fmt.Fprintln(cmd.OutOrStdout(), i)
				return nil
			}
			return &ExitError{Code: 2, Err: fmt.Errorf("unknown output format %q (want text or json)", output)}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
