package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(egret): placeholder until the noproxy command lands.
func newNoproxyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "noproxy",
		Short: "noproxy (not implemented yet)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("noproxy: not implemented yet")
		},
	}
}
