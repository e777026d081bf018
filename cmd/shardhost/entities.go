package main

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/sharding"
)

func newEntitiesCommand(g *globals) *cobra.Command {
	var asJSON bool
	var f struct {
		prefix, status, member, cursor string
		version                        uint64
		idleLonger, failedSince        time.Duration
		stateLarger                    int64
		limit                          int
	}
	cmd := &cobra.Command{
		Use:   "entities [TYPE] [--prefix P] [--status active|passivated|paused] [--version V] [--member ADDR] [--idle-longer D] [--state-larger BYTES] [--failed-since D] [--limit N] [--cursor C] [-o json]",
		Short: "List the entities of a type (or of every type) without activating any",
		Long: `entities lists entities from every member's live table and the state store's index,
without activating any and without loading any state: type, ID, status (active,
passivated, paused), the member that hosts it, its module version, when its last message
ended, the messages it handled, and the size of its state and of its memory.

Rows come in order of type, shard and ID, --limit per page (100 by default, at most
10,000). A page looks at --limit rows per source: with filters it may show fewer, and
a page that stops before the end prints the --cursor of the next one (for the same
filters only). The counters are what the hosting member saw since it activated the
entity; a passivated entity shows what its store knows (state size, when saved).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{}
			if len(args) == 1 {
				q.Set("type", args[0])
			}
			set := func(name, v string) {
				if v != "" {
					q.Set(name, v)
				}
			}
			set("prefix", f.prefix)
			set("status", f.status)
			set("member", f.member)
			set("cursor", f.cursor)
			if f.version > 0 {
				q.Set("version", strconv.FormatUint(f.version, 10))
			}
			if f.idleLonger < 0 || f.failedSince < 0 || f.stateLarger < 0 || f.limit < 0 {
				return fmt.Errorf("--idle-longer, --failed-since, --state-larger and --limit must not be negative")
			}
			if f.idleLonger > 0 {
				q.Set("idle_longer", f.idleLonger.String())
			}
			if f.failedSince > 0 {
				q.Set("failed_since", f.failedSince.String())
			}
			if f.stateLarger > 0 {
				q.Set("state_larger", strconv.FormatInt(f.stateLarger, 10))
			}
			if f.limit > 0 {
				q.Set("limit", strconv.Itoa(f.limit))
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var page sharding.EntityPage
			if err := c.getJSON("/v1/entities?"+q.Encode(), &page); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, page)
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tID\tSTATUS\tMEMBER\tVERSION\tLAST MESSAGE\tHANDLED\tSTATE\tMEMORY")
			for _, r := range page.Rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Type, r.ID, r.Status, dash(r.Member), versionText(r.ModuleVersion),
					timeText(r.LastMessage), r.MessagesHandled, bytesText(r.StateBytes), bytesText(r.MemoryBytes))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, e := range page.Errors {
				fmt.Fprintf(out, "missing: %s\n", e)
			}
			if page.Next != "" {
				fmt.Fprintf(out, "more: add --cursor %s\n", page.Next)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.prefix, "prefix", "", "IDs that begin with this")
	fl.StringVar(&f.status, "status", "", "active, passivated or paused")
	fl.Uint64Var(&f.version, "version", 0, "active entities running this module version")
	fl.StringVar(&f.member, "member", "", "entities hosted by this member (host:port)")
	fl.DurationVar(&f.idleLonger, "idle-longer", 0, "entities whose last message ended longer ago than this (90s, 2h)")
	fl.Int64Var(&f.stateLarger, "state-larger", 0, "entities whose saved state is larger than this many bytes")
	fl.DurationVar(&f.failedSince, "failed-since", 0, "entities a message failed in within this long")
	fl.IntVar(&f.limit, "limit", 0, "rows per page (default 100, at most 10,000)")
	fl.StringVar(&f.cursor, "cursor", "", "the next page's cursor that the last page printed")
	return outputFlags(cmd, &asJSON)
}

func newEntityCommand(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "entity TYPE/ID [-o json]",
		Short: "Describe one entity without activating it",
		Long: `entity tells where an entity is hosted and what it holds, without activating it: its
status and module version, when it was activated, the messages it handled and that
failed, its timers and subscriptions, the size of its state and memory, its journal's
length and its last error. An ID that no member hosts and the store does not hold is
"never seen".`,
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
			var d sharding.EntityDescription
			if err := c.getJSON("/v1/entities/"+url.PathEscape(typ)+"/"+url.PathEscape(id), &d); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, d)
			}
			if !d.Seen {
				fmt.Fprintf(out, "%s/%s: never seen (no member hosts it and the state store holds nothing of it)\n", typ, id)
				return nil
			}
			describe(out, d)
			return nil
		},
	}
	return outputFlags(cmd, &asJSON)
}

func describe(out io.Writer, d sharding.EntityDescription) {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	line("entity", d.Type+"/"+d.ID)
	line("shard", strconv.Itoa(d.Shard))
	line("status", d.Status)
	line("member", dash(d.Member))
	line("module version", versionText(d.ModuleVersion))
	line("activated", timeText(d.ActivatedAt))
	line("last message", timeText(d.LastMessage))
	line("messages", fmt.Sprintf("%d handled, %d failed", d.MessagesHandled, d.MessagesFailed))
	line("queued", strconv.Itoa(d.Queued))
	line("timers", strconv.Itoa(d.Timers))
	line("subscriptions", strconv.Itoa(d.Subscriptions))
	line("state", bytesText(d.StateBytes)+map[bool]string{true: " (in the state store)", false: ""}[d.Stored])
	line("memory", bytesText(d.MemoryBytes))
	line("journal", fmt.Sprintf("%d records", d.JournalRecords))
	if d.LastError != "" {
		line("last error", timeText(d.LastFailure)+": "+d.LastError)
	} else {
		line("last error", "-")
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func versionText(v uint64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatUint(v, 10)
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func bytesText(n int64) string {
	switch {
	case n == 0:
		return "-"
	case n < 1<<10:
		return strconv.FormatInt(n, 10) + " B"
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
