package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newRemindersCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "reminders TYPE/ID",
		Short: "List an entity's durable reminders",
		Long: `reminders lists the durable reminders of an entity, read from the state store
without activating it: each one's name, next due time (UTC), interval (none for a
one-shot) and payload size. An entity sets them with reminder_set (abi/SPEC.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			typ, id, err := entityArg(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			r, err := c.do("GET", entityPath(typ, id, "reminders"), nil)
			if err != nil {
				return err
			}
			var res host.EntityReminders
			if err := json.Unmarshal(r.body, &res); err != nil {
				return fmt.Errorf("the API's reply: %w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			if len(res.Reminders) == 0 {
				fmt.Fprintf(out, "%s has no reminders\n", res.Entity)
				return nil
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tDUE\tINTERVAL\tPAYLOAD")
			for _, rm := range res.Reminders {
				interval := "-"
				if rm.Interval > 0 {
					interval = (time.Duration(rm.Interval) * time.Millisecond).String()
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s bytes\n", rm.Name, time.UnixMilli(rm.Due).UTC().Format(time.RFC3339Nano), interval,
					strconv.Itoa(len(rm.Payload)))
			}
			return tw.Flush()
		},
	}
	return outputFlags(cmd, &asJSON)
}
