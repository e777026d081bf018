package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
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

// --instance-pool-bytes gives the runtime's InstancePoolBytes, 0 turning the pool off
// (a negative InstancePoolBytes); a negative one is refused, naming the flag. Its
// default is host.DefaultInstancePoolBytes.
func TestInstancePoolBytesFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int64
		err  bool
	}{
		{nil, host.DefaultInstancePoolBytes(), false},
		{[]string{"--instance-pool-bytes", "0"}, -1, false},
		{[]string{"--instance-pool-bytes", "1048576"}, 1 << 20, false},
		{[]string{"--instance-pool-bytes", "-1"}, 0, true},
	} {
		var f nodeFlags
		cmd := &cobra.Command{Use: "start"}
		f.add(cmd, "local")
		if err := cmd.Flags().Parse(c.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.config(slog.New(slog.DiscardHandler))
		switch {
		case c.err && (err == nil || !strings.Contains(err.Error(), "--instance-pool-bytes")):
			t.Errorf("%v: %v, want an error naming the flag", c.args, err)
		case !c.err && (err != nil || cfg.Runtime.InstancePoolBytes != c.want):
			t.Errorf("%v: pool %d, %v; want %d", c.args, cfg.Runtime.InstancePoolBytes, err, c.want)
		}
	}
}
