package host

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// Entity state through the host: guest-level snapshots (echo-rust exports
// shardhost_snapshot/restore), transparent ones (the Go counter does not), the passivate
// host function, and the saved-state envelope.

func TestGuestSnapshotRoundTrip(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	m := compileRust(t, rt, echoRust)
	if !m.HasGuestSnapshot() {
		t.Fatal("echo-rust exports shardhost_snapshot and shardhost_restore")
	}
	ctx := context.Background()
	inst := mustInstantiate(t, m, echoRust, "a")
	if _, ok, err := inst.GuestSnapshot(); ok || err != nil {
		t.Fatalf("before any message: ok %v, %v; want NoSnapshot", ok, err)
	}
	for i := 0; i < 5; i++ {
		if _, err := inst.Receive(ctx, []byte("echo x")); err != nil {
			t.Fatal(err)
		}
	}
	state, ok, err := inst.GuestSnapshot()
	if !ok || err != nil {
		t.Fatalf("snapshot: ok %v, %v", ok, err)
	}
	if want := []byte{1, 5, 0, 0, 0, 0, 0, 0, 0}; !bytes.Equal(state, want) {
		t.Fatalf("state % x, want % x (echo-rust's encoding)", state, want)
	}
	// The instance goes on after a snapshot.
	if out, err := inst.Receive(ctx, []byte("count")); err != nil || string(out) != "6" {
		t.Fatalf("count after snapshot: %q %v", out, err)
	}
	restored, err := m.RestoreGuest(ctx, echoRust, "a", state)
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close(ctx)
	if out, err := restored.Receive(ctx, []byte("count")); err != nil || string(out) != "6" {
		t.Fatalf("restored count: %q %v, want 6", out, err)
	}
}

func TestGuestRestoreRefusals(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	ctx := context.Background()
	rust := compileRust(t, rt, echoRust)
	_, err := rust.RestoreGuest(ctx, echoRust, "a", []byte{9, 9})
	if !errors.Is(err, ErrSnapshotFailed) || !strings.Contains(err.Error(), "echo-rust: malformed state") {
		t.Fatalf("malformed state: %v, want ErrSnapshotFailed with the guest's text", err)
	}
	// It says restore, not snapshot (as for a Rust module given a Go type's state).
	if !errors.Is(err, ErrRestoreFailed) || !strings.HasPrefix(err.Error(), "host: guest restore failed: ") {
		t.Fatalf("malformed state: %q, want ErrRestoreFailed saying restore", err)
	}
	// A Go guest with no Snapshotter (the counter built with transparent state) answers
	// NoSnapshot, and refuses a guest state.
	counter, err := rt.Compile(ctx, testwasm.BytesWith(t, "counter", testwasm.TransparentTag))
	if err != nil {
		t.Fatal(err)
	}
	if !counter.HasGuestSnapshot() {
		t.Fatal("the Go SDK exports shardhost_snapshot and shardhost_restore")
	}
	inst, err := counter.Instantiate(ctx, "counter", "c")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	if _, err := inst.Receive(ctx, []byte("inc")); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := inst.GuestSnapshot(); ok || err != nil {
		t.Fatalf("counter: ok %v, %v; want NoSnapshot", ok, err)
	}
	if _, err := counter.RestoreGuest(ctx, "counter", "c", []byte("x")); !errors.Is(err, ErrSnapshotFailed) {
		t.Fatalf("counter given a guest state: %v", err)
	}
}

// moduleExportingI32 returns a wasm module exporting one function () -> i32 named name.
func moduleExportingI32(name string) []byte {
	var b []byte
	b = append(b, "\x00asm\x01\x00\x00\x00"...)
	b = append(b, 1, 5, 1, 0x60, 0, 1, 0x7f) // type section: one type () -> i32
	b = append(b, 3, 2, 1, 0)                // function section: one function of type 0
	exp := []byte{1, byte(len(name))}
	exp = append(exp, name...)
	exp = append(exp, 0, 0) // func index 0
	b = append(b, 7, byte(len(exp)))
	b = append(b, exp...)
	b = append(b, 10, 6, 1, 4, 0, 0x41, 0, 0x0b) // code section: i32.const 0
	return b
}

