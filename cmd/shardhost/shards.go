package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newShardsCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "shards [--json]",
		Short: "Show which member hosts which shards, and how many active entities each has",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var rep host.ShardsReport
			if err := c.getJSON("/v1/shards", &rep); err != nil {
				return err
			}
			for _, e := range rep.Errors {
				fmt.Fprintln(os.Stderr, "shardhost: warning:", oneLine(e))
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, rep)
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tTYPE\tSHARDS\tENTITIES")
			for _, r := range rep.Regions {
				perType := map[string][2]int{}
				var order []string
				for _, sh := range r.Shards {
					if _, ok := perType[sh.Type]; !ok {
						order = append(order, sh.Type)
					}
					v := perType[sh.Type]
					perType[sh.Type] = [2]int{v[0] + 1, v[1] + sh.Entities}
				}
				if len(order) == 0 {
					fmt.Fprintf(tw, "%s\t-\t0\t0\n", r.Node)
				}
				for _, t := range order {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", r.Node, t, perType[t][0], perType[t][1])
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(out)
			tw = tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tPASSIVATIONS\tBUFFERED DURING HANDOFF\tDEAD LETTERS")
			for _, r := range rep.Regions {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", r.Node, r.Passivations, r.BufferedDuringHandoff, r.DeadLetters)
			}
			return tw.Flush()
		},
	}
	outputFlags(cmd, &asJSON)
	cmd.Flags().Lookup("json").Usage = `print JSON: {"regions":[{"node":ADDRESS,"shards":[{"type":T,"id":S,"entities":N}],"passivations":N,"buffered_during_handoff":N,"dead_letters":N}]}`
	return cmd
}
