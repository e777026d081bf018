package main

import (
	"github.com/spf13/cobra"
)

func newTellCommand(g *globals) *cobra.Command {
	var verbose bool
	var key string
	cmd := &cobra.Command{
		Use:   "tell TYPE/ID PAYLOAD",
		Short: "Send a message to an entity without waiting for it (PAYLOAD - reads standard input)",
		Args:  payloadArgs("tell"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, path, payload, err := g.entityCall("tell", args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			r, err := c.doWith("POST", path, payload, keyHeader(key))
			if verbose && r.header != nil {
				printTrace(cmd.ErrOrStderr(), r)
			}
			return err
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also print, on standard error, the request's trace ID")
	idempotencyFlag(cmd, &key)
	return cmd
}
