package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newTypesCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "types [--json]",
		Short: "List the deployed entity types",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var types []host.TypeInfo
			if err := c.getJSON("/v1/types", &types); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, types)
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tVERSION\tSHARDS\tBYTES\tSHA256\tDEPLOYED BY")
			for _, t := range types {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", t.Name, t.Version, t.NumberOfShards, t.Size, t.Digest[:16], t.DeployedBy)
			}
			return tw.Flush()
		},
	}
	return outputFlags(cmd, &asJSON)
}
