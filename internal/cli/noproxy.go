package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(egret): placeholder until the noproxy command lands. The discover
// subcommand lives in noproxy_discover.go (Kubernetes integration).
func newNoproxyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "noproxy",
		Short: "noproxy (not implemented yet)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("noproxy: not implemented yet")
		},
	}
	cmd.AddCommand(newNoproxyDiscoverCmd())
	return cmd
}
