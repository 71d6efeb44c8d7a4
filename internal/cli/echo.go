package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(egret): placeholder until the echo command lands.
func newEchoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "echo",
		Short: "echo (not implemented yet)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("echo: not implemented yet")
		},
	}
}
