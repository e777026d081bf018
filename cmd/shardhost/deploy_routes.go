package main

import (
	"net/url"
	"strconv"

	"github.com/spf13/cobra"
)

// addHTTPRouteFlags adds the settings of HTTP routes to the type's entities to the
// deploy command (docs/http-routes.md) and returns the function that puts those given
// into a deploy query.
func addHTTPRouteFlags(cmd *cobra.Command) func(q url.Values) {
	var routes, public []string
	var maxBody int64
	var rate float64
	f := cmd.Flags()
	// StringArray, not StringSlice: a pattern is never split at a comma.
	f.StringArrayVar(&routes, "http-route", nil, "serve HTTP requests under this path on every member's API address, each to the entity whose ID is the {id} segment, such as /shop/{id}/... (repeat for more; --http-route '' removes the type's routes; they need the client role unless named by --public)")
	f.StringArrayVar(&public, "public", nil, "an --http-route of this deploy to serve without authentication (repeat for more)")
	f.Int64Var(&maxBody, "http-max-body", 0, "largest request body the type's routes take, in bytes (default 262144; at most 1048576); larger is 413")
	f.Float64Var(&rate, "http-rate", 0, "HTTP requests per second each member admits per route of the type (default 100); more is 429")
	return func(q url.Values) {
		if f.Changed("http-route") {
			q["http_route"] = append([]string(nil), routes...)
		}
		if f.Changed("public") {
			q["http_public"] = append([]string(nil), public...)
		}
		if f.Changed("http-max-body") {
			q.Set("http_max_body", strconv.FormatInt(maxBody, 10))
		}
		if f.Changed("http-rate") {
			q.Set("http_rate", strconv.FormatFloat(rate, 'g', -1, 64))
		}
	}
}
