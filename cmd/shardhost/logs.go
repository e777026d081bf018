package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	shclient "github.com/shardhost/shardhost/client"
	"github.com/shardhost/shardhost/host"
)

func newLogsCommand(g *globals) *cobra.Command {
	var asJSON, follow bool
	var typ, level string
	var limit int
	cmd := &cobra.Command{
		Use:   "logs (TYPE/ID | --type T) [--level L] [--limit N] [-f] [-o json]",
		Short: "Show an entity's log lines (or a type's), and follow them live",
		Long: `logs shows what an entity wrote to stdout (info) and stderr (warn) and passed to the
log host function (its level), from the ring each member keeps per entity: the last 1,000
lines, or the type's --log-lines (docs/observability.md, "Entity logs"). Lines come from
every member, so the entity's lines from before a handoff are there too while the member
that ran it keeps them.

--type T shows the lines of every entity of T instead of one. --level shows that level
and above (debug, info, warn, error). --limit shows the newest N lines only.

-f follows: after the lines kept, every new line as it is logged, from whichever member
runs the entity (across passivations, activations and handoffs) or, with --type, from
every member, until interrupted. A member that does not answer is reported on stderr and
retried.

Each line shows its time, level, entity, the message's journal sequence number (seq=,
under a journal) and its trace ID (trace=, when traced); -o json prints each line as one
JSON object (docs/cli.md).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := host.ParseLogLevel(level); err != nil {
				return fmt.Errorf("--level %q is not debug, info, warn or error", level)
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d is negative", limit)
			}
			q := url.Values{}
			var path string
			switch {
			case len(args) == 1 && typ != "":
				return errors.New("give TYPE/ID or --type T, not both")
			case len(args) == 1:
				t, id, err := entityArg(args[0])
				if err != nil {
					return err
				}
				path = entityPath(t, id, "logs")
			case typ != "":
				path = "/v1/logs"
				q.Set("type", typ)
			default:
				return errors.New("give TYPE/ID, or --type T for every entity of a type")
			}
			if level != "" {
				q.Set("level", level)
			}
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			print := func(l host.EntityLogLine) error {
				if asJSON {
					b, err := json.Marshal(l)
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(out, "%s\n", b)
					return err
				}
				_, err := fmt.Fprintln(out, formatLogLine(l))
				return err
			}
			if !follow {
				var page struct {
					Lines  []host.EntityLogLine `json:"lines"`
					Errors []string             `json:"errors"`
				}
				if err := c.getJSON(path+"?"+q.Encode(), &page); err != nil {
					return err
				}
				for _, e := range page.Errors {
					fmt.Fprintln(cmd.ErrOrStderr(), "not answered:", e)
				}
				for _, l := range page.Lines {
					if err := print(l); err != nil {
						return err
					}
				}
				return nil
			}
			q.Set("follow", "1")
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			return c.events(ctx, path+"?"+q.Encode(), func(event, data string) error {
				if event == "error" {
					var e struct {
						Error string `json:"error"`
					}
					json.Unmarshal([]byte(data), &e)
					fmt.Fprintln(cmd.ErrOrStderr(), "not answered:", e.Error)
					return nil
				}
				var l host.EntityLogLine
				if err := json.Unmarshal([]byte(data), &l); err != nil {
					return fmt.Errorf("the API's line is not what this client expects: %v", err)
				}
				return print(l)
			})
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "show every entity of this type")
	cmd.Flags().StringVar(&level, "level", "", "lowest level shown: debug, info, warn or error (default all)")
	cmd.Flags().IntVar(&limit, "limit", 0, "the newest N lines only (default all kept)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow: print new lines as they come, until interrupted")
	return outputFlags(cmd, &asJSON)
}

// formatLogLine writes a line as "TIME LEVEL TYPE/ID [seq=N] [trace=T] STREAM: TEXT".
func formatLogLine(l host.EntityLogLine) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-5s %s/%s", l.Time.Format(time.RFC3339Nano), strings.ToUpper(l.Level), l.Type, l.ID)
	if l.Seq != 0 {
		fmt.Fprintf(&b, " seq=%d", l.Seq)
	}
	if l.TraceID != "" {
		fmt.Fprintf(&b, " trace=%s", l.TraceID)
	}
	fmt.Fprintf(&b, " %s: %s", l.Stream, l.Text)
	return b.String()
}

// events reads the server-sent events of a GET of path, calling f with each event's
// name ("" for a plain one) and data, until the stream ends, ctx is done (nil is
// returned) or f fails: the library's Events, with the CLI's explanations of failures.
func (c *client) events(ctx context.Context, path string, f func(event, data string) error) error {
	lc, err := c.lib()
	if err != nil {
		return err
	}
	if err = lc.Events(ctx, path, f); errors.Is(err, shclient.ErrStreamEnded) {
		return errors.New("the follow stopped: the member closed the stream")
	}
	return c.libError(err)
}
