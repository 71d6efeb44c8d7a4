package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(egret): placeholder until the iptables command lands.
func newIptablesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "iptables",
		Short: "iptables (not implemented yet)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("iptables: not implemented yet")
		},
	}
}
