package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newScheduledCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scheduled",
		Short: "List or cancel the messages scheduled with tell --at or --in",
		Long: `scheduled lists the messages that wait for their due time (tell --at, tell --in,
POST /v1/tell with deliver_at), read from the state store without activating any
entity, and cancels one by its ID.`,
	}
	cmd.AddCommand(g.clientFlags(newScheduledListCommand(g)), g.clientFlags(newScheduledCancelCommand(g)))
	return cmd
}

func newScheduledListCommand(g *globals) *cobra.Command {
	var asJSON bool
	var typ string
	var limit int
	cmd := &cobra.Command{
		Use:   "list [--type T] [TYPE/ID]",
		Short: "List scheduled messages: of one entity, of a type, or all",
		Long: `list prints the scheduled messages waiting, earliest first: each one's ID, entity,
due time (UTC) and payload size. With TYPE/ID, those of that entity; with --type,
those of the type's entities (every shard of the type is read); with neither, those of
every type. At most --limit rows.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{}
			if len(args) == 1 {
				t, id, err := parseTarget(args[0])
				if err != nil {
					return err
				}
				if typ != "" && typ != t {
					return fmt.Errorf("--type %s and %s name two types", typ, args[0])
				}
				q.Set("type", t)
				q.Set("id", id)
			} else if typ != "" {
				q.Set("type", typ)
			}
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			path := "/v1/scheduled"
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			r, err := c.do("GET", path, nil)
			if err != nil {
				return err
			}
			var res host.ScheduledList
			if err := json.Unmarshal(r.body, &res); err != nil {
				return fmt.Errorf("the API's reply: %w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, res)
			}
			if len(res.Scheduled) == 0 {
				fmt.Fprintln(out, "no scheduled messages")
				return nil
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tENTITY\tDELIVER AT\tPAYLOAD")
			for _, m := range res.Scheduled {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d bytes\n", m.ID, m.Entity, m.DeliverAt, m.PayloadBytes)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if res.More {
				fmt.Fprintf(out, "(more than %d: raise --limit, or name a type or an entity)\n", len(res.Scheduled))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "only the scheduled messages of this entity type")
	cmd.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("at most this many rows (default %d, at most %d)", host.DefaultScheduledListLimit, host.MaxScheduledListLimit))
	return outputFlags(cmd, &asJSON)
}

func newScheduledCancelCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a scheduled message before it is delivered",
		Long: `cancel deletes the scheduled message ID (as tell --at or --in printed it) from the
state store, so that it is never delivered. An ID that waits for nothing (delivered,
cancelled, or never scheduled) is an error. A delivery already under way at that
moment may still arrive.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			r, err := c.do("DELETE", "/v1/scheduled/"+url.PathEscape(args[0]), nil)
			if err != nil {
				return err
			}
			var res host.ScheduledCancelResult
			if err := json.Unmarshal(r.body, &res); err != nil {
				return fmt.Errorf("the API's reply: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cancelled %s (%s, due %s)\n", res.Scheduled.ID, res.Scheduled.Entity, res.Scheduled.DeliverAt)
			return nil
		},
	}
}
