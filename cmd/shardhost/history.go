package main

import (
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newHistoryCommand(g *globals) *cobra.Command {
	var asJSON bool
	var since uint64
	var limit int
	cmd := &cobra.Command{
		Use:   "history TYPE/ID [--since SEQ] [--limit N] [-o json]",
		Short: "Show an entity's journal: one line per message it handled",
		Long: `history reads an entity's journal from the state store, on any member, without
activating the entity: one line per message it handled (docs/sharding.md, "What a failure
loses"), with its sequence number, time, kind, sender, payload size and a printable
preview, its outcome and its trace ID. A type keeps the last --history records (1,000 by
default) behind its entity's last base, and everything after it.

--since starts at a sequence number; --limit caps the lines (100 by default, at most
10,000); a page that stops before the end says where the next one starts.`,
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
			q := url.Values{}
			if since > 0 {
				q.Set("since", strconv.FormatUint(since, 10))
			}
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			var page host.HistoryPage
			path := entityPath(typ, id, "history")
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			if err := c.getJSON(path, &page); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, page)
			}
			if len(page.Records) == 0 {
				fmt.Fprintf(out, "%s: no journal records from %d\n", page.Entity, max(since, 1))
				return nil
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tSENDER\tBYTES\tPAYLOAD\tOUTCOME\tTRACE")
			for _, r := range page.Records {
				kind := r.Kind
				if r.Ask {
					kind += " (ask)"
				}
				sender := r.Sender
				if sender == "" {
					sender = "-"
				}
				trace := r.TraceID
				if trace == "" {
					trace = "-"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%q\t%s\t%s\n", r.Seq, r.Time.Format(time.RFC3339Nano), kind, sender,
					r.PayloadBytes, r.Preview, r.Outcome, trace)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if page.Next > 0 {
				fmt.Fprintf(out, "more: shardhost history %s --since %d\n", args[0], page.Next)
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&since, "since", 0, "first sequence number to show (default: the first kept)")
	cmd.Flags().IntVar(&limit, "limit", 0, "lines at most (default 100, at most 10,000)")
	return outputFlags(cmd, &asJSON)
}
