package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/cluster"
)

func newMembersCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "members [--json]",
		Short: "List the members of the cluster as the node behind --api sees them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var members []cluster.Member
			if err := c.getJSON("/v1/members", &members); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, members)
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ADDRESS\tUID\tSTATUS\tREACHABLE\tTRANSPORT\tAPI")
			for _, m := range members {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\n", m.Address, m.UID, m.Status, m.Reachable, m.TransportAddr, m.APIAddr)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
