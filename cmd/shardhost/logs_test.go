package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

type syncBuffer = testutil.SyncBuffer

// shardhost logs shows an entity's lines and a type's at a level, follows new ones with
// -f until stopped, and refuses bad input.
func TestLogsCommand(t *testing.T) {
	n := startCLIMember(t)
	ctx := context.Background()
	if _, err := n.Deploy(ctx, testwasm.Bytes(t, "faulty"), sharding.TypeSettings{Name: "faulty"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"print hello", "log warn careful"} {
		if _, err := n.Sharding().Ask(ctx, "faulty", "x", []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runCLI(t, "logs", "faulty/x")
	if err != nil || !strings.Contains(out, "INFO  faulty/x seq=1 stdout: hello") || !strings.Contains(out, "WARN  faulty/x seq=2 log: careful") {
		t.Fatalf("logs faulty/x: %v\n%s", err, out)
	}
	out, err = runCLI(t, "logs", "--type", "faulty", "--level", "warn", "-o", "json")
	if err != nil || strings.Contains(out, "hello") || !strings.Contains(out, `"text":"careful"`) {
		t.Fatalf("logs --type faulty --level warn -o json: %v\n%s", err, out)
	}
	for _, bad := range [][]string{{"logs"}, {"logs", "faulty/x", "--level", "loud"}, {"logs", "faulty/x", "--type", "faulty"}, {"logs", "nosuch/x"}} {
		if out, err := runCLI(t, bad...); err == nil {
			t.Errorf("%v: no error\n%s", bad, out)
		}
	}

	// -f: the lines kept, then a new one, until the context ends.
	root := newRootCommand()
	var buf syncBuffer
	root.SetOut(&buf)
	root.SetErr(&buf)
	root.SetArgs([]string{"logs", "faulty/x", "-f"})
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(fctx) }() // ends with cancel below
	testutil.EventuallyNil(t, 30*time.Second, "the backlog", func() error {
		if !strings.Contains(buf.String(), "careful") {
			return fmt.Errorf("%q", buf.String())
		}
		return nil
	})
	if _, err := n.Sharding().Ask(ctx, "faulty", "x", []byte("eprint later")); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, 30*time.Second, "the new line", func() error {
		if !strings.Contains(buf.String(), "WARN  faulty/x seq=3 stderr: later") {
			return fmt.Errorf("%q", buf.String())
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("logs -f after the stop: %v", err)
	}
}
