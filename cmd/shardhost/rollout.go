package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newRolloutCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout status|promote|rollback --type NAME",
		Short: "Watch, promote or roll back a type's canary",
		Long: `rollout acts on the canary of an entity type (deploy --canary).

status shows the canary's share, its active entities, and the failure rates (traps,
deadlines, guest errors) of the canary's and the stable version's messages over the
window. promote makes the canary the current version for every entity (the others take it
at their next activation; 'shardhost upgrade --now' brings that forward). rollback sends
every new activation to the stable version's module again, as a new version, and moves
the canary's active entities back with their state where the stable version reads it
(its shardhost_migrate, if any, accepts it); the others stay on the canary, and the
command lists them with why (docs/sharding.md, "Canary rollouts").`,
	}
	for _, op := range []string{"status", "promote", "rollback"} {
		cmd.AddCommand(g.clientFlags(newRolloutOp(g, op)))
	}
	return cmd
}

func newRolloutOp(g *globals, op string) *cobra.Command {
	var typ string
	var asJSON bool
	short := map[string]string{
		"status":   "Show a type's canary: its share, entities and failure rates",
		"promote":  "Make a type's canary its current version for every entity",
		"rollback": "Send a type's entities back to the version before its canary",
	}[op]
	cmd := &cobra.Command{
		Use:   op + " --type NAME",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if typ == "" {
				return fmt.Errorf("--type is required: the entity type of the rollout")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			path := "/v1/types/" + url.PathEscape(typ) + "/rollout"
			method := "GET"
			if op != "status" {
				path, method = path+"/"+op, "POST"
			}
			r, err := c.do(method, path, nil)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var v any
			switch op {
			case "status":
				v = &host.RolloutStatus{}
			case "promote":
				v = &host.TypeInfo{}
			default:
				v = &host.RollbackResult{}
			}
			if err := json.Unmarshal(r.body, v); err != nil {
				return fmt.Errorf("the API's reply is not what this client expects: %v", err)
			}
			if asJSON {
				return printJSON(out, v)
			}
			switch v := v.(type) {
			case *host.RolloutStatus:
				printRolloutStatus(out, *v)
			case *host.TypeInfo:
				fmt.Fprintf(out, "promoted: %s version %d is current for every entity; the others take it at their next activation (shardhost upgrade --type %s --now: at once)\n",
					v.Name, v.Version, v.Name)
			case *host.RollbackResult:
				stay := printRollback(out, *v)
				if stay > 0 {
					return fmt.Errorf("%d entities of the canary stay on it", stay)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "name of the entity type (required)")
	return outputFlags(cmd, &asJSON)
}

// canaryShare renders a rollout's share of entity IDs.
func canaryShare(r host.Rollout) string {
	if len(r.IDs) > 0 {
		return fmt.Sprintf("%d listed entities", len(r.IDs))
	}
	return strconv.FormatFloat(float64(r.Share)/100, 'f', -1, 64) + "% of the entity IDs"
}

// printRolloutStatus renders a RolloutStatus.
func printRolloutStatus(out io.Writer, st host.RolloutStatus) {
	r := st.Rollout
	if r == nil {
		fmt.Fprintf(out, "%s: no rollout; version %d is current for every entity\n", st.Type, st.Version)
		return
	}
	window := time.Duration(r.WindowMs) * time.Millisecond
	if window == 0 {
		window = time.Minute
	}
	switch r.State {
	case host.RolloutCanary:
		fmt.Fprintf(out, "%s: canary in flight since %s: %s on version %d, the others on version %d\n", st.Type,
			time.Unix(0, r.StartedAt).UTC().Format(time.RFC3339), canaryShare(*r), r.Canary, r.Stable)
		if r.MaxFailureRate > 0 {
			fmt.Fprintf(out, "  rolls back by itself above a failure rate of %v over %v\n", r.MaxFailureRate, window)
		}
	default:
		fmt.Fprintf(out, "%s: canary of version %d rolled back at %s by %s: %s; version %d runs version %d's module\n", st.Type, r.Canary,
			time.Unix(0, r.EndedAt).UTC().Format(time.RFC3339), r.By, r.Reason, st.Version, r.Stable)
	}
	fmt.Fprintf(out, "  messages over the last %v: canary %d ok, %d failed (%.1f%%); stable %d ok, %d failed (%.1f%%)\n", window,
		st.Canary.OK, st.Canary.Failed, 100*st.Canary.Rate, st.Stable.OK, st.Stable.Failed, 100*st.Stable.Rate)
	if r.State == host.RolloutCanary {
		fmt.Fprintf(out, "  %d active entities on the canary", len(st.Entities))
		if len(st.Entities) > 0 {
			fmt.Fprintf(out, ": %s", strings.Join(st.Entities[:min(20, len(st.Entities))], ", "))
			if len(st.Entities) > 20 {
				fmt.Fprint(out, ", ...")
			}
		}
		fmt.Fprintln(out)
	}
	if len(st.Errors) > 0 {
		fmt.Fprintf(out, "partial: %s\n", oneLine(strings.Join(st.Errors, "; ")))
	}
}

// printRollback renders a RollbackResult and returns how many entities stay on the
// canary.
func printRollback(out io.Writer, res host.RollbackResult) int {
	r := res.Type.Rollout
	fmt.Fprintf(out, "rolled back %s: version %d runs version %d's module again; new activations take it\n", res.Type.Name, res.Type.Version, r.Stable)
	m := res.Moved
	fmt.Fprintf(out, "  %d of %d active entities of the canary went back with their state\n", m.Upgraded, m.Upgradable)
	stay := append(append([]host.UpgradeEntity{}, m.Failed...), m.Cannot...)
	for _, e := range stay {
		fmt.Fprintf(out, "  stays on version %d: %s: %s\n", r.Canary, e.ID, oneLine(e.Reason))
	}
	if len(m.Errors) > 0 {
		fmt.Fprintf(out, "partial: %s\n", oneLine(strings.Join(m.Errors, "; ")))
	}
	return len(stay)
}