func TestPassivateOnlyDuringReceive(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	m := compileRust(t, rt, echoRust)
	inst := mustInstantiate(t, m, echoRust, "p")
	ctx := context.Background()
	if _, err := inst.Receive(ctx, []byte("count")); err != nil || inst.PassivationRequested() {
		t.Fatalf("count: %v, passivation requested %v", err, inst.PassivationRequested())
	}
	if out, err := inst.Receive(ctx, []byte("passivate")); err != nil || string(out) != "ok" {
		t.Fatalf("passivate: %q %v", out, err)
	}
	if !inst.PassivationRequested() {
		t.Fatal("passivate not seen")
	}
	if inst.PassivationRequested() {
		t.Fatal("the request is cleared once read")
	}
}

func TestEntityStateEnvelope(t *testing.T) {
	extras := entityExtras{
		Timers:        []savedTimer{{Name: "tick", Message: []byte("t"), Due: 1234, Interval: 5}},
		Subscriptions: []string{"a", "b"},
	}
	for _, kind := range []byte{stateGuest, stateInstance} {
		for _, x := range []entityExtras{{}, extras} {
			k, payload, got, err := decodeState(encodeState(kind, []byte("abc"), x))
			if err != nil || k != kind || string(payload) != "abc" || !reflect.DeepEqual(got, x) {
				t.Fatalf("kind %q: %q %q %+v %v", kind, k, payload, got, err)
			}
		}
	}
	// A state saved by the version before extras is still read.
	if k, payload, x, err := decodeState([]byte("SHES\x01gabc")); err != nil || k != stateGuest || string(payload) != "abc" || len(x.Timers) != 0 {
		t.Fatalf("version 1: %q %q %v", k, payload, err)
	}
	bad := map[string][]byte{
		"empty":        nil,
		"no magic":     []byte("XXXX\x02g\x00"),
		"new version":  []byte("SHES\x03g\x00"),
		"bad kind":     []byte("SHES\x02z\x00"),
		"short":        []byte("SHES"),
		"no length":    []byte("SHES\x02g"),
		"long extras":  []byte("SHES\x02g\x09ab"),
		"bad extras":   []byte("SHES\x02g\x02\xff\xffabc"),
		"extras shape": []byte("SHES\x02g\x01\x05abc"),
	}
	for name, b := range bad {
		if _, _, _, err := decodeState(b); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v, want ErrBadSnapshot", name, err)
		}
	}
}

// waitPassivated waits until no member hosts the entity's instance any more.
func waitPassivated(t *testing.T, n *Node, typ, id string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, typ+"/"+id+" passivated", func() bool {
		for _, sh := range n.Sharding().LocalState().Shards {
			for _, e := range sh.Entities {
				if sh.Type == typ && e == id {
					return false
				}
			}
		}
		return true
	})
}

// A Go entity with transparent state (the counter built so), built by TinyGo and by
// Go's port, passivated for idleness comes back with its state; so does the counter
// with its default, explicit state.
func TestNodeTransparentStateSurvivesPassivation(t *testing.T) {
	for _, c := range testwasm.GoTransparentCompilers {
		t.Run(c.Name, func(t *testing.T) { testTransparentStateSurvivesPassivation(t, c.Bytes(t, "counter")) })
	}
	for _, c := range testwasm.GoCompilers {
		t.Run(c.Name+"-explicit", func(t *testing.T) { testTransparentStateSurvivesPassivation(t, c.Bytes(t, "counter")) })
	}
}

