package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/sharding"
)

// replayFlags are replay's flags.
type replayFlags struct {
	module         string
	from, debug    uint64
	debugDir       string
	memoryLimitMiB int
	maxMessageSize int
	asJSON         bool
}

func newReplayCommand(g *globals) *cobra.Command {
	f := &replayFlags{}
	cmd := &cobra.Command{
		Use:   "replay TYPE/ID [--module NEW.wasm] [--from SEQ] [--debug SEQ]",
		Short: "Replay an entity's journal on this machine; with --module, a trial upgrade",
		Long: `replay downloads an entity's last base (its saved state), the journal records after it
and the module that runs it (an admin's routes; the entity is not activated, nothing
changes), and runs them on this machine with wazero: each record's message again, its
host calls answered from the record. It prints each message's reply beside the
record's outcome, says where the replay differs from the journal (an outcome, a reply's
digest, or the host functions the guest called, in order: the record keeps their
answers, not their arguments), and the size of the state at the end.

--module NEW.wasm makes it a trial upgrade: the new module runs the entity's real
history, from the base's state. A guest-level state (shardhost_snapshot and
shardhost_restore: the Go SDK's Stateful, the Rust SDK's Entity::snapshot) moves to the
new module; a transparent snapshot (a copy of the instance's memory) belongs to its
module, so the trial starts from a new entity and runs the journal from record 1, if
the journal still holds it (a type keeps --history records behind its last base), and
is refused otherwise. Past a host call that differs from the record, the message's
calls run as outside a cluster (tells, asks and distributed data fail as unavailable)
and the replay goes on.

The exit code is 0 when every record replays as recorded, 1 when the replay diverged
(or could not run: the error line says which).

--from SEQ starts the output at record SEQ (the replay still starts at the base; a SEQ
the base holds, for --from or --debug, starts it from a new entity at record 1, if the
journal still holds it).
--debug SEQ stops before record SEQ and writes the message and the entity's state then
(the guest's own snapshot) to files, and prints how to run that one message natively
under a debugger with the SDK's harness (dlv for Go and TinyGo entities, rust-gdb or
rust-lldb for Rust ones): docs/cli.md, "Replay and trial upgrades".

Set --memory-limit and --max-message-size as the members' when they are not the
defaults: a replay's sandbox is a member's.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReplay(cmd, g, f, args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.module, "module", "", "`FILE` of a new module to run the history with (a trial upgrade); default: the entity's own")
	fl.Uint64Var(&f.from, "from", 0, "first record to show (the replay still starts at the base)")
	fl.Uint64Var(&f.debug, "debug", 0, "stop before record `SEQ` and write its message and the state then, for a debugger")
	fl.StringVar(&f.debugDir, "debug-dir", "", "`DIR` for --debug's files (default ./replay-TYPE-ID-SEQ)")
	fl.IntVar(&f.memoryLimitMiB, "memory-limit", 64, "linear memory cap of the instance, in MiB (as the members' --memory-limit)")
	fl.IntVar(&f.maxMessageSize, "max-message-size", 0, "cap of a message and a reply, in bytes (as the members'; default theirs)")
	return outputFlags(cmd, &f.asJSON)
}

func runReplay(cmd *cobra.Command, g *globals, f *replayFlags, arg string) error {
	typ, id, err := entityArg(arg)
	if err != nil {
		return err
	}
	if f.memoryLimitMiB <= 0 || f.maxMessageSize < 0 {
		return fmt.Errorf("--memory-limit must be positive and --max-message-size not negative")
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	var base host.EntityBase
	if err := c.getJSON(entityPath(typ, id, "base"), &base); err != nil {
		return err
	}
	out, header := cmd.OutOrStdout(), cmd.OutOrStdout()
	if f.asJSON {
		header = io.Discard
	}
	var module []byte
	if f.module != "" {
		if module, err = os.ReadFile(f.module); err != nil {
			return fmt.Errorf("--module: %v", err)
		}
	} else {
		r, err := c.do("GET", "/v1/modules/"+url.PathEscape(base.Module), nil)
		if err != nil {
			return err
		}
		module = r.body
	}
	digest := moduleDigest(module)
	state, from := base.State, base.Seq+1
	// A transparent snapshot belongs to its module, and the base holds the records
	// up to its own: a trial of another module, or records before the base to show,
	// start from a new entity at record 1.
	moved := f.module != "" && base.StateKind == "transparent" && digest != base.Module
	asked, flag := f.from, "--from"
	if f.debug > 0 && (asked == 0 || f.debug < asked) {
		asked, flag = f.debug, "--debug"
	}
	early := asked > 0 && asked <= base.Seq
	if moved || early {
		state, from = nil, 1
	}
	var records []host.RawRecord
	for next := from; next > 0; {
		var page host.JournalPage
		if err := c.getJSON(entityPath(typ, id, "journal")+"?from="+strconv.FormatUint(next, 10), &page); err != nil {
			return err
		}
		records = append(records, page.Records...)
		next = page.Next
	}
	if moved && (len(records) == 0 || records[0].Seq != 1) {
		first := "none"
		if len(records) > 0 {
			first = "record " + strconv.FormatUint(records[0].Seq, 10)
		}
		return fmt.Errorf("%s/%s cannot be tried with %s: its base (after record %d) is a transparent snapshot, a copy of the "+
			"memory of module %.12s…, which only that module can take up; and its journal no longer starts at record 1 (its first "+
			"kept is %s) to replay from a new entity. A module that keeps a guest-level state (shardhost_snapshot and "+
			"shardhost_restore: the Go SDK's Stateful, the Rust SDK's Entity::snapshot) can take up another version's state",
			typ, id, f.module, base.Seq, base.Module, first)
	}
	if early && !moved && (len(records) == 0 || records[0].Seq != 1) {
		return fmt.Errorf("%s %d: record %d is in %s/%s's base (after record %d), and its journal no longer starts at record 1 "+
			"to replay from a new entity (a type keeps --history records behind its last base): give %s %d or later",
			flag, asked, asked, typ, id, base.Seq, flag, base.Seq+1)
	}
	in := host.ReplayInput{Type: typ, ID: id, Module: module, State: state, Records: records, From: f.from, StopBefore: f.debug,
		Runtime: host.RuntimeConfig{MemoryLimit: uint64(f.memoryLimitMiB) << 20, MaxMessageSize: f.maxMessageSize}}
	printReplayHeader(header, base, f, digest, moved, asked, early, records)
	rep, err := host.ReplayJournal(context.Background(), in)
	if err != nil {
		if f.module != "" {
			return fmt.Errorf("trial of %s on %s/%s: %w", f.module, typ, id, err)
		}
		return fmt.Errorf("replay of %s/%s: %w", typ, id, err)
	}
	if f.asJSON {
		if err := printJSON(out, rep); err != nil {
			return err
		}
	} else if err := printReplay(out, rep, len(records) > 0); err != nil {
		return err
	}
	if rep.Debug != nil {
		if err := writeDebug(out, typ, id, f, rep.Debug); err != nil {
			return err
		}
	}
	if rep.Diverged() {
		return fmt.Errorf("%s: the replay diverged from the journal at record %d (%d of the %d records replayed differ)",
			rep.Entity, rep.FirstDifference, rep.Differ, rep.Replayed)
	}
	return nil
}

// moduleDigest is a module's hex SHA-256, the name the cluster gives it.
func moduleDigest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return hex.EncodeToString(sum[:])
}

// printReplayHeader says what the replay runs.
func printReplayHeader(w io.Writer, base host.EntityBase, f *replayFlags, digest string, moved bool, asked uint64, early bool, records []host.RawRecord) {
	deployed := fmt.Sprintf("module %.12s…", base.Module)
	switch {
	case base.ModuleFrom == "snapshot" && base.ModuleVersion > 0:
		deployed += fmt.Sprintf(" (version %d, the module of its transparent state)", base.ModuleVersion)
	case base.ModuleFrom == "snapshot":
		deployed += " (the module of its transparent state)"
	default:
		deployed += fmt.Sprintf(" (version %d, the type's current one)", base.ModuleVersion)
	}
	if f.module != "" {
		fmt.Fprintf(w, "trial upgrade of %s: module %.12s… (%s) on its history; it runs %s\n", base.Entity, digest, f.module, deployed)
	} else {
		fmt.Fprintf(w, "replay of %s with %s\n", base.Entity, deployed)
	}
	start := "a new entity"
	switch {
	case moved:
		start = fmt.Sprintf("a new entity: its base (after record %d) is a transparent snapshot, which another module cannot take up", base.Seq)
	case early:
		start = fmt.Sprintf("a new entity: record %d is in its base (after record %d)", asked, base.Seq)
	case base.StateKind != "none":
		start = fmt.Sprintf("its base after record %d (%s state, %d bytes)", base.Seq, base.StateKind, base.StateBytes)
	}
	if len(records) == 0 {
		fmt.Fprintf(w, "from %s; no journal records follow it\n", start)
		return
	}
	fmt.Fprintf(w, "from %s: records %d to %d\n", start, records[0].Seq, records[len(records)-1].Seq)
}

// printReplay prints a replay's report: a line per record, then where it differs and
// the state at the end.
func printReplay(w io.Writer, rep host.ReplayReport, any bool) error {
	if len(rep.Records) > 0 {
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tKIND\tPAYLOAD\tOUTCOME\tREPLY\tAS RECORDED")
		for _, r := range rep.Records {
			kind := r.Kind
			if r.Sender != "" {
				kind += " from " + r.Sender
			}
			if r.Ask {
				kind += " (ask)"
			}
			same := "yes"
			if len(r.Differs) > 0 {
				same = "NO"
			}
			fmt.Fprintf(tw, "%d\t%s\t%q\t%s\t%q\t%s\n", r.Seq, kind, r.Payload, r.Outcome, r.Reply, same)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, r := range rep.Records {
		if len(r.Differs) > 0 {
			fmt.Fprintf(w, "record %d differs: %s\n", r.Seq, strings.Join(r.Differs, "; "))
		}
	}
	if rep.Failed != "" {
		fmt.Fprintf(w, "the guest failed at %s: the replay stopped there\n", rep.Failed)
	}
	switch {
	case !any:
		fmt.Fprintln(w, "nothing replayed: no journal record follows the base")
	case rep.Diverged() && rep.FirstDifference < firstListed(rep):
		fmt.Fprintf(w, "replayed %d records: %d differ from the journal, the first at record %d (before --from)\n", rep.Replayed, rep.Differ, rep.FirstDifference)
	case rep.Diverged():
		fmt.Fprintf(w, "replayed %d records: %d differ from the journal, the first at record %d\n", rep.Replayed, rep.Differ, rep.FirstDifference)
	default:
		fmt.Fprintf(w, "replayed %d records: every outcome, reply and host call as recorded\n", rep.Replayed)
	}
	where := "at the end"
	if rep.Debug != nil {
		where = fmt.Sprintf("before record %d", rep.Debug.Record.Seq)
	}
	switch rep.FinalStateKind {
	case "guest":
		fmt.Fprintf(w, "state %s: %d bytes (the guest's own snapshot)\n", where, rep.FinalStateBytes)
	case "transparent":
		fmt.Fprintf(w, "state %s: %d bytes (a transparent snapshot of the instance)\n", where, rep.FinalStateBytes)
	}
	return nil
}

// firstListed is the first record a report lists (0 when none).
func firstListed(rep host.ReplayReport) uint64 {
	if len(rep.Records) == 0 {
		return 0
	}
	return rep.Records[0].Seq
}

// debugRecord is --debug's record.json: the message to run and where its files are.
type debugRecord struct {
	Entity  string         `json:"entity"`
	Seq     uint64         `json:"seq"`
	Kind    string         `json:"kind"`
	Sender  string         `json:"sender,omitempty"`
	Ask     bool           `json:"ask,omitempty"`
	Message string         `json:"message"`
	State   string         `json:"state,omitempty"`
	Earlier []debugEarlier `json:"earlier,omitempty"`
	// RecordedOutcome and RecordedReplyDigest are what the record says of it.
	RecordedOutcome     string `json:"recorded_outcome"`
	RecordedReplyDigest string `json:"recorded_reply_digest,omitempty"`
}

// debugEarlier is a message a harness delivers before the record's (a module without
// a guest-level state, replayed from a new entity).
type debugEarlier struct {
	Seq     uint64 `json:"seq"`
	Kind    string `json:"kind"`
	Sender  string `json:"sender,omitempty"`
	Message string `json:"message"`
}

// writeDebug writes --debug's files and prints how to run the record under a debugger.
func writeDebug(w io.Writer, typ, id string, f *replayFlags, d *host.ReplayDebug) error {
	dir := f.debugDir
	if dir == "" {
		dir = fmt.Sprintf("replay-%s-%s-%d", typ, url.PathEscape(id), d.Record.Seq)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--debug-dir: %v", err)
	}
	en := d.Record
	rec := debugRecord{Entity: typ + "/" + id, Seq: en.Seq, Kind: en.Kind.String(), Sender: en.Sender, Ask: en.Ask,
		Message: filepath.Join(dir, "message.bin"), RecordedOutcome: en.Outcome}
	if rec.RecordedOutcome == "" {
		rec.RecordedOutcome = "ok"
	}
	if en.ReplyDigest != 0 {
		rec.RecordedReplyDigest = fmt.Sprintf("%08x", en.ReplyDigest)
	}
	write := func(name string, b []byte) error {
		if err := os.WriteFile(name, b, 0o644); err != nil {
			return fmt.Errorf("--debug: %v", err)
		}
		return nil
	}
	if err := write(rec.Message, en.Payload); err != nil {
		return err
	}
	if d.HasState {
		rec.State = filepath.Join(dir, "state.bin")
		if err := write(rec.State, d.State); err != nil {
			return err
		}
	}
	if len(d.Earlier) > 0 {
		if err := os.MkdirAll(filepath.Join(dir, "earlier"), 0o755); err != nil {
			return fmt.Errorf("--debug: %v", err)
		}
		for _, e := range d.Earlier {
			name := filepath.Join(dir, "earlier", fmt.Sprintf("%010d.bin", e.Seq))
			if err := write(name, e.Payload); err != nil {
				return err
			}
			rec.Earlier = append(rec.Earlier, debugEarlier{Seq: e.Seq, Kind: e.Kind.String(), Sender: e.Sender, Message: name})
		}
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := write(filepath.Join(dir, "record.json"), append(b, '\n')); err != nil {
		return err
	}
	printDebugSteps(w, typ, id, dir, rec, d)
	return nil
}

// printDebugSteps prints how to run the record's message natively under a debugger,
// with the SDKs' harnesses (docs/cli.md, "Replay and trial upgrades").
func printDebugSteps(w io.Writer, typ, id, dir string, rec debugRecord, d *host.ReplayDebug) {
	fmt.Fprintf(w, "\nstopped before record %d (%s): its message is %s; record.json in %s says what it is\n", rec.Seq, rec.Kind, rec.Message, dir)
	var goStart, rustStart string
	switch {
	case d.HasState:
		fmt.Fprintf(w, "the entity's state before it (the guest's own snapshot, %d bytes) is %s\n", len(d.State), rec.State)
		goStart = fmt.Sprintf("\tstate, _ := os.ReadFile(%q)\n\tif err := h.Restore(state); err != nil {\n\t\tt.Fatal(err)\n\t}\n", rec.State)
		rustStart = fmt.Sprintf("    h.restore(&std::fs::read(%q).unwrap()).unwrap();\n", rec.State)
	case len(d.Earlier) > 0:
		fmt.Fprintf(w, "the module keeps no guest-level state: the %d messages before it (in %s, in name order) bring a new entity to it\n",
			len(d.Earlier), filepath.Join(dir, "earlier"))
		goStart = fmt.Sprintf("\tearlier, _ := filepath.Glob(%q)\n\tfor _, f := range earlier { // in order; record.json gives each one's sender and kind\n\t\tmsg, _ := os.ReadFile(f)\n\t\th.Send(msg)\n\t}\n",
			filepath.Join(dir, "earlier", "*.bin"))
		rustStart = fmt.Sprintf("    let mut earlier: Vec<_> = std::fs::read_dir(%q).unwrap().map(|e| e.unwrap().path()).collect();\n    earlier.sort();\n    for f in earlier { let _ = h.send(&std::fs::read(f).unwrap()); }\n",
			filepath.Join(dir, "earlier"))
	case len(d.Earlier) == 0 && rec.Seq == 1:
		fmt.Fprintln(w, "it is the entity's first message: the harness starts from a new entity")
	default:
		fmt.Fprintln(w, "the module keeps no guest-level state, and the replay started from a transparent snapshot (a copy of its "+
			"memory), which a native build cannot take up: the harness below starts from a new entity, not from the state the "+
			"record met; give the entity a guest-level state (the Go SDK's Stateful, the Rust SDK's Entity::snapshot) to debug it from there")
	}
	goSend := "h.Send(msg)"
	rustSend := "h.send(&msg)"
	if rec.Sender != "" && rec.Kind == sharding.KindMessage.String() {
		goSend = fmt.Sprintf("h.SendFrom(%q, msg)", rec.Sender)
		rustSend = fmt.Sprintf("h.send_from(%q, &msg)", rec.Sender)
	} else if rec.Kind != sharding.KindMessage.String() {
		fmt.Fprintf(w, "a %s message: the Go harness delivers one with FireTimer or DeliverChanged, the Rust one with "+
			"deliver(MessageKind::%s, %q, &msg); the lines below send it as a plain message\n", rec.Kind, strings.ToUpper(rec.Kind[:1])+rec.Kind[1:], rec.Sender)
	}
	fmt.Fprintf(w, `
Go or TinyGo entity (the harness runs the same Go source natively): put this test
beside the entity's main.go (importing os, testing, the SDK as shardhost, and
path/filepath to read earlier/; NEW is the factory your init gives shardhost.Register),
then run it under a debugger:

func TestRecord%d(t *testing.T) {
	h := shardhost.NewHarness(%q, %q, NEW)
%s	msg, _ := os.ReadFile(%q)
	out, err := %s // break here, or in your Receive
	t.Logf("reply %%q, error %%v", out, err)
}

	dlv test . -- -test.run 'TestRecord%d$'   (then: break main.go:LINE of your Receive, continue)
	or: go test -c -gcflags=all='-N -l' -o record.test && gdb --args ./record.test -test.run 'TestRecord%d$'

Rust entity: put this test in the entity's crate (NEW makes the entity), then run it
under a debugger:

#[test]
fn record_%d() {
    let mut h = shardhost::Harness::new(%q, %q, NEW);
%s    let msg = std::fs::read(%q).unwrap();
    let r = %s;
    println!("{:?}", r);
}

	cargo test --no-run   (it names the test binary: target/debug/deps/CRATE-HASH)
	rust-gdb --args TARGET record_%d --exact --nocapture   (or rust-lldb; then: break lib.rs:LINE of your receive, run)
`, rec.Seq, typ, id, goStart, rec.Message, goSend, rec.Seq, rec.Seq, rec.Seq, typ, id, rustStart, rec.Message, rustSend, rec.Seq)
}
