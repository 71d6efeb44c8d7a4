package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(egret): placeholder until the lint command lands.
func newLintCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "lint",
		Short: "lint (not implemented yet)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("lint: not implemented yet")
		},
	}
}
