package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newTellCommand(g *globals) *cobra.Command {
	var verbose bool
	var key, at string
	var in time.Duration
	cmd := &cobra.Command{
		Use:   "tell [--at TIME | --in DURATION] TYPE/ID PAYLOAD",
		Short: "Send a message to an entity without waiting for it (PAYLOAD - reads standard input)",
		Long: `tell sends PAYLOAD to the entity TYPE/ID through any member's API and returns once
the member has taken the message on (it does not wait for the entity).

With --at TIME (RFC 3339, 2026-11-28T12:00:00Z, or Unix milliseconds) or --in
DURATION (90s, 3h: from the member's clock), the message is scheduled: kept in the
state store with its entity's shard, and delivered at that time, as an ordinary
message, whether the entity is active or not, across crashes and restarts; tell prints
its ID, which shardhost scheduled cancel takes. A time in the past delivers it at once
(tell says so). With --idempotency-key, scheduling again with the same key keeps the
first and prints its ID.

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
			if at != "" && cmd.Flags().Changed("in") {
				return fmt.Errorf("--at and --in together: give one")
			}
			if at != "" {
				if _, err := host.ParseDeliverAt(at); err != nil {
					return fmt.Errorf("--at %q is neither RFC 3339 (2026-11-28T12:00:00Z) nor Unix milliseconds", at)
				}
			}
			if in < 0 {
				return fmt.Errorf("--in %v: a duration of 0 or more", in)
			}
			c, path, payload, err := g.entityCall("tell", args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			switch {
			case at != "":
				path += "&deliver_at=" + url.QueryEscape(at)
			case cmd.Flags().Changed("in"):
				path += "&deliver_in=" + url.QueryEscape(in.String())
			default:
				r, err := c.doWith("POST", path, payload, keyHeader(key))
				if verbose && r.header != nil {
					printTrace(cmd.ErrOrStderr(), r)
				}
				return messageOutcome(err)
			}
			r, err := c.doWith("POST", path, payload, keyHeader(key))
			if verbose && r.header != nil {
				printTrace(cmd.ErrOrStderr(), r)
			}
			if err != nil {
				return messageOutcome(err)
			}
			var res host.ScheduledTellResult
			if err := json.Unmarshal(r.body, &res); err != nil {
				return fmt.Errorf("the API's reply: %w", err)
			}
			out := cmd.OutOrStdout()
			verb := "scheduled"
			if res.Status == "already-scheduled" {
				verb = "already scheduled (the same idempotency key)"
			}
			fmt.Fprintf(out, "%s %s for %s: %s\n", verb, res.Entity, res.DeliverAt, res.ID)
			if res.PastDue {
				fmt.Fprintln(out, res.Note)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "schedule the message for TIME: RFC 3339 (2026-11-28T12:00:00Z) or Unix milliseconds")
	cmd.Flags().DurationVar(&in, "in", 0, "schedule the message for DURATION from now (90s, 3h), by the member's clock")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also print, on standard error, the request's trace ID")
	idempotencyFlag(cmd, &key)
	return cmd
}
