package main

import (
	"net/url"
	"testing"

	"github.com/spf13/cobra"
)

// The egress flags go into the deploy query only when given.
func TestDeployEgressFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want url.Values
	}{
		{nil, url.Values{}},
		{[]string{"--egress", "https://a.example", "--egress", "http://10.0.0.5:8080,https://*.b.example"},
			url.Values{"egress": {"https://a.example,http://10.0.0.5:8080,https://*.b.example"}}},
		{[]string{"--egress", ""}, url.Values{"egress": {""}}},
		{[]string{"--egress-timeout", "2s", "--egress-max-response", "4096", "--egress-rate", "0.5"},
			url.Values{"egress_timeout": {"2s"}, "egress_max_response": {"4096"}, "egress_rate": {"0.5"}}},
	} {
		cmd := &cobra.Command{Use: "deploy"}
		query := addEgressFlags(cmd)
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
