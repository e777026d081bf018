package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newModulesCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "modules [--json]",
		Short: "List every entity type's module versions and digests",
		Long: `List every version of every deployed entity type, newest first: its module's SHA-256,
size, when and where it was deployed, whether this member holds it, and how it runs it
(ENGINE: interpreter while the module compiles in the background after a deploy, then
compiler). New activations use the current version; entities active during a deploy move to
it at their next activation.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var mods []host.ModuleInfo
			if err := c.getJSON("/v1/modules", &mods); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, mods)
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tVERSION\tCURRENT\tSHA256\tBYTES\tDEPLOYED\tBY\tHERE\tENGINE")
			for _, m := range mods {
				cur, here := "", "no"
				if m.Current {
					cur = "*"
				}
				if m.Local {
					here = "yes"
				}
				engine := m.Engine
				if engine == "" {
					engine = "-"
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", m.Type, m.Version, cur, m.Digest, m.Size,
					time.Unix(0, m.DeployedAt).UTC().Format(time.RFC3339), m.DeployedBy, here, engine)
				if m.CompileError != "" {
					fmt.Fprintf(tw, "\t\t\tcompile failed: %s\n", m.CompileError)
				}
			}
			return tw.Flush()
		},
	}
	return outputFlags(cmd, &asJSON)
}
