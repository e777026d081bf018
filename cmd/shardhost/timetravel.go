package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

// entityArg splits a TYPE/ID argument.
func entityArg(arg string) (typ, id string, err error) {
	typ, id, ok := strings.Cut(arg, "/")
	if !ok || typ == "" || id == "" {
		return "", "", fmt.Errorf("want TYPE/ID, got %q", arg)
	}
	return typ, id, nil
}

func entityPath(typ, id, action string) string {
	return "/v1/entities/" + url.PathEscape(typ) + "/" + url.PathEscape(id) + "/" + action
}

func newRevertCommand(g *globals) *cobra.Command {
	var to, messages uint64
	cmd := &cobra.Command{
		Use:   "revert TYPE/ID (--to SEQ | --messages N)",
		Short: "Make an entity's state what it was after one of its journal records",
		Long: `revert sets an entity's state to what it was after its journal record SEQ (--to; see
'shardhost history'), or before its last N records (--messages), after the messages it
already received. The entity replays its journal from its last base up to that record;
the new state is saved as a base, and the revert is itself a record of the journal. The
entity goes on from there.

What the reverted messages did outside the entity is not undone: the tells and asks
they sent, the distributed data they updated, the replies their senders got.

A revert reaches back to the entity's last base (saved every 1,000 records, or when its
journal would take long to replay), no further; 'shardhost history' lists the records.
The type must journal its messages (--checkpoint journal, the default).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			typ, id, err := entityArg(args[0])
			if err != nil {
				return err
			}
			f := cmd.Flags()
			if f.Changed("to") == f.Changed("messages") {
				return fmt.Errorf("give --to SEQ or --messages N, one of them")
			}
			q := url.Values{}
			if f.Changed("to") {
				q.Set("to", strconv.FormatUint(to, 10))
			} else {
				q.Set("messages", strconv.FormatUint(messages, 10))
			}
			return timeTravel(cmd, g, entityPath(typ, id, "revert")+"?"+q.Encode(), "reverted")
		},
	}
	cmd.Flags().Uint64Var(&to, "to", 0, "the journal record whose state the entity takes")
	cmd.Flags().Uint64Var(&messages, "messages", 0, "how many of the entity's last journal records to undo")
	return cmd
}

func newForkCommand(g *globals) *cobra.Command {
	var at uint64
	cmd := &cobra.Command{
		Use:   "fork TYPE/ID NEWID [--at SEQ]",
		Short: "Start a new entity from another's state after one of its journal records",
		Long: `fork starts entity TYPE/NEWID from entity TYPE/ID's state after its journal record SEQ
(--at; its last by default): NEWID's first base holds that state, and its journal begins
with a record of the fork. NEWID must not exist (no state, journal or instance). The
source is not changed. Like a revert, a fork reaches back to the source's last base.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			typ, id, err := entityArg(args[0])
			if err != nil {
				return err
			}
			q := url.Values{"new": {args[1]}}
			if at > 0 {
				q.Set("at", strconv.FormatUint(at, 10))
			}
			return timeTravel(cmd, g, entityPath(typ, id, "fork")+"?"+q.Encode(), "forked")
		},
	}
	cmd.Flags().Uint64Var(&at, "at", 0, "the source's journal record whose state the new entity takes (default: its last)")
	return cmd
}

// timeTravel posts a revert or a fork and prints what it did.
func timeTravel(cmd *cobra.Command, g *globals, path, did string) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	r, err := c.do("POST", path, nil)
	if err != nil {
		return err
	}
	var res host.TimeTravelResult
	if err := json.Unmarshal(r.body, &res); err != nil {
		return fmt.Errorf("the API's reply: %w", err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s: record %d\n", did, res.Entity, res.Record)
	return nil
}

func newPauseCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "pause TYPE/ID",
		Short: "Pause an entity until 'shardhost resume'",
		Long: `pause holds an entity, activating it if it is not active: once the messages ahead of
the request are handled, asks to it are refused with entity-paused (503: send them again
once it resumes) and tells queue, up to its mailbox's size (beyond it they are refused
the same way, dead letters). 'shardhost resume TYPE/ID' ends the pause and what queued
is handled in order. Under the journal the pause is a record of the entity's journal
and lasts across passivations, handoffs and crashes; under the other policies it ends
when the entity's instance stops. Admin role.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := postEntityAction(g, args[0], "pause")
			if err != nil {
				return err
			}
			if res.Status == "already-paused" {
				fmt.Fprintf(cmd.OutOrStdout(), "%s is already paused: nothing done\n", res.Entity)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "paused %s (shardhost resume %s ends it)\n", res.Entity, res.Entity)
			return nil
		},
	}
}

func newResumeCommand(g *globals, skip bool) *cobra.Command {
	use, short, long := "resume TYPE/ID", "Resume a paused entity (on a message that kept failing, or by 'shardhost pause')",
		`resume makes an entity that is paused try its failing message again: a tell, a timer's or
a change's message that failed the same way (a trap, the deadline) --max-retries times in
a row (3 by default), on which the entity paused instead of dropping it. Deploy a fixed
module first. The message gets its attempts again; if it fails as many times, the entity
pauses again. What queued behind it follows. While an entity is paused, asks to it are
refused with entity-paused (503: send them again once it resumes) and tells queue, up to
its mailbox's size. 'shardhost skip' drops the message instead. An entity paused by
'shardhost pause' has no such message: resume goes on with what queued.`
	if skip {
		use, short, long = "skip TYPE/ID", "Drop the message a paused entity is paused on, and resume it",
			`skip drops the message a paused entity is paused on (a dead letter, with reason
skipped) and resumes the entity with what queued behind it. 'shardhost resume' tries the
message again instead.`
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			action := "resume"
			if skip {
				action = "skip"
			}
			res, err := postEntityAction(g, args[0], action)
			if err != nil {
				return err
			}
			if res.Status == "not-paused" {
				fmt.Fprintf(cmd.OutOrStdout(), "%s is not paused: nothing done\n", res.Entity)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", res.Status, res.Entity)
			return nil
		},
	}
}

// entityAction is the API's answer to an entity's pause, resume or skip.
type entityAction struct{ Entity, Status string }

// postEntityAction posts action (pause, resume or skip) for arg (TYPE/ID) and returns
// the API's answer.
func postEntityAction(g *globals, arg, action string) (entityAction, error) {
	var res entityAction
	typ, id, err := entityArg(arg)
	if err != nil {
		return res, err
	}
	c, err := g.client()
	if err != nil {
		return res, err
	}
	r, err := c.do("POST", entityPath(typ, id, action), nil)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(r.body, &res); err != nil {
		return res, fmt.Errorf("the API's reply: %w", err)
	}
	return res, nil
}
