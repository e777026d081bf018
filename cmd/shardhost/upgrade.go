package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newUpgradeCommand(g *globals) *cobra.Command {
	var typ string
	var now, dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "upgrade --type NAME [--now | --dry-run]",
		Short: "Move a type's running entities to its current version",
		Long: `upgrade moves the active entities of an entity type that run an older version of its
module, and keep explicit state, to the current version: it passivates them, a shard at
a time (their state saved; messages that arrive meanwhile wait, no ask fails), so that
each takes the current version at its next message with its state; with --now it
activates each again at once. Entities whose state is a transparent snapshot cannot
move: their state belongs to their module; but for a type deployed with --history all,
each replays its whole journal on the new module at its activation, and moves when
every message does what its record says (the same outcome, reply and host calls), or
stays, with the message where it differed. --dry-run lists those that cannot move, with
the reason (it tries the replays), and
what an upgrade would move, and changes nothing. The output ends with the type's entities
by version (docs/sharding.md, "Upgrading running entities").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if typ == "" {
				return fmt.Errorf("--type is required: the entity type to upgrade")
			}
			if now && dryRun {
				return fmt.Errorf("--now and --dry-run exclude each other")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			q := url.Values{}
			if dryRun {
				q.Set("dry_run", "true")
			}
			if now {
				q.Set("now", "true")
			}
			r, err := c.do("POST", "/v1/types/"+url.PathEscape(typ)+"/upgrade?"+q.Encode(), nil)
			if err != nil {
				return err
			}
			var res host.UpgradeResult
			if err := json.Unmarshal(r.body, &res); err != nil {
				return fmt.Errorf("the API's reply is not what this client expects: %v", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, res)
			}
			printUpgrade(out, res)
			if len(res.Failed) > 0 {
				return fmt.Errorf("%d of %d entities did not upgrade; they stay on their version", len(res.Failed), res.Upgradable)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "name of the entity type (required)")
	cmd.Flags().BoolVar(&now, "now", false, "activate each passivated entity again at once, on the current version")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what an upgrade would move and what cannot upgrade, and change nothing")
	return outputFlags(cmd, &asJSON)
}

// printUpgrade renders an UpgradeResult.
func printUpgrade(out io.Writer, res host.UpgradeResult) {
	if res.DryRun {
		fmt.Fprintf(out, "dry run: %d active entities of %s would move to version %d\n", res.Upgradable, res.Type, res.Version)
	} else {
		fmt.Fprintf(out, "upgraded %d of %d active entities of %s to version %d\n", res.Upgraded, res.Upgradable, res.Type, res.Version)
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	for _, f := range res.Failed {
		fmt.Fprintf(tw, "  FAILED\t%s\t%s\n", f.ID, oneLine(f.Reason))
	}
	if len(res.Cannot) > 0 {
		fmt.Fprintf(out, "%d entities cannot upgrade:\n", len(res.Cannot))
		fmt.Fprintln(tw, "  ID\tVERSION\tSTATE\tREASON")
		for _, e := range res.Cannot {
			state := "passivated"
			if e.Active {
				state = "active"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", e.ID, e.Version, state, e.Reason)
		}
	}
	tw.Flush()
	fmt.Fprintln(out, "entities by version now:")
	for _, v := range res.Remaining.Versions {
		if v.Active == 0 && v.Passivated == 0 {
			continue
		}
		fmt.Fprintf(out, "  version %d: %s active, %s passivated\n", v.Version, withTransparent(v.Active, v.ActiveTransparent),
			countOrUnknown(v.Passivated, res.Remaining.PassivatedUnknown)+transparentNote(v.PassivatedTransparent))
	}
	if len(res.Errors) > 0 {
		fmt.Fprintf(out, "partial: %s\n", oneLine(strings.Join(res.Errors, "; ")))
	}
}
