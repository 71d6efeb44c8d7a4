package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(egret): placeholder until the node command lands.
func newNodeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "node",
		Short: "node (not implemented yet)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("node: not implemented yet")
		},
	}
}
