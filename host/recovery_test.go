package host

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/host/internal/wasmbin"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// The bank entity (examples/wasm/bank, bank-rust) under the default --checkpoint
// passivation: a trap, the deadline, the host call budget and a reply over the cap each
// cost their message alone. No acknowledged deposit is lost, bank-total (updated through
// a host call the replay must not repeat) agrees with the balance, and without recovery
// the same trap loses the deposits since the last save.
func TestRecoveryKeepsAcknowledgedMessages(t *testing.T) {
	modules := []struct {
		name  string
		bytes func(testing.TB, string) []byte
		src   string
	}{
		{"go", testwasm.Bytes, "bank"},
		{"rust", testwasm.RustBytes, "bank-rust"},
	}
	const capBytes = 4096
	nodes := startNodes(t, 1, func(c *Config) {
		// Long enough for a deposit under the race detector on a loaded machine; the
		// loop meets it.
		c.Runtime.MessageDeadline = 2 * time.Second
		c.Runtime.MaxMessageSize = capBytes
		c.Runtime.CallBudget = 10_000
	})
	c := client(t, nodes[0])
	for _, m := range modules {
		t.Run(m.name, func(t *testing.T) {
			typ := "bank-" + m.name
			if r := c.do("POST", "/v1/types/"+typ, m.bytes(t, m.src)); r.status != 200 {
				t.Fatalf("deploy: %d %s", r.status, r.body)
			}
			ask := func(msg string, status int, want string) {
				t.Helper()
				r := c.ask(typ, "alice", msg)
				got := string(r.body)
				if r.status >= 400 {
					got = r.err.Code + ": " + r.err.Error
				}
				if r.status != status || !strings.Contains(got, want) {
					t.Fatalf("%.40q: %d %.200s, want %d %q", msg, r.status, got, status, want)
				}
			}
			before := ddataCounter(t, c, "bank-total")
			ask("deposit 5", 200, "5")
			ask("deposit 7", 200, "12")
			ask("trap", 500, "guest-trap")
			ask("balance", 200, "12")
			ask("deposit 1", 200, "13")
			ask("loop", 504, "guest-deadline")
			ask("balance", 200, "13")
			ask("spin", 500, "host call budget")
			ask("withdraw 3", 200, "10")
			ask(strings.Repeat("x", capBytes), 502, "reply-too-large")
			ask("balance", 200, "10")
			ask("trap", 500, "guest-trap") // again, from the base the last recovery took
			ask("balance", 200, "10")
			// A message over the cap is refused before the entity: nothing to recover.
			ask(strings.Repeat("y", capBytes+1), 413, "over the cap")
			ask("trap", 500, "guest-trap")
			ask("balance", 200, "10")
			if total := ddataCounter(t, c, "bank-total") - before; total != 10 {
				t.Fatalf("bank-total moved by %d, the balance by 10", total)
			}
		})
	}
}

