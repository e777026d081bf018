package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// replayNode is one node with the Rust bank (bank) and abitest-rust (abi) deployed,
// under the default settings: the journal.
func replayNode(t *testing.T) *Node {
	t.Helper()
	n := startNodes(t, 1, nil)[0]
	for typ, wasm := range map[string][]byte{"bank": testwasm.RustBytes(t, "bank-rust"), "abi": testwasm.RustBytes(t, "abitest-rust")} {
		if _, err := n.Deploy(context.Background(), wasm, sharding.TypeSettings{Name: typ}); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// replayAsk sends msgs to typ/id in order and returns the replies (an error's text for
// a refusal).
func replayAsk(t *testing.T, n *Node, typ, id string, msgs ...string) []string {
	t.Helper()
	var out []string
	for _, m := range msgs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := n.Sharding().Ask(ctx, typ, id, []byte(m))
		cancel()
		if err != nil {
			var re *sharding.RemoteError
			if !errors.As(err, &re) && !strings.Contains(err.Error(), "bank:") {
				t.Fatalf("%s to %s/%s: %v", m, typ, id, err)
			}
			out = append(out, err.Error())
			continue
		}
		out = append(out, string(r.Payload))
	}
	return out
}

// bankLimit is the Rust bank built to refuse deposits over 1,000 (--cfg bank_limit).
func bankLimit(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(testwasm.RustPathWith(t, "bank-rust", "--cfg", "bank_limit"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replayInput reads what the API gives out for typ/id: its base, the records from
// from (its base's next when 0), and the module of its base.
func replayInput(t *testing.T, n *Node, typ, id string, from uint64) (EntityBase, ReplayInput) {
	t.Helper()
	ctx := context.Background()
	b, err := n.entityBase(ctx, typ, id)
	if err != nil {
		t.Fatal(err)
	}
	if from == 0 {
		from = b.Seq + 1
	}
	in := ReplayInput{Type: typ, ID: id, State: b.State}
	for from > 0 {
		page, err := n.journalPage(ctx, typ, id, from, 2) // pages of two: the paging is used
		if err != nil {
			t.Fatal(err)
		}
		in.Records = append(in.Records, page.Records...)
		from = page.Next
	}
	if in.Module, err = n.moduleBytes(ctx, b.Module); err != nil {
		t.Fatal(err)
	}
	return b, in
}

// TestReplayJournalOfTheSameModuleMatchesTheRecords: the bank's journal, replayed by
// the module that wrote it on a runtime of its own, gives every reply and outcome
// again (its digests match the records'), through an entity error; From lists the
// records from there, and the final state is the instance's snapshot.
func TestReplayJournalOfTheSameModuleMatchesTheRecords(t *testing.T) {
	n := replayNode(t)
	msgs := []string{"deposit 10", "deposit 20", "withdraw 1000", "deposit 30", "balance"}
	replies := replayAsk(t, n, "bank", "alice", msgs...)
	b, in := replayInput(t, n, "bank", "alice", 0)
	if b.Seq >= uint64(len(msgs)) {
		t.Fatalf("a base after record %d: nothing left to replay", b.Seq)
	}
	if b.ModuleFrom != "type" && b.ModuleFrom != "snapshot" || b.Module != moduleDigest(testwasm.RustBytes(t, "bank-rust")) {
		t.Fatalf("base's module %s from %q", b.Module, b.ModuleFrom)
	}
	rep, err := ReplayJournal(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Diverged() || rep.Failed != "" || rep.Replayed != len(msgs)-int(b.Seq) || len(rep.Records) != rep.Replayed {
		t.Fatalf("replay: %+v", rep)
	}
	for _, r := range rep.Records {
		want := replies[r.Seq-1]
		if !strings.Contains(want, r.Reply) || r.Outcome != r.RecordedOutcome || r.ReplyDigest != r.RecordedReplyDigest {
			t.Errorf("record %d: %+v, the ask's reply %q", r.Seq, r, want)
		}
		if r.Payload != msgs[r.Seq-1] {
			t.Errorf("record %d: payload %q, want %q", r.Seq, r.Payload, msgs[r.Seq-1])
		}
	}
	for _, r := range rep.Records {
		if r.Seq == 3 && (r.Outcome != sharding.CodeEntityError || !strings.Contains(r.Reply, "insufficient funds")) {
			t.Errorf("the overdraft: %+v", r)
		}
	}
	// The bank's explicit state: version 1, the balance 60 and 3 operations, as varints.
	if rep.FinalStateKind != "guest" || rep.FinalStateBytes != 3 {
		t.Errorf("final state %d bytes %q, want the bank's 3 bytes of explicit state", rep.FinalStateBytes, rep.FinalStateKind)
	}
	in.From = uint64(len(msgs))
	if rep, err = ReplayJournal(context.Background(), in); err != nil || len(rep.Records) != 1 || rep.Records[0].Seq != in.From ||
		rep.Records[0].Reply != "60" || rep.Replayed != len(msgs)-int(b.Seq) {
		t.Fatalf("from %d: %+v %v", in.From, rep, err)
	}
}

// TestReplayJournalOfAChangedModuleReportsWhereItDiverges: the bank built to refuse
// deposits over 1,000 runs the history of an account that took one: the records before
// it match; at it, the outcome differs and the guest made none of the record's host
// calls; after it every reply differs. The first difference is that record's.
func TestReplayJournalOfAChangedModuleReportsWhereItDiverges(t *testing.T) {
	n := replayNode(t)
	replayAsk(t, n, "bank", "bob", "deposit 10", "deposit 20", "deposit 5000", "deposit 30", "balance")
	_, in := replayInput(t, n, "bank", "bob", 1)
	in.State = nil // from a new entity: a transparent base, if one was saved, is the old module's
	in.Module = bankLimit(t)
	rep, err := ReplayJournal(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Diverged() || rep.FirstDifference != 3 || rep.Differ != 3 || rep.Replayed != 5 || rep.Start != 0 || rep.StartState != "none" {
		t.Fatalf("replay: %+v", rep)
	}
	for _, r := range rep.Records[:2] {
		if len(r.Differs) > 0 {
			t.Errorf("record %d differs: %v", r.Seq, r.Differs)
		}
	}
	at := rep.Records[2]
	if at.Outcome != sharding.CodeEntityError || at.RecordedOutcome != "ok" || !strings.Contains(at.Reply, "at most 1000") ||
		len(at.Differs) != 2 || !strings.Contains(at.Differs[0], "outcome entity-error, the record's ok") ||
		!strings.Contains(at.Differs[1], "made 0 of the record's 1 host calls") {
		t.Errorf("record 3: %+v", at)
	}
	for k, want := range []string{"60", "60"} { // 10+20+30: the 5,000 refused
		r := rep.Records[3+k]
		if r.Reply != want || len(r.Differs) != 1 || !strings.HasPrefix(r.Differs[0], "reply ") {
			t.Errorf("record %d: %+v", r.Seq, r)
		}
	}
}

// TestReplayJournalTakesAGuestStateToAnotherModule: abitest-rust keeps a guest-level
// state; after a revert (which saves a base) its journal goes on from the base. The
// replay restores the base into the module, and into another module of the same code
// (another digest): a guest state moves, and both replays match the records (the
// journal's copy of the revert's base among them, which a replay passes over). A
// transparent base does not move: the bank's, given another module, is refused naming
// why, and nothing runs. StopBefore ends a replay before a record with the guest's
// state then and the message.
func TestReplayJournalTakesAGuestStateToAnotherModule(t *testing.T) {
	n := replayNode(t)
	ctx := context.Background()
	replayAsk(t, n, "abi", "g", "count", "count", "count")
	if _, err := n.Sharding().Revert(ctx, "abi", "g", 2); err != nil {
		t.Fatal(err)
	}
	got := replayAsk(t, n, "abi", "g", "count", "count")
	if fmt.Sprint(got) != "[3 4]" {
		t.Fatalf("counts after the revert: %v", got)
	}
	b, in := replayInput(t, n, "abi", "g", 0)
	if b.StateKind != "guest" || b.ModuleFrom != "type" || b.Seq != 4 || len(in.Records) != 3 { // the base's copy, two counts
		t.Fatalf("base: %+v, %d records", b, len(in.Records))
	}
	other := withCustomSection(in.Module, "version 2")
	for _, m := range [][]byte{in.Module, other} {
		in := in
		in.Module = m
		rep, err := ReplayJournal(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Diverged() || rep.Start != 4 || rep.StartState != "guest" || rep.Module != moduleDigest(m) || len(rep.Records) != 2 ||
			rep.Records[0].Reply != "3" || rep.Records[1].Reply != "4" || rep.FinalStateKind != "guest" {
			t.Fatalf("replay with module %.12s: %+v", moduleDigest(m), rep)
		}
	}
	in.StopBefore = 7
	rep, err := ReplayJournal(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Debug
	if d == nil || !d.HasState || len(d.State) == 0 || string(d.Record.Payload) != "count" || d.Record.Seq != 7 || d.Earlier != nil ||
		rep.Replayed != 1 || len(rep.Records) != 1 || rep.FinalStateBytes != len(d.State) {
		t.Fatalf("stop before 7: %+v debug %+v", rep, d)
	}

	// The bank built with transparent state: its base, after a revert, is a transparent
	// snapshot.
	if _, err := n.Deploy(ctx, testwasm.RustBytesWith(t, "bank-rust", testwasm.RustTransparent...), sharding.TypeSettings{Name: "tbank"}); err != nil {
		t.Fatal(err)
	}
	replayAsk(t, n, "tbank", "carol", "deposit 1", "deposit 2")
	if _, err := n.Sharding().Revert(ctx, "tbank", "carol", 1); err != nil {
		t.Fatal(err)
	}
	replayAsk(t, n, "tbank", "carol", "deposit 4")
	b, in = replayInput(t, n, "tbank", "carol", 0)
	if b.StateKind != "transparent" || b.ModuleFrom != "snapshot" || b.ModuleVersion != 1 || b.Seq != 3 {
		t.Fatalf("bank base: %+v", b)
	}
	if rep, err := ReplayJournal(ctx, in); err != nil || rep.Diverged() || len(rep.Records) != 1 || rep.Records[0].Reply != "5" {
		t.Fatalf("the bank's replay from its base: %+v %v", rep, err)
	}
	in.Module = bankLimit(t)
	_, err = ReplayJournal(ctx, in)
	if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), "transparent snapshot") || !strings.Contains(err.Error(), "only that module can take up") {
		t.Fatalf("a transparent base into another module: %v", err)
	}
}

// TestReplayJournalRefusesBadInput: each refusal names the problem, and replays
// nothing.
func TestReplayJournalRefusesBadInput(t *testing.T) {
	n := replayNode(t)
	replayAsk(t, n, "bank", "dave", "deposit 1", "deposit 2")
	_, in := replayInput(t, n, "bank", "dave", 1)
	in.State = nil
	ctx := context.Background()
	corrupt := append([]RawRecord(nil), in.Records...)
	corrupt[1].Data = append([]byte(nil), corrupt[1].Data...)
	corrupt[1].Data[3] ^= 1
	for _, c := range []struct {
		name string
		edit func(*ReplayInput)
		is   error
		want string
	}{
		{"not wasm", func(in *ReplayInput) { in.Module = []byte("hello") }, ErrInvalidModule, "not a WebAssembly binary"},
		{"no exports", func(in *ReplayInput) { in.Module = []byte("\x00asm\x01\x00\x00\x00") }, ErrInvalidModule, "missing"},
		{"no memory", func(in *ReplayInput) {
			in.Module = moduleWithExports(t, abi.VersionMarker(1), abi.ExportAlloc, abi.ExportReceive)
		}, ErrInvalidModule, `missing exported memory "memory"`},
		{"no records", func(in *ReplayInput) { in.Records = nil }, ErrBadRequest, "no saved state and no journal records"},
		{"from past the end", func(in *ReplayInput) { in.From = 3 }, ErrBadRequest, "past the journal's last record, 2"},
		{"stop outside", func(in *ReplayInput) { in.StopBefore = 9 }, ErrBadRequest, "the replay runs records 1 to 2"},
		{"a gap", func(in *ReplayInput) { in.Records = in.Records[1:] }, sharding.ErrCorruptRecord, "record 2 where record 1 should be"},
		{"a corrupt record", func(in *ReplayInput) { in.Records = corrupt }, sharding.ErrCorruptRecord, "checksum"},
		{"another entity's records", func(in *ReplayInput) { in.ID = "eve" }, sharding.ErrCorruptRecord, "checksum"},
	} {
		in := in
		c.edit(&in)
		rep, err := ReplayJournal(ctx, in)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) || rep.Replayed != 0 {
			t.Errorf("%s: %v (replayed %d), want %v with %q", c.name, err, rep.Replayed, c.is, c.want)
		}
	}
}

// TestReplayRoutes: what a replay downloads through the API: the base, the journal in
// pages, a module by digest; each refuses what it cannot give, naming why.
func TestReplayRoutes(t *testing.T) {
	n := replayNode(t)
	replayAsk(t, n, "bank", "erin", "deposit 7", "deposit 8", "balance")
	c := client(t, n)
	var b EntityBase
	if r := c.do("GET", "/v1/entities/bank/erin/base", nil); r.status != 200 || json.Unmarshal(r.body, &b) != nil ||
		b.Entity != "bank/erin" || b.Module == "" || (b.StateKind == "none") != (len(b.State) == 0) {
		t.Fatalf("base: %d %s", r.status, r.body)
	}
	var page JournalPage
	if r := c.do("GET", "/v1/entities/bank/erin/journal?from=1&limit=2", nil); r.status != 200 || json.Unmarshal(r.body, &page) != nil ||
		len(page.Records) != 2 || page.Records[0].Seq != 1 || page.Next != 3 {
		t.Fatalf("journal: %d %s", r.status, r.body)
	}
	if _, err := sharding.DecodeJournalEntry(sharding.EntityKey{Type: "bank", ID: "erin"},
		sharding.JournalRecord{Seq: page.Records[1].Seq, Data: page.Records[1].Data}); err != nil {
		t.Fatalf("a record as the API gives it: %v", err)
	}
	if r := c.do("GET", "/v1/modules/"+b.Module, nil); r.status != 200 || moduleDigest(r.body) != b.Module {
		t.Fatalf("module: %d, %d bytes", r.status, len(r.body))
	}
	// A new entity: no state, an empty journal, the type's module.
	if r := c.do("GET", "/v1/entities/bank/nobody/base", nil); r.status != 200 || json.Unmarshal(r.body, &b) != nil ||
		b.StateKind != "none" || b.Seq != 0 || b.ModuleFrom != "type" {
		t.Fatalf("base of a new entity: %d %s", r.status, r.body)
	}
	for _, c2 := range []struct {
		path   string
		status int
		want   string
	}{
		{"/v1/entities/nosuch/erin/base", 404, "unknown entity type"},
		{"/v1/entities/bank/erin/journal?limit=0", 400, "limit"},
		{"/v1/entities/bank/erin/journal?limit=10001", 400, "limit 10001"},
		{"/v1/entities/bank/erin/journal?from=x", 400, "not a sequence number"},
		{"/v1/modules/abc", 400, "not a module digest"},
		{"/v1/modules/" + strings.Repeat("0", 64), 404, "no version of a deployed type"},
	} {
		if r := c.do("GET", c2.path, nil); r.status != c2.status || !strings.Contains(string(r.body), c2.want) {
			t.Errorf("GET %s: %d %s, want %d with %q", c2.path, r.status, r.body, c2.status, c2.want)
		}
	}
}

// A reminder's message is in the journal like any other, and a replay runs it: the
// events the entity lists after it come out the same. (A replay that passed over the
// reminder's record would diverge at the "events" ask.)
func TestReplayJournalRunsAReminderRecord(t *testing.T) {
	n := replayNode(t)
	replayAsk(t, n, "abi", "r", "remind soon 0 0 hi")
	var events string
	testutil.EventuallyNil(t, 60*time.Second, "the reminder's firing", func() error {
		if events = replayAsk(t, n, "abi", "r", "events")[0]; events == "" {
			return errors.New("no events yet")
		}
		return nil
	})
	if !strings.HasPrefix(events, "10 soon hi due=") {
		t.Fatalf("events %q, want the reminder's", events)
	}
	_, in := replayInput(t, n, "abi", "r", 1)
	rep, err := ReplayJournal(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	reminders := 0
	for _, r := range rep.Records {
		if r.Kind == sharding.KindReminder.String() {
			reminders++
		}
	}
	if rep.Diverged() || rep.Failed != "" || reminders != 1 {
		t.Fatalf("replay: %d reminder records run, diverged %v, failed %q: %+v", reminders, rep.Diverged(), rep.Failed, rep.Records)
	}
}
