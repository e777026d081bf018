package main

import (
	"net/url"
	"testing"

	"github.com/spf13/cobra"
)

// The HTTP route flags go into the deploy query only when given; a pattern is never
// split at a comma.
func TestDeployHTTPRouteFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want url.Values
	}{
		{nil, url.Values{}},
		{[]string{"--http-route", "/shop/{id}/...", "--http-route", "/hooks/{id}", "--public", "/hooks/{id}"},
			url.Values{"http_route": {"/shop/{id}/...", "/hooks/{id}"}, "http_public": {"/hooks/{id}"}}},
		{[]string{"--http-route", "/a,b/{id}"}, url.Values{"http_route": {"/a,b/{id}"}}},
		{[]string{"--http-route", ""}, url.Values{"http_route": {""}}},
		{[]string{"--http-max-body", "4096", "--http-rate", "2.5"}, url.Values{"http_max_body": {"4096"}, "http_rate": {"2.5"}}},
	} {
		cmd := &cobra.Command{Use: "deploy"}
		query := addHTTPRouteFlags(cmd)
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		q := url.Values{}
		query(q)
		if q.Encode() != tc.want.Encode() {
			t.Errorf("%v: %s, want %s", tc.args, q.Encode(), tc.want.Encode())
		}
	}
}
