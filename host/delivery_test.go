package host

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// journalEntries decodes typ/id's journal records on n.
func journalEntries(t *testing.T, n *Node, typ, id string) []sharding.JournalEntry {
	t.Helper()
	page, err := n.journalPage(context.Background(), typ, id, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := n.catalog.get(typ)
	key := sharding.EntityKey{Type: typ, Shard: abi.ShardID(id, info.NumberOfShards), ID: id}
	var out []sharding.JournalEntry
	for _, r := range page.Records {
		en, err := sharding.DecodeJournalEntry(key, sharding.JournalRecord{Seq: r.Seq, Data: r.Data})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, en)
	}
	return out
}

// A wasm entity's tell under the journal (effectively-once, the default) leaves from
// its outbox: the sender's record holds it, numbered, and the receiver's record the
// number; an ask takes the next number, and the receiver's record keeps its reply. A
// type deployed --delivery at-most-once numbers nothing and its record holds no send,
// and its tell arrives all the same.
func TestWasmEntitySendsAreNumberedAndJournaled(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	n := nodes[0]
	ctx := context.Background()
	wasm := testwasm.Bytes(t, "abitest")
	if _, err := n.Deploy(ctx, wasm, sharding.TypeSettings{Name: "abitest"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Deploy(ctx, wasm, sharding.TypeSettings{Name: "amo", Delivery: sharding.DeliveryAtMostOnce}); err != nil {
		t.Fatal(err)
	}
	ask := func(typ, id, msg string) string {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		r, err := n.Sharding().Ask(actx, typ, id, []byte(msg))
		if err != nil {
			t.Fatalf("%s/%s %s: %v", typ, id, msg, err)
		}
		return string(r.Payload)
	}
	fired := func(id string) {
		t.Helper()
		testutil.EventuallyNil(t, 30*time.Second, "the tell delivered to "+id, func() error {
			if ev := ask("abitest", id, "events"); strings.Count(ev, "1 x hello") != 1 {
				return fmt.Errorf("events of %s: %q", id, ev)
			}
			return nil
		})
	}
	ask("abitest", "s", "tell abitest/r timer x 0 0 hello")
	fired("r")
	sent := journalEntries(t, n, "abitest", "s")
	if len(sent) != 1 || len(sent[0].Sends) != 1 || sent[0].Sends[0].Seq != 1 || sent[0].Sends[0].EntityID != "r" ||
		string(sent[0].Sends[0].Payload) != "timer x 0 0 hello" || sent[0].SendSeq != 1 {
		t.Fatalf("the sender's records %+v, want one holding send #1 to abitest/r", sent)
	}
	// The ask waits for the outbox to hold nothing for r, then takes number 2.
	if got := ask("abitest", "s", "ask abitest/r echo hi"); got != "hi" {
		t.Fatalf("ask: %q", got)
	}
	if sent = journalEntries(t, n, "abitest", "s"); len(sent) != 2 || sent[1].SendSeq != 2 || len(sent[1].Sends) != 0 {
		t.Fatalf("the sender's records %+v, want the ask's with SendSeq 2", sent)
	}
	var got []string
	for _, en := range journalEntries(t, n, "abitest", "r") {
		if en.Sender == "abitest/s" {
			got = append(got, fmt.Sprintf("#%d %s %q", en.SenderSeq, en.Payload, en.Reply))
		}
	}
	if want := []string{`#1 timer x 0 0 hello ""`, `#2 echo hi "hi"`}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the receiver's records of abitest/s: %q, want %q", got, want)
	}

	ask("amo", "s", "tell abitest/r2 timer x 0 0 hello")
	fired("r2")
	if sent := journalEntries(t, n, "amo", "s"); len(sent) != 1 || len(sent[0].Sends) != 0 || sent[0].SendSeq != 0 {
		t.Fatalf("the at-most-once sender's records %+v, want no send and no number", sent)
	}
	for _, en := range journalEntries(t, n, "abitest", "r2") {
		if en.SenderSeq != 0 {
			t.Fatalf("the receiver's record of an at-most-once tell has a sender sequence: %+v", en)
		}
	}
}
