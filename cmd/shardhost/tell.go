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
		Long: `tell sends PAYLOAD to the entity TYPE/ID through any member's API and returns once
the member has taken the message on (it does not wait for the entity).

Exit status:
  0    the member took the message on
  75   not delivered: the member did not take it (it is stopping, the API not reached):
       sending it again is safe
  124  outcome unknown: the connection broke before the member answered: it may have
       taken the message; send it again only with an idempotency key, or if handling it
       twice does no harm
  1    any other failure: an unknown type, a full buffer, bad input, ...`,
		Args: payloadArgs("tell"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, path, payload, err := g.entityCall("tell", args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			r, err := c.doWith("POST", path, payload, keyHeader(key))
			if verbose && r.header != nil {
				printTrace(cmd.ErrOrStderr(), r)
			}
			return messageOutcome(err)
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also print, on standard error, the request's trace ID")
	idempotencyFlag(cmd, &key)
	return cmd
}
