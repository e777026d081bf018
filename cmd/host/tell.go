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
			typ, id, err := parseTarget(args[0])
			if err != nil {
				return err
			}
			payload, err := payloadArg(args[1], cmd.InOrStdin())
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			_, err = c.do("POST", "/v1/tell?"+entityQuery(typ, id), payload)
			return err
		},
	}
}
