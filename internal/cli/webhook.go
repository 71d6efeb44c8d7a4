package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(egret): placeholder until the webhook command lands.
func newWebhookCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "webhook",
		Short: "webhook (not implemented yet)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("webhook: not implemented yet")
		},
	}
}