func testTransparentStateSurvivesPassivation(t *testing.T, counter []byte) {
	n := startNode(t, nil, nil)
	waitMembers(t, []*Node{n})
	ctx := context.Background()
	if _, err := n.Deploy(ctx, counter,
		sharding.TypeSettings{Name: "counter", PassivateAfter: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := n.Sharding().Ask(ctx, "counter", "idle", []byte("inc")); err != nil {
			t.Fatal(err)
		}
	}
	waitPassivated(t, n, "counter", "idle")
	r, err := n.Sharding().Ask(ctx, "counter", "idle", []byte("inc"))
	if err != nil || string(r.Payload) != "4" {
		t.Fatalf("after passivation: %q %v, want 4", r.Payload, err)
	}
}

// A Rust entity asks to be passivated; it comes back with its guest-level state, and a
// trap costs that message alone: in-memory recovery replays the messages since that
// state (TestRecoveryKeepsAcknowledgedMessages has more).
func TestNodeGuestStateAndRequestedPassivation(t *testing.T) {
	n := startNode(t, nil, nil)
	waitMembers(t, []*Node{n})
	ctx := context.Background()
	if _, err := n.Deploy(ctx, testwasm.RustBytes(t, echoRust), sharding.TypeSettings{Name: echoRust}); err != nil {
		t.Fatal(err)
	}
	ask := func(msg string) (string, error) {
		r, err := n.Sharding().Ask(ctx, echoRust, "r", []byte(msg))
		return string(r.Payload), err
	}
	for i := 1; i <= 3; i++ {
		if out, err := ask("count"); err != nil || out != strconv.Itoa(i) {
			t.Fatalf("count %d: %q %v", i, out, err)
		}
	}
	if out, err := ask("passivate"); err != nil || out != "ok" {
		t.Fatalf("passivate: %q %v", out, err)
	}
	waitPassivated(t, n, echoRust, "r")
	if out, err := ask("count"); err != nil || out != "5" {
		t.Fatalf("after passivation: %q %v, want 5", out, err)
	}
	if _, err := ask("panic"); err == nil {
		t.Fatal("panic did not fail")
	}
	// The count since the save (4, at passivation) is kept: the failed message
	// counted, and was undone; the next one counts 6.
	if out, err := ask("count"); err != nil || out != "6" {
		t.Fatalf("after the trap: %q %v, want 6", out, err)
	}
}

// withCustomSection returns wasm with a custom section appended: the same code under
// another digest, as a redeploy of a rebuilt module is.
func withCustomSection(wasm []byte, text string) []byte {
	body := wasmName(nil, "shardhost-test")
	body = append(body, text...)
	return section(append([]byte(nil), wasm...), 0, body)
}

// A new version of a type is recorded; an entity active during the deploy moves to it
// at its next activation, with its guest-level state, after its journal's records
// replayed on the version that made them.
func TestNodeModuleVersions(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	defer tp.Shutdown(context.Background())
	n := startNode(t, nil, func(c *Config) { c.TracerProvider = tp })
	waitMembers(t, []*Node{n})
	ctx := context.Background()
	v1 := testwasm.RustBytes(t, echoRust)
	if _, err := n.Deploy(ctx, v1, sharding.TypeSettings{Name: echoRust}); err != nil {
		t.Fatal(err)
	}
	ask := func(msg string) (string, error) {
		r, err := n.Sharding().Ask(ctx, echoRust, "v", []byte(msg))
		return string(r.Payload), err
	}
	for i := 1; i <= 2; i++ {
		if out, err := ask("count"); err != nil || out != strconv.Itoa(i) {
			t.Fatalf("count %d: %q %v", i, out, err)
		}
	}
	v2 := withCustomSection(v1, "version 2")
	res, err := n.Deploy(ctx, v2, sharding.TypeSettings{Name: echoRust})
	if err != nil || res.Type.Version != 2 {
		t.Fatalf("redeploy: %+v %v", res.Type, err)
	}
	mods := n.Modules()
	if len(mods) != 2 || !mods[0].Current || mods[0].Digest != moduleDigest(v2) || mods[1].Digest != moduleDigest(v1) ||
		mods[1].Version != 1 || mods[1].Current || !mods[0].Local || !mods[1].Local {
		t.Fatalf("modules: %+v", mods)
	}
	if out, err := ask("passivate"); err != nil || out != "ok" {
		t.Fatalf("passivate: %q %v", out, err)
	}
	waitPassivated(t, n, echoRust, "v")
	if out, err := ask("count"); err != nil || out != "4" {
		t.Fatalf("count on version 2: %q %v, want 4", out, err)
	}
	// The activations of v, in order, and the module each used.
	var used []string
	for _, s := range recorder.Ended() {
		if s.Name() != "instantiate "+echoRust && s.Name() != "restore "+echoRust {
			continue
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		if attrs["shardhost.entity.id"] == "v" {
			used = append(used, attrs["shardhost.module.digest"])
		}
	}
	// The second activation replays the journal's records on version 1, which made
	// them, and then moves the entity to version 2 (a restore on it).
	if len(used) != 3 || used[0] != moduleDigest(v1) || used[1] != moduleDigest(v1) || used[2] != moduleDigest(v2) {
		t.Fatalf("activations used %v, want version 1, version 1 (the replay), then version 2", used)
	}
}
