package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newDDataCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ddata",
		Short: "Read and update the cluster's distributed data (CRDTs)",
		Long: `ddata reads and updates replicated data types through any member's API.

Types and operations (--type and --op of update):
  gcounter      incr [N]
  pncounter     incr [N] | decr [N]
  gset          add X
  orset         add X | remove X | clear
  flag          enable
  lwwregister   set V
  lwwmap        put K V | remove K
  pncountermap  incr K [N] | decr K [N] | remove K
  ormultimap    add K V | remove K V | delete K
  ormap         update K TYPE OP... | remove K

--consistency: local (default), majority, majority+K, all, or a number of replicas;
majority may end in /MINCAP (majority/5).

local is the default because it is the CRDT's contract: a read answers at once from the
member behind --api, even when others are unreachable, and replicas converge by gossip.
So a local get right after an update made through another member (or at majority, whose
acknowledgement does not include this member) can show the older value for up to a
gossip round. To read your own majority writes, get with --consistency majority: a
majority read meets every majority write.`,
	}
	cmd.AddCommand(
		g.clientFlags(newDDataKeysCommand(g)),
		g.clientFlags(newDDataGetCommand(g)),
		g.clientFlags(newDDataUpdateCommand(g)),
		g.clientFlags(newDDataDeleteCommand(g)),
	)
	return cmd
}

func newDDataKeysCommand(g *globals) *cobra.Command {
	var asJSON bool
	return outputFlags(&cobra.Command{
		Use:   "keys",
		Short: "List the keys the member behind --api holds, with their types",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			var out struct {
				Keys []host.DDataEntry `json:"keys"`
			}
			if err := c.getJSON("/v1/ddata/keys", &out); err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			for _, k := range out.Keys {
				t := k.Type
				if k.Deleted {
					t = "(deleted)"
				}
				fmt.Fprintf(tw, "%s\t%s\n", k.Key, t)
			}
			return tw.Flush()
		},
	}, &asJSON)
}

// printValue prints an entry's value as JSON.
func printValue(cmd *cobra.Command, body []byte) error {
	var e struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return fmt.Errorf("the API's reply is not what this client expects: %v", err)
	}
	if len(e.Value) == 0 {
		e.Value = json.RawMessage("null")
	}
	var v any
	json.Unmarshal(e.Value, &v)
	b, _ := json.MarshalIndent(v, "", "  ")
	if n, ok := v.(float64); ok && n == float64(int64(n)) {
		b = e.Value // keep big counters exact
	}
	fmt.Fprintln(cmd.OutOrStdout(), string(b))
	return nil
}

func newDDataGetCommand(g *globals) *cobra.Command {
	var consistency string
	cmd := &cobra.Command{
		Use:   "get KEY [--consistency C]",
		Short: "Print a key's value as JSON (local by default: may lag a write made elsewhere; --consistency majority meets majority writes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			r, err := c.do("GET", "/v1/ddata/keys/"+url.PathEscape(args[0])+"?consistency="+url.QueryEscape(consistency), nil)
			if err != nil {
				return err
			}
			return printValue(cmd, r.body)
		},
	}
	cmd.Flags().StringVar(&consistency, "consistency", "local", "read consistency: local (this member's replica, may lag writes made elsewhere by a gossip round), majority (sees every majority write), majority+K, all or N")
	return cmd
}

func newDDataUpdateCommand(g *globals) *cobra.Command {
	var typ, op, consistency string
	cmd := &cobra.Command{
		Use:   "update KEY --type T --op OP [--consistency C]",
		Short: "Apply an operation to a key (created with its type's empty value) and print the new value",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if typ == "" || op == "" {
				return fmt.Errorf("--type and --op are required (see shardhost ddata --help)")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			path := "/v1/ddata/keys/" + url.PathEscape(args[0]) + "?type=" + url.QueryEscape(typ) + "&consistency=" + url.QueryEscape(consistency)
			r, err := c.do("POST", path, []byte(op))
			if err != nil {
				return err
			}
			if consistency != "local" && consistency != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "(to read it back as written, get with --consistency %s: a local get on a member this write did not reach may lag by a gossip round)\n", consistency)
			}
			return printValue(cmd, r.body)
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "data type: gcounter, pncounter, gset, orset, flag, lwwregister, lwwmap, pncountermap, ormultimap, ormap")
	cmd.Flags().StringVar(&op, "op", "", `operation, e.g. "incr 5", "add X", "put K V", "set V", "enable"`)
	cmd.Flags().StringVar(&consistency, "consistency", "local", "write consistency: local, majority, majority+K, all or N")
	return cmd
}

func newDDataDeleteCommand(g *globals) *cobra.Command {
	var consistency string
	cmd := &cobra.Command{
		Use:   "delete KEY [--consistency C]",
		Short: "Delete a key for good (it cannot be used again)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			_, err = c.do("DELETE", "/v1/ddata/keys/"+url.PathEscape(args[0])+"?consistency="+url.QueryEscape(consistency), nil)
			return err
		},
	}
	cmd.Flags().StringVar(&consistency, "consistency", "local", "write consistency")
	return cmd
}
