package main

import (
	"fmt"
	"strconv"
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
compiler), and its entities: ACTIVE on every member, PASSIVATED in the state store ("?" when
the count is partial; "t": of transparent state). New activations use the current version;
entities with explicit state move to it at their next activation, while an entity whose state
is a transparent snapshot keeps the module its state was made by. A version stays listed
while any entity runs it or any saved state needs it; VERSION "-" is such a module that the
type's history no longer lists.`,
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
			fmt.Fprintln(tw, "TYPE\tVERSION\tCURRENT\tSHA256\tBYTES\tDEPLOYED\tBY\tHERE\tENGINE\tACTIVE\tPASSIVATED")
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
				version, deployed := strconv.FormatUint(m.Version, 10), time.Unix(0, m.DeployedAt).UTC().Format(time.RFC3339)
				if m.Version == 0 {
					version, deployed = "-", "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Type, version, cur, m.Digest, m.Size,
					deployed, m.DeployedBy, here, engine, withTransparent(m.Active, m.ActiveTransparent),
					countOrUnknown(m.Passivated, m.PassivatedUnknown)+transparentNote(m.PassivatedTransparent))
				if m.CompileError != "" {
					fmt.Fprintf(tw, "\t\t\tcompile failed: %s\n", m.CompileError)
				}
			}
			return tw.Flush()
		},
	}
	return outputFlags(cmd, &asJSON)
}
