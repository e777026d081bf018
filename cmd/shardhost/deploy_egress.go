package main

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// addEgressFlags adds the outbound HTTP settings to the deploy command (docs/security.md,
// "Outbound HTTP") and returns the function that puts those given into a deploy query.
func addEgressFlags(cmd *cobra.Command) func(q url.Values) {
	var allow []string
	var timeout time.Duration
	var maxResponse int64
	var rate float64
	f := cmd.Flags()
	f.StringSliceVar(&allow, "egress", nil, "scheme://host[:port] patterns the type's entities may reach over HTTP, comma-separated or repeated (*.example.com for the names under a domain; a private or loopback address must be named by its IP or localhost; default none; --egress '' clears)")
	f.DurationVar(&timeout, "egress-timeout", 0, "time one outbound HTTP request may take, within the message deadline (default 10s)")
	f.Int64Var(&maxResponse, "egress-max-response", 0, "largest outbound HTTP response body, in bytes (default 1048576; at most 16 MiB)")
	f.Float64Var(&rate, "egress-rate", 0, "outbound HTTP requests per second one entity may make (default 10)")
	return func(q url.Values) {
		if f.Changed("egress") {
			q.Set("egress", strings.Join(allow, ","))
		}
		if f.Changed("egress-timeout") {
			q.Set("egress_timeout", timeout.String())
		}
		if f.Changed("egress-max-response") {
			q.Set("egress_max_response", strconv.FormatInt(maxResponse, 10))
		}
		if f.Changed("egress-rate") {
			q.Set("egress_rate", strconv.FormatFloat(rate, 'g', -1, 64))
		}
	}
}
