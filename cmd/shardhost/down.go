package main

import (
	"net/url"

	"github.com/spf13/cobra"
)

func newDownCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "down ADDRESS",
		Short: "Mark a member down (it is removed; use only for a member you know is gone)",
		Long: `down marks the member at ADDRESS (its gossip address, as members shows it) down: the
cluster stops counting on it and the leader removes it, and its shards are allocated
elsewhere. If the member is in fact running, it stops hosting and exits when it learns
it was downed. Normally the split brain resolver does this; down is the operator's way.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			_, err = c.do("POST", "/v1/members/"+url.PathEscape(args[0])+"/down", nil)
			return err
		},
	}
}

func newLeaveCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "leave [ADDRESS]",
		Short: "Make a member leave the cluster gracefully (default: the member behind --api)",
		Long: `leave makes the member at ADDRESS (default: the member whose API --api names) leave
gracefully: it hands its shards off, the leader moves it to exiting and removes it, and
its process stops.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			path := "/v1/leave"
			if len(args) == 1 {
				path = "/v1/members/" + url.PathEscape(args[0]) + "/leave"
			}
			_, err = c.do("POST", path, nil)
			return err
		},
	}
}
