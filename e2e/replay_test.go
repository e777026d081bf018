package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// TestBankReplayAndTrialUpgradeThroughTheCLI: the bank example, built by Go's port, in
// Rust and by TinyGo, with the default settings (the journal), takes deposits, one of
// them 5,000. shardhost replay, run on the test's machine, downloads the account's base,
// journal and module and replays them: every reply as recorded, exit 0; the same with
// --module of the unchanged bank. With --module of the bank built to refuse deposits
// over 1,000 (a trial upgrade) it exits non-zero, saying that it diverged at the 5,000
// deposit's record, how (the outcome, the host calls the new code did not make), and
// that the later replies differ. --from starts the listing later; --debug stops before a
// record and writes its message (and what brings a new entity to its state) with the
// steps to run it under a debugger. A replay activates nothing. Bad input (an unknown
// type, an entity with no journal, --from past the end, a module that does not
// instantiate) is refused with one line naming the problem, and changes nothing.
func TestBankReplayAndTrialUpgradeThroughTheCLI(t *testing.T) {
	hosts := startCluster(t, 3)
	modules := []struct{ typ, path, limited string }{
		{"bank-go", testwasm.Path(t, "bank"), testwasm.PathWith(t, "bank", "-tags=banklimit")},
		{"bank-rust", testwasm.RustPath(t, "bank-rust"), testwasm.RustPathWith(t, "bank-rust", "--cfg", "bank_limit")},
		{"bank-tinygo", testwasm.TinyGoPath(t, "bank"),
			testwasm.TinyGoPathWith(t, "bank", append(append([]string(nil), testwasm.TinyGoFlags...), "-tags=banklimit"))},
	}
	for _, m := range modules {
		t.Run(m.typ, func(t *testing.T) {
			if out, errText, ok := cli(t, hosts[0], nil, "deploy", "--type", m.typ, m.path); !ok {
				t.Fatalf("deploy: %s%s", out, errText)
			}
			acct := m.typ + "/alice"
			deposits := []struct{ msg, reply string }{
				{"deposit 10", "10"}, {"deposit 20", "30"}, {"deposit 5000", "5030"}, {"deposit 30", "5060"}, {"balance", "5060"},
			}
			for i, d := range deposits {
				if out, errText, ok := cli(t, hosts[i%3], nil, "ask", acct, d.msg); !ok || strings.TrimSpace(out) != d.reply {
					t.Fatalf("%s: %q %s, want %s", d.msg, out, errText, d.reply)
				}
			}
			if _, errText, ok := cli(t, hosts[1], nil, "ask", acct, "withdraw 9999"); ok || !strings.Contains(errText, "insufficient funds") {
				t.Fatalf("overdraft: ok=%v %s", ok, errText)
			}
			// The entity's own module: as recorded. --from 1 lists every record, also when
			// a base was saved meanwhile (a busy member's interpreter may find one due).
			out, errText, ok := cli(t, hosts[1], nil, "replay", acct, "--from", "1")
			if !ok || !strings.Contains(out, "every outcome, reply and host call as recorded") {
				t.Fatalf("replay: ok=%v\n%s%s", ok, out, errText)
			}
			for _, d := range deposits {
				if !strings.Contains(out, `"`+d.msg+`"`) || !strings.Contains(out, `"`+d.reply+`"`) {
					t.Errorf("replay output lacks %q → %q:\n%s", d.msg, d.reply, out)
				}
			}
			if !strings.Contains(out, "entity-error") || !strings.Contains(out, "insufficient funds") {
				t.Errorf("replay output lacks the overdraft's error:\n%s", out)
			}
			// A trial upgrade with the unchanged bank: exit 0.
			out, errText, ok = cli(t, hosts[2], nil, "replay", acct, "--module", m.path, "--from", "1")
			if !ok || !strings.Contains(out, "trial upgrade of "+acct) || !strings.Contains(out, "every outcome, reply and host call as recorded") ||
				!strings.Contains(out, "state at the end: ") {
				t.Fatalf("trial of the unchanged bank: ok=%v\n%s%s", ok, out, errText)
			}
			// The bank that refuses deposits over 1,000: it diverges at record 3.
			out, errText, ok = cli(t, hosts[0], nil, "replay", acct, "--module", m.limited)
			lines := strings.Split(strings.TrimSpace(errText), "\n")
			if ok || len(lines) != 1 || !strings.Contains(lines[0], "diverged from the journal at record 3 (3 of the 6 records replayed differ)") {
				t.Fatalf("trial of the changed bank: ok=%v\n%s%s", ok, out, errText)
			}
			for _, want := range []string{
				"record 3 differs: outcome entity-error, the record's ok; host calls: made 0 of the record's 1 host calls",
				"a deposit is at most 1000", "record 4 differs: reply ", "record 5 differs: reply ",
				"the first at record 3",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("trial of the changed bank: no %q in\n%s", want, out)
				}
			}
			// Records 1 and 2 come before the change; record 6, the overdraft, fails with
			// the same code (an error's text is not in the record).
			for _, same := range []string{"record 1 differs", "record 2 differs", "record 6 differs"} {
				if strings.Contains(out, same) {
					t.Errorf("trial of the changed bank: %q in\n%s", same, out)
				}
			}
			// --from: the listing starts there.
			out, errText, ok = cli(t, hosts[1], nil, "replay", acct, "--from", "4")
			if !ok || strings.Contains(out, `"deposit 10"`) || !strings.Contains(out, `"deposit 30"`) {
				t.Fatalf("--from 4: ok=%v\n%s%s", ok, out, errText)
			}
			// --debug: stops before record 4 and writes its message.
			dir := t.TempDir()
			out, errText, ok = cli(t, hosts[1], nil, "replay", acct, "--debug", "4", "--debug-dir", dir)
			if !ok || !strings.Contains(out, "stopped before record 4") || !strings.Contains(out, "dlv test") ||
				!strings.Contains(out, "rust-gdb") || !strings.Contains(out, "shardhost.NewHarness(\""+m.typ+"\", \"alice\"") {
				t.Fatalf("--debug 4: ok=%v\n%s%s", ok, out, errText)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "message.bin")); err != nil || string(b) != "deposit 30" {
				t.Fatalf("message.bin: %q %v", b, err)
			}
			var rec struct {
				Seq     uint64 `json:"seq"`
				Earlier []struct {
					Seq     uint64 `json:"seq"`
					Message string `json:"message"`
				} `json:"earlier"`
			}
			b, err := os.ReadFile(filepath.Join(dir, "record.json"))
			if err != nil || json.Unmarshal(b, &rec) != nil || rec.Seq != 4 {
				t.Fatalf("record.json: %s %v", b, err)
			}
			// The bank keeps explicit state: state.bin is its state before the record, which
			// a harness restores: version 1, the balance 5030 and 3 operations (the refused
			// deposit is none), as varints.
			if !strings.Contains(out, "the guest's own snapshot, 4 bytes") || !strings.Contains(out, "h.Restore(state)") {
				t.Errorf("--debug 4 does not give the bank's explicit state:\n%s", out)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "state.bin")); err != nil || string(b) != string([]byte{1, 0xcc, 0x4e, 6}) {
				t.Errorf("state.bin: %x %v, want 01cc4e06", b, err)
			}
			// Passivated (a stop hook may save a base after the last record), the account
			// replays from record 1 for --from 1, and is not activated by it.
			if out, errText, ok := cli(t, hosts[2], nil, "passivate", acct); !ok {
				t.Fatalf("passivate: %s%s", out, errText)
			}
			out, errText, ok = cli(t, hosts[1], nil, "replay", acct, "--from", "1")
			if !ok || !strings.Contains(out, "replayed 6 records: every outcome, reply and host call as recorded") || !strings.Contains(out, `"deposit 10"`) {
				t.Fatalf("replay --from 1 after the passivation: ok=%v\n%s%s", ok, out, errText)
			}
			// Without flags it starts at the base, whatever the base holds.
			out, errText, ok = cli(t, hosts[0], nil, "replay", acct)
			if !ok || !strings.Contains(out, "state at the end: ") {
				t.Fatalf("replay after the passivation: ok=%v\n%s%s", ok, out, errText)
			}
			var shards struct {
				Regions []struct {
					Shards []struct {
						Type     string `json:"type"`
						Entities int    `json:"entities"`
					} `json:"shards"`
				} `json:"regions"`
			}
			if out, errText, ok := cli(t, hosts[0], nil, "shards", "-o", "json"); !ok || json.Unmarshal([]byte(out), &shards) != nil {
				t.Fatalf("shards: %s%s", out, errText)
			}
			for _, r := range shards.Regions {
				for _, s := range r.Shards {
					if s.Type == m.typ && s.Entities > 0 {
						t.Errorf("a replay activated %d entities of %s", s.Entities, m.typ)
					}
				}
			}

			// Bad input: one line naming the problem.
			mustFail(t, hosts[0], nil, "unknown entity type", "replay", m.typ+"x/alice")
			mustFail(t, hosts[0], nil, "no saved state and no journal records", "replay", m.typ+"/nobody")
			mustFail(t, hosts[0], nil, "past the journal's last record, 6", "replay", acct, "--from", "7")
			wasm, err := os.ReadFile(m.path)
			if err != nil {
				t.Fatal(err)
			}
			broken := filepath.Join(t.TempDir(), "broken.wasm")
			os.WriteFile(broken, wasm[:len(wasm)/2], 0o644)
			mustFail(t, hosts[0], nil, "invalid module", "replay", acct, "--module", broken)
			// Nothing changed: the same balance, and six records.
			if out, _, _ := cli(t, hosts[2], nil, "ask", acct, "balance"); strings.TrimSpace(out) != "5060" {
				t.Fatalf("balance after the replays: %q", out)
			}
			if out, _, ok := cli(t, hosts[0], nil, "history", acct); !ok || strings.Count(out, "\n") != 1+7 {
				t.Fatalf("history after the replays (6 records and the balance just asked):\n%s", out)
			}
		})
	}
}
