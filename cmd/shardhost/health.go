package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// newHealthCommand is shardhost health: the liveness or readiness probe of the member
// behind --api, for a container's healthcheck where there is no curl (the image is FROM
// scratch). It exits 0 when the probe answers 200, 1 otherwise.
func newHealthCommand(g *globals) *cobra.Command {
	var ready bool
	var state string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health [--ready [--state admitted|settled]]",
		Short: "Probe the member behind --api: /alive, or /ready with --ready; exit 1 unless it answers 200",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case state != "" && !ready:
				return fmt.Errorf("--state %q is a condition of readiness: give --ready too", state)
			case state != "" && state != "admitted" && state != "settled":
				return fmt.Errorf("--state %q: want admitted or settled", state)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			c.http.Timeout = timeout
			path := "/alive"
			if ready {
				path = "/ready"
			}
			if state != "" {
				path += "?state=" + state
			}
			r, err := c.do("GET", path, nil)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			var body map[string]any
			if json.Unmarshal(r.body, &body) == nil {
				if s, ok := body["status"].(string); ok {
					fmt.Fprintln(cmd.OutOrStdout(), s)
					return nil
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", r.body)
			return nil
		},
	}
	cmd.Flags().BoolVar(&ready, "ready", false, "probe readiness (/ready: up, converged, every type running, not leaving) instead of liveness (/alive)")
	cmd.Flags().StringVar(&state, "state", "", "with --ready, a condition on the built-in state store's ring too (/ready?state=): admitted (its ring admits this member with its data directory) or settled (it admits exactly the members up, none retained, joining or replaced; docs/observability.md)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up after this long")
	return cmd
}
