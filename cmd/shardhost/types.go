package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newTypesCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "types [--json]",
		Short: "List the deployed entity types and their entities by version",
		Long: `List the deployed entity types: current version, shards, module, and how many entities
are active (on every member) and passivated (saved in the state store), with a line per
version that has any. An entity whose state is a transparent snapshot keeps the module its
state was made by ("t" counts them); one with explicit state takes the current version at
its next activation. PASSIVATED is "?" when the count is partial (a member did not answer,
or the state store cannot list its states).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var types []host.TypeStatus
			if err := c.getJSON("/v1/types", &types); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, types)
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tVERSION\tSHARDS\tBYTES\tSHA256\tDEPLOYED BY\tACTIVE\tPASSIVATED")
			for _, t := range types {
				active, passivated := 0, 0
				for _, v := range t.Usage.Versions {
					active += v.Active
					passivated += v.Passivated
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%d\t%s\n", t.Name, t.Version, t.NumberOfShards, t.Size, t.Digest[:16], t.DeployedBy,
					active, countOrUnknown(passivated, t.Usage.PassivatedUnknown))
				if r := t.Rollout; r != nil && r.State == host.RolloutCanary {
					fmt.Fprintf(tw, "  canary: %s on version %d, the others on version %d\t\t\t\t\t\t\t\n", canaryShare(*r), r.Canary, r.Stable)
				}
				for _, v := range t.Usage.Versions {
					if v.Active == 0 && v.Passivated == 0 {
						continue
					}
					name := fmt.Sprintf("version %d", v.Version)
					if v.Version == 0 {
						name = "unlisted " + v.Digest[:12]
					}
					fmt.Fprintf(tw, "  %s\t\t\t\t\t\t%s\t%s\n", name, withTransparent(v.Active, v.ActiveTransparent),
						countOrUnknown(v.Passivated, t.Usage.PassivatedUnknown)+transparentNote(v.PassivatedTransparent))
				}
			}
			for _, t := range types {
				if len(t.Usage.Errors) > 0 {
					fmt.Fprintf(tw, "counts partial: %s\n", oneLine(strings.Join(t.Usage.Errors, "; ")))
					break
				}
			}
			return tw.Flush()
		},
	}
	return outputFlags(cmd, &asJSON)
}

// countOrUnknown renders a count, with "?" after it when it may be partial.
func countOrUnknown(n int, unknown bool) string {
	if unknown {
		return strconv.Itoa(n) + "?"
	}
	return strconv.Itoa(n)
}

// withTransparent renders a count with how many of them have a transparent state.
func withTransparent(n, transparent int) string {
	return strconv.Itoa(n) + transparentNote(transparent)
}

func transparentNote(transparent int) string {
	if transparent == 0 {
		return ""
	}
	return " (" + strconv.Itoa(transparent) + " t)"
}
