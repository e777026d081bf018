package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newQueryCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "query TYPE/ID PAYLOAD",
		Short: "Ask an entity a read-only question, without a message (PAYLOAD - reads standard input)",
		Long: `query sends PAYLOAD to the query handler of the entity TYPE/ID (the Go SDK's Query
method, the Rust SDK's Entity::query) and prints its answer. The member runs it on a
throwaway copy of the entity's saved state (its last base and the journal records after
it): the entity is not activated, its messages are not waited for, and nothing the query
does is kept; host calls that would change anything fail with read-only. An ID never
seen is queried on a new entity. Under a checkpoint policy other than the journal, an
active entity is queried on its last saved state (docs/cli.md, "Queries").

Needs the read role. Exit status 1 on any failure: a module without a query handler
(the error says how to add one), the entity's error, a trap, an unknown type.`,
		Args: payloadArgs("query"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, path, payload, err := g.entityCall("query", args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			r, err := c.do("POST", path, payload)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			out.Write(r.body)
			if len(r.body) == 0 || r.body[len(r.body)-1] != '\n' {
				fmt.Fprintln(out)
			}
			return nil
		},
	}
}
