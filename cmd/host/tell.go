package main

import (
	"github.com/spf13/cobra"
)

func newTellCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "tell TYPE/ID PAYLOAD",
		Short: "Send a message to an entity without waiting for it (PAYLOAD - reads standard input)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, path, payload, err := g.entityCall("tell", args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			_, err = c.do("POST", path, payload)
			return err
		},
	}
}
