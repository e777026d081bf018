package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit are the release and the commit the binary was built from, stamped
// by the Makefile (-ldflags "-X main.version=... -X main.commit=..."); empty: what Go
// recorded (the module version, and the VCS commit unless built with -buildvcs=false).
var version, commit string

// buildVersion is what shardhost version prints.
type buildVersion struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Dirty   bool   `json:"dirty,omitempty"`
	Time    string `json:"commit_time,omitempty"`
	Go      string `json:"go"`
	Wazero  string `json:"wazero"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

// readBuildVersion reads the binary's build information: the module version (or the
// stamped one), the VCS commit Go recorded, the Go toolchain and wazero's version.
func readBuildVersion() buildVersion {
	v := buildVersion{Version: version, Commit: commit, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, Wazero: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if v.Version == "" {
			v.Version = "unknown"
		}
		return v
	}
	if v.Version == "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if commit == "" {
				v.Commit = s.Value
			}
		case "vcs.modified":
			v.Dirty = commit == "" && s.Value == "true"
		case "vcs.time":
			v.Time = s.Value
		}
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/tetratelabs/wazero" {
			v.Wazero = d.Version
			if d.Replace != nil {
				v.Wazero = d.Replace.Version
			}
		}
	}
	return v
}

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of shardhost, its commit, Go and wazero",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := readBuildVersion()
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			if output != "text" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			commit := v.Commit
			if commit == "" {
				commit = "unknown"
			} else if v.Dirty {
				commit += " (modified)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "shardhost %s\ncommit    %s\ngo        %s %s/%s\nwazero    %s\n",
				v.Version, commit, v.Go, v.OS, v.Arch, v.Wazero)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
