package main

import (
	"fmt"
	"strings"
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
			out := cmd.OutOrStdout()
			if asJSON {
				var members []cluster.Member
				if err := c.getJSON("/v1/members", &members); err != nil {
					return err
				}
				return printJSON(out, members)
			}
			var v cluster.View
			if err := c.getJSON("/v1/cluster", &v); err != nil {
				return err
			}
			converged := "no"
			if v.Converged {
				converged = "yes"
			}
			leader := "none"
			if v.HasLeader {
				leader = v.Leader.Address
			}
			fmt.Fprintf(out, "as seen by %s: leader %s, converged %s\n", v.Self.Address, leader, converged)
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ADDRESS\tUID\tSTATUS\tREACHABLE\tLEADER\tUP#\tROLES\tTRANSPORT\tAPI")
			for _, m := range v.Members {
				lead := ""
				if m.Leader {
					lead = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%d\t%s\t%s\t%s\n", m.Address, m.UID, m.Status, m.Reachable, lead, m.UpNumber,
					strings.Join(m.Roles, ","), m.TransportAddr, m.APIAddr)
			}
			return tw.Flush()
		},
	}
	return outputFlags(cmd, &asJSON)
}
