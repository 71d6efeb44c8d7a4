package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(egret): placeholder until NO_PROXY discovery lands.
func newNoproxyDiscoverCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "discover",
		Short: "discover (not implemented yet)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("noproxy discover: not implemented yet")
		},
	}
}
