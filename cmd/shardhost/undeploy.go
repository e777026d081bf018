package main

import (
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newUndeployCommand(g *globals) *cobra.Command {
	var typ string
	var deleteState bool
	cmd := &cobra.Command{
		Use:   "undeploy --type NAME [--delete-state]",
		Short: "Remove an entity type from the cluster: its entities are passivated (state saved) and its messages refused",
		Long: `undeploy removes an entity type from every member. Each member passivates the type's
active entities, their state saved as at a graceful shutdown, and stops routing its
messages: they fail as for an unknown type. The saved state stays in the state store, so
a later deploy of the same name takes it up, unless --delete-state is given: then, once
every member has stopped the type, its snapshots and remembered entities are deleted
from the store (the built-in store on every member, or the PostgreSQL database). A
member that is away deletes its copy when it learns of the deletion. Undeploying a
removed type with --delete-state retries a deletion that failed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if typ == "" {
				return fmt.Errorf("--type is required: the entity type to remove")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			path := "/v1/types/" + url.PathEscape(typ)
			if deleteState {
				path += "?delete_state=true"
			}
			r, err := c.do("DELETE", path, nil)
			if err != nil {
				return err
			}
			var res host.UndeployResult
			if err := json.Unmarshal(r.body, &res); err != nil {
				return fmt.Errorf("the API's reply is not what this client expects: %v", err)
			}
			out := cmd.OutOrStdout()
			if res.StateDeleted {
				fmt.Fprintf(out, "undeployed %s (its entities passivated, their state deleted)\n", typ)
			} else {
				fmt.Fprintf(out, "undeployed %s (its entities passivated, their state kept)\n", typ)
			}
			if failed := printMembers(out, res.Members, "stopped it", "NOT YET"); failed > 0 {
				return fmt.Errorf("%d of %d members have not stopped the type yet; they will when they learn of it by gossip", failed, len(res.Members))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "name of the entity type (required)")
	cmd.Flags().BoolVar(&deleteState, "delete-state", false, "also delete the type's saved state from the state store")
	return cmd
}

func newPassivateCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "passivate TYPE/ID",
		Short: "Passivate an entity: its state is saved and its instance released; its next message activates it again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			typ, id, err := parseTarget(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			r, err := c.do("POST", "/v1/passivate?"+entityQuery(typ, id), nil)
			if err != nil {
				return err
			}
			var res struct {
				Status string `json:"status"`
			}
			if err := json.Unmarshal(r.body, &res); err != nil {
				return fmt.Errorf("the API's reply is not what this client expects: %v", err)
			}
			if res.Status == "passivated" {
				fmt.Fprintf(cmd.OutOrStdout(), "%s passivated\n", args[0])
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s was not active\n", args[0])
			}
			return nil
		},
	}
}
