package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newAskCommand(g *globals) *cobra.Command {
	var timeout time.Duration
	var verbose bool
	var key string
	cmd := &cobra.Command{
		Use:   "ask TYPE/ID PAYLOAD",
		Short: "Send a message to an entity and print its reply (PAYLOAD - reads standard input)",
		Long: `ask sends PAYLOAD to the entity TYPE/ID through any member's API, waits for the
entity's reply (at most --timeout) and prints it.

Exit status:
  0    the entity's reply is printed
  75   not delivered: the message never reached the entity (its member is gone and its
       shard has no new home yet, the member stopping, the API not reached): sending it
       again is safe
  124  outcome unknown: the message may have been handled (no reply within --timeout,
       or the connection broke on the way): send it again only with an idempotency key,
       or if handling it twice does no harm
  1    any other failure: the entity's error, a trap, an unknown type, bad input, ...
The error says which, with the API's code (docs/cli.md, "Errors").`,
		Args: payloadArgs("ask"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, path, payload, err := g.entityCall("ask", args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			r, err := c.doWith("POST", fmt.Sprintf("%s&timeout=%s", path, timeout), payload, keyHeader(key))
			if verbose && r.header != nil {
				defer printTrace(cmd.ErrOrStderr(), r)
			}
			if err != nil {
				return messageOutcome(err)
			}
			out := cmd.OutOrStdout()
			out.Write(r.body)
			if len(r.body) == 0 || r.body[len(r.body)-1] != '\n' {
				fmt.Fprintln(out)
			}
			if verbose {
				fmt.Fprintf(cmd.ErrOrStderr(), "(%s is hosted on %s)\n", args[0], r.header.Get(host.NodeHeader))
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the reply")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also print, on standard error, which member hosts the entity and the request's trace ID")
	idempotencyFlag(cmd, &key)
	return cmd
}

// idempotencyFlag adds --idempotency-key to an ask or a tell.
func idempotencyFlag(cmd *cobra.Command, key *string) {
	cmd.Flags().StringVar(key, "idempotency-key", "", "the message's idempotency key (at most 256 bytes): a retry with the same key gets the first reply and the entity handles the message once, for the type's retention (24 h by default)")
}

// keyHeader is the request header of an idempotency key; nil for none.
func keyHeader(key string) http.Header {
	if key == "" {
		return nil
	}
	return http.Header{host.IdempotencyKeyHeader: {key}}
}
