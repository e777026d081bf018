package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
)

func newDeployCommand(g *globals) *cobra.Command {
	var typ string
	var shards int
	cmd := &cobra.Command{
		Use:   "deploy --type NAME FILE.wasm",
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
			path := "/v1/types/" + url.PathEscape(typ)
			if shards > 0 {
				path += fmt.Sprintf("?shards=%d", shards)
			}
			r, err := c.do("POST", path, wasm)
			if err != nil {
				return err
			}
			var res host.DeployResult
			if err := json.Unmarshal(r.body, &res); err != nil {
				return fmt.Errorf("the API's reply is not what this client expects: %v", err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "deployed %s version %d (%d bytes, sha256 %s, %d shards)\n",
				res.Type.Name, res.Type.Version, res.Type.Size, res.Type.Digest[:16], res.Type.NumberOfShards)
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
	return cmd
}
