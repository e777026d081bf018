package main

import (
	"context"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// shardhost entities lists a type's entities and shardhost entity describes one, on a
// real member; bad filters and an unknown ID get clear answers.
func TestEntitiesAndEntityCommands(t *testing.T) {
	n := startCLIMember(t)
	ctx := context.Background()
	if _, err := n.Deploy(ctx, testwasm.Bytes(t, "counter"), sharding.TypeSettings{Name: "counter"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"alice", "bob", "carol"} {
		if _, err := n.Sharding().Ask(ctx, "counter", id, []byte("inc")); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runCLI(t, "entities", "counter")
	if err != nil {
		t.Fatalf("entities: %v\n%s", err, out)
	}
	for _, want := range []string{"TYPE", "MEMORY", "counter  alice", "counter  bob", "counter  carol", "active", n.Self().Address} {
		if !strings.Contains(out, want) {
			t.Errorf("entities lacks %q:\n%s", want, out)
		}
	}
	if out, err = runCLI(t, "entities", "counter", "--prefix", "b", "-o", "json"); err != nil || !strings.Contains(out, `"id": "bob"`) || strings.Contains(out, "alice") {
		t.Errorf("entities --prefix b -o json: %v\n%s", err, out)
	}
	if out, err = runCLI(t, "entities", "counter", "--status", "sleeping"); err == nil || !strings.Contains(err.Error(), "want active, passivated or paused") {
		t.Errorf("entities --status sleeping: %v\n%s", err, out)
	}
	if out, err = runCLI(t, "entity", "counter/alice"); err != nil || !strings.Contains(out, "status:") || !strings.Contains(out, "1 handled, 0 failed") || !strings.Contains(out, "module version:  1") {
		t.Errorf("entity counter/alice: %v\n%s", err, out)
	}
	if out, err = runCLI(t, "entity", "counter/nobody"); err != nil || !strings.Contains(out, "never seen") {
		t.Errorf("entity counter/nobody: %v\n%s", err, out)
	}
}
