package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newDeployCommand(g *globals) *cobra.Command {
	var typ, role, allocation, checkpoint string
	var shards, maxActive int
	var passivateAfter time.Duration
	var remember bool
	cmd := &cobra.Command{
		Use:   "deploy --type NAME [--shards N] [--passivate-after D] [--max-active N] [--checkpoint P] [--remember-entities] [--role R] [--allocation A] FILE.wasm",
		Short: "Deploy an entity module as an entity type, on every member",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if typ == "" {
				return fmt.Errorf("--type is required: the name of the entity type")
			}
			wasm, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			q := url.Values{}
			if shards > 0 {
				q.Set("shards", strconv.Itoa(shards))
			}
			if role != "" {
				q.Set("role", role)
			}
			if allocation != "" {
				q.Set("allocation", allocation)
			}
			if checkpoint != "" {
				q.Set("checkpoint", checkpoint)
			}
			if passivateAfter > 0 {
				q.Set("passivate_after", passivateAfter.String())
			}
			if maxActive > 0 {
				q.Set("max_active", strconv.Itoa(maxActive))
			}
			if remember {
				q.Set("remember_entities", "true")
			}
			path := "/v1/types/" + url.PathEscape(typ) + "?" + q.Encode()
			r, err := c.do("POST", path, wasm)
			if err != nil {
				return err
			}
			var res host.DeployResult
			if err := json.Unmarshal(r.body, &res); err != nil {
				return fmt.Errorf("the API's reply is not what this client expects: %v", err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "deployed %s version %d (%d bytes, sha256 %s, %d shards, %s allocation, checkpoint %s)\n",
				res.Type.Name, res.Type.Version, res.Type.Size, res.Type.Digest[:16], res.Type.NumberOfShards,
				res.Type.Allocation, res.Type.Checkpoint)
			failed := 0
			for _, m := range res.Members {
				if m.Ready {
					fmt.Fprintf(out, "  %s ready\n", m.Node)
				} else {
					failed++
					fmt.Fprintf(out, "  %s NOT READY: %s\n", m.Node, oneLine(m.Error))
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d members are not ready; they retry when they learn of the type by gossip", failed, len(res.Members))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&typ, "type", "", "name of the entity type (required)")
	cmd.Flags().IntVar(&shards, "shards", 0, "number of shards of a new type (default 100; fixed once deployed)")
	cmd.Flags().DurationVar(&passivateAfter, "passivate-after", 0, "passivate an entity idle this long (0: never)")
	cmd.Flags().IntVar(&maxActive, "max-active", 0, "active entities per member at most; the least recently used is passivated (0: no cap)")
	cmd.Flags().StringVar(&checkpoint, "checkpoint", "", "when entity state is saved: passivation (default), every-message or every:N")
	cmd.Flags().BoolVar(&remember, "remember-entities", false, "restart a shard's entities wherever the shard goes")
	cmd.Flags().StringVar(&role, "role", "", "only members with this role host the type (others route its messages)")
	cmd.Flags().StringVar(&allocation, "allocation", "", "shard allocation: least-shard (default) or priority")
	return cmd
}
