package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// --member-memory-limit gives the sharding's MemoryLimit in MiB; a negative one is
// refused, naming the flag.
func TestMemberMemoryLimitFlag(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want int64
		err  bool
	}{{"0", 0, false}, {"512", 512 << 20, false}, {"-1", 0, true}} {
		var f nodeFlags
		cmd := &cobra.Command{Use: "start"}
		f.add(cmd, "local")
		if err := cmd.Flags().Parse([]string{"--member-memory-limit", c.arg}); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.config(slog.New(slog.DiscardHandler))
		switch {
		case c.err && (err == nil || !strings.Contains(err.Error(), "--member-memory-limit")):
			t.Errorf("--member-memory-limit %s: %v, want an error naming the flag", c.arg, err)
		case !c.err && (err != nil || cfg.Sharding.MemoryLimit != c.want):
			t.Errorf("--member-memory-limit %s: limit %d, %v; want %d", c.arg, cfg.Sharding.MemoryLimit, err, c.want)
		}
	}
}
