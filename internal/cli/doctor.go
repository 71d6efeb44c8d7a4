package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO(egret): placeholder until the doctor command lands.
func newDoctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "doctor (not implemented yet)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("doctor: not implemented yet")
		},
	}
}
