package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(egret): placeholder until the proxy command lands.
func newProxyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "proxy",
		Short: "proxy (not implemented yet)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("proxy: not implemented yet")
		},
	}
}