// Under the passivation policy, without in-memory recovery, a trap loses what the
// entity acknowledged since its last save.
func TestWithoutRecoveryATrapLosesUnsavedMessages(t *testing.T) {
	nodes := startNodes(t, 1, func(c *Config) { c.Recovery = false })
	c := client(t, nodes[0])
	if r := c.do("POST", "/v1/types/bank?checkpoint=passivation", testwasm.Bytes(t, "bank")); r.status != 200 {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	c.ask("bank", "bob", "deposit 5")
	if r := c.ask("bank", "bob", "trap"); r.status != 500 {
		t.Fatalf("trap: %d %s", r.status, r.body)
	}
	if r := c.ask("bank", "bob", "balance"); r.status != 200 || string(r.body) != "0" {
		t.Fatalf("balance without recovery: %d %s, want 0 (the deposit was never saved)", r.status, r.body)
	}
}

// ddataCounter reads a counter's value on the node behind c (local).
func ddataCounter(t *testing.T, c apiClient, key string) int64 {
	t.Helper()
	r := c.do("GET", "/v1/ddata/keys/"+key, nil)
	if r.status == 404 {
		return 0
	}
	var v struct {
		Value int64 `json:"value"`
	}
	if err := json.Unmarshal(r.body, &v); r.status != 200 || err != nil {
		t.Fatalf("ddata get %s: %d %s", key, r.status, r.body)
	}
	return v.Value
}

// The replay answers host calls from the record and does them no second time: tells
// are not sent again, the on_activate hook's effects are not doubled, the timer the
// entity set is still the one the host runs (abitest, a Go guest using each kind of
// host call).
func TestRecoveryDoesNotRepeatHostCalls(t *testing.T) {
	nodes := startNodes(t, 1, nil)
	c := client(t, nodes[0])
	if r := c.do("POST", "/v1/types/abitest", testwasm.Bytes(t, "abitest")); r.status != 200 {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	want := func(id, msg, reply string) {
		t.Helper()
		if r := c.ask("abitest", id, msg); r.status != 200 || string(r.body) != reply {
			t.Fatalf("%s %q: %d %s, want %q", id, msg, r.status, r.body, reply)
		}
	}
	want("a", "count", "1")
	for i := 0; i < 2; i++ {
		want("a", "tell abitest/b count", "ok")
	}
	want("a", "ask abitest/c echo hi", "hi")
	want("a", "timer t1 600000 0 ping", "ok")
	want("a", "ddup rec-key pncounter local incr 2", "2")
	if r := c.ask("abitest", "a", "random 8"); r.status != 200 || len(r.body) != 16 {
		t.Fatalf("random: %d %s", r.status, r.body)
	}
	want("a", "count", "2")
	if r := c.ask("abitest", "a", "trap"); r.status != 500 {
		t.Fatalf("trap: %d %s", r.status, r.body)
	}
	want("a", "count", "3")                            // the state after the last successful message
	want("a", "hooks", "activations=1 passivations=0") // on_activate replayed from its record
	want("b", "count", "3")                            // the two tells, once each, and this ask
	want("a", "ddget rec-key local", "2")              // the update not repeated
	want("a", "cancel t1", "1")                        // the timer is the host's, still set
	want("a", "cancel t1", "0")
}

// A replay whose guest asks for other host calls than the record holds fails (and the
// entity then falls back to its saved state); the same record replays cleanly.
func TestReplayDetectsDivergence(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	m := compile(t, rt, "abitest")
	ctx := context.Background()
	newInst := func() *wasmInstance { return mustInstantiate(t, m, "abitest", "d") }
	inst := newInst()
	inst.startRecording()
	if _, err := inst.Receive(ctx, []byte("random 8")); err != nil {
		t.Fatal(err)
	}
	calls := inst.stopRecording()
	if len(calls) != 1 || calls[0].fn != abi.ImportRandom || len(calls[0].mem) != 8 {
		t.Fatalf("record %+v, want one random call of 8 bytes", calls)
	}
	msg := []byte("random 8")
	if m.ops.Has(wasmbin.OpStart) {
		t.Fatalf("the module has a start function (ops %v): the next check needs an export it lacks", m.ops)
	}
	if err := newInst().replay(wasmbin.OpStart, msg, sharding.MessageInfo{}, calls); err != nil {
		t.Fatalf("replay without an export: %v", err)
	}
	ok := newInst()
	if err := ok.replay(wasmbin.OpReceive, msg, sharding.MessageInfo{}, calls); err != nil {
		t.Fatalf("faithful replay: %v", err)
	}
	for name, bad := range map[string][]hostRecord{
		"missing call": nil,
		"other call":   {{fn: abi.ImportNow}},
		"extra call":   append(append([]hostRecord(nil), calls...), hostRecord{fn: abi.ImportNow}),
	} {
		inst := newInst()
		err := inst.replay(wasmbin.OpReceive, msg, sharding.MessageInfo{}, bad)
		if err == nil || !strings.Contains(err.Error(), "replay diverged") {
			t.Errorf("%s: %v, want a divergence", name, err)
		}
	}
}

// A new entity's record starts from its activation: its first messages are logged, not
// followed by a snapshot of its whole memory (which would cost what a new instance of a
// Rust entity costs again, and hold a copy of its memory), until replaying them would
// take about recoveryReplayFactor snapshots.
func TestRecoveryTakesNoSnapshotAfterTheFirstMessage(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	m, err := rt.Compile(context.Background(), testwasm.RustBytes(t, "counter-rust"))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Instantiate(context.Background(), "counter", "r")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	e := &wasmEntity{inst: inst, rec: &recovery{}}
	e.logMessage([]byte("inc"), sharding.MessageInfo{}, nil, 20*time.Microsecond)
	if e.rec.base != nil || len(e.rec.log) != 1 {
		t.Fatalf("after a 20 µs message: base %v, %d logged, want no snapshot and 1 logged", e.rec.base != nil, len(e.rec.log))
	}
	e.logMessage([]byte("inc"), sharding.MessageInfo{}, nil, time.Second)
	if e.rec.base == nil || len(e.rec.log) != 0 {
		t.Fatalf("after a 1 s message: base %v, %d logged, want a snapshot and an empty record", e.rec.base != nil, len(e.rec.log))
	}
}

// A replay runs under the activation deadline, not the message deadline: it re-runs a
// call that ended once within the message deadline, and on a loaded host may take
// longer (e2e TestBankKeepsAcknowledgedDeposits at load 15 under the race detector: the
// replay of a Go bank entity's record after a trap passed its 1 s message deadline, and
// the entity restarted from its saved state, 75 acknowledged deposits gone). A call
// that never ends ("loop") shows which deadline stopped it.
func TestReplayRunsUnderTheActivationDeadline(t *testing.T) {
	rt, _ := newTestRuntime(t, func(c *RuntimeConfig) {
		c.MessageDeadline = 20 * time.Millisecond
		c.ActivationDeadline = 300 * time.Millisecond
	})
	m := compile(t, rt, "abitest")
	ctx := context.Background()
	newInst := func() *wasmInstance { return mustInstantiate(t, m, "abitest", "r") }
	if _, err := newInst().Receive(ctx, []byte("loop")); err == nil || !strings.Contains(err.Error(), "the deadline is 20ms") {
		t.Fatalf("a message that loops: %v, want the message deadline, 20ms", err)
	}
	inst := newInst()
	err := inst.replay(wasmbin.OpReceive, []byte("loop"), sharding.MessageInfo{}, nil)
	if err == nil || !strings.Contains(err.Error(), "the deadline is 300ms") {
		t.Fatalf("a replay that loops: %v, want the activation deadline, 300ms", err)
	}

	// After a replay, the next message has its own deadline again, though the call
	// timer was set for the replay's (here an hour: without the timer set anew, the
	// looping message would run that long).
	rt, _ = newTestRuntime(t, func(c *RuntimeConfig) {
		c.MessageDeadline = 20 * time.Millisecond
		c.ActivationDeadline = time.Hour
	})
	m = compile(t, rt, "abitest")
	inst = newInst()
	if err := inst.replay(wasmbin.OpReceive, []byte("count"), sharding.MessageInfo{}, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := inst.Receive(ctx, []byte("loop"))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "the deadline is 20ms") {
			t.Fatalf("a message that loops after a replay: %v, want the message deadline, 20ms", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("a message that loops after a replay was not stopped at its deadline (20ms) within 2 minutes")
	}
}
