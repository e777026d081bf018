package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// outputFlags gives a read command -o/--output table|json, and --json, the same as
// -o json, as before -o existed.
func outputFlags(cmd *cobra.Command, asJSON *bool) *cobra.Command {
	cmd.Flags().VarP(outputFormat{asJSON}, "output", "o", "output format: table or json")
	cmd.Flags().BoolVar(asJSON, "json", false, "print JSON (the same as -o json)")
	return cmd
}

// outputFormat is the value of -o: it sets the command's JSON switch.
type outputFormat struct{ json *bool }

func (o outputFormat) String() string {
	if o.json != nil && *o.json {
		return "json"
	}
	return "table"
}

func (o outputFormat) Set(s string) error {
	switch s {
	case "json":
		*o.json = true
	case "table":
		*o.json = false
	default:
		return fmt.Errorf("%q: want table or json", s)
	}
	return nil
}

func (o outputFormat) Type() string { return "table|json" }
