package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// holdCompilations makes every background compilation of n's runtime wait until
// release is closed (or the compilation is cancelled), so that a test sees a module
// on the interpreter for as long as it needs.
func holdCompilations(n *Node, release <-chan struct{}) {
	n.rt.compileHook = func(ctx context.Context, digest string) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// engines returns the engine each node reports for the module with the digest.
func engines(nodes []*Node, digest string) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		for _, m := range n.Modules() {
			if m.Digest == digest {
				out[i] = m.Engine
			}
		}
	}
	return out
}

// interpretedInstances counts the live instances of typ on n that run on the interpreter.
func interpretedInstances(n *Node, typ string) (interpreted, all int) {
	n.rt.mu.Lock()
	defer n.rt.mu.Unlock()
	for inst := range n.rt.live {
		if inst.entityType == typ {
			all++
			if inst.code.interpreted {
				interpreted++
			}
		}
	}
	return interpreted, all
}

// TestDeployAnswersAsksWhileCompiling: a deploy returns once every member has validated
// and stored the module, before any member has compiled it; asks are answered on the
// interpreter meanwhile; once compiled, new activations run the compiled code and the
// active entities move to it at their next message with their state.
//
// The Rust counter keeps the compilation short under the race detector;
// TestInterpretedGoSnapshotRestoresCompiled covers a Go guest's move.
func TestDeployAnswersAsksWhileCompiling(t *testing.T) {
	cache := t.TempDir() // a cache of its own: a module compiled before would load compiled
	nodes := startNodes(t, 2, func(c *Config) { c.Runtime.CacheDir, c.Runtime.CompileBeforeServing = cache, false })
	release := make(chan struct{})
	for _, n := range nodes {
		holdCompilations(n, release)
	}
	ctx := context.Background()
	res, err := nodes[0].Deploy(ctx, testwasm.RustBytes(t, "counter-rust"), sharding.TypeSettings{Name: "counter", NumberOfShards: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Members {
		if !m.Ready {
			t.Fatalf("%s not ready: %s", m.Node, m.Error)
		}
	}
	if got := engines(nodes, res.Type.Digest); got[0] != "interpreter" || got[1] != "interpreter" {
		t.Fatalf("engines during the compilation: %q", got)
	}
	ids := []string{"a", "b", "c", "d", "e", "f"}
	for _, id := range ids {
		for want := 1; want <= 2; want++ {
			out, err := nodes[want-1].Sharding().Ask(ctx, "counter", id, []byte("inc"))
			if err != nil || string(out.Payload) != fmt.Sprint(want) {
				t.Fatalf("ask %s during the compilation: %q %v", id, out.Payload, err)
			}
		}
	}
	for _, n := range nodes {
		if interp, all := interpretedInstances(n, "counter"); interp != all {
			t.Fatalf("%s: %d of %d instances on the interpreter before the module is compiled", n.Self().Address, interp, all)
		}
	}
	close(release)
	testutil.EventuallyNil(t, 10*time.Minute, "the module compiled on every member", func() error {
		if got := engines(nodes, res.Type.Digest); got[0] != "compiler" || got[1] != "compiler" {
			return fmt.Errorf("engines %q", got)
		}
		return nil
	})
	for _, id := range append(ids, "new") {
		want := "3"
		if id == "new" {
			want = "1"
		}
		out, err := nodes[0].Sharding().Ask(ctx, "counter", id, []byte("inc"))
		if err != nil || string(out.Payload) != want {
			t.Fatalf("ask %s after the compilation: %q %v, want %s", id, out.Payload, err, want)
		}
	}
	hosted := 0
	for _, n := range nodes {
		interp, all := interpretedInstances(n, "counter")
		if interp != 0 {
			t.Fatalf("%s: %d of %d instances still on the interpreter", n.Self().Address, interp, all)
		}
		hosted += all
	}
	if hosted != len(ids)+1 {
		t.Fatalf("%d counter instances, want %d", hosted, len(ids)+1)
	}
}

// TestDeployRefusesMalformedModuleBeforeStoring: a module that fails validation is
// refused with ErrInvalidModule, and no member stores it or learns of the type; every
// member refuses it by itself, as it refuses the stage request a deploy sends it.
func TestDeployRefusesMalformedModuleBeforeStoring(t *testing.T) {
	nodes := startNodes(t, 2, func(c *Config) { c.Runtime.CompileBeforeServing = false })
	good := testwasm.Bytes(t, "counter")
	ctx := context.Background()
	for name, wasm := range map[string][]byte{
		"truncated": good[:len(good)/2],
		"no header": []byte("not wasm at all"),
		"shape":     moduleExporting(t, "shardhost_receive"),
	} {
		_, err := nodes[0].Deploy(ctx, wasm, sharding.TypeSettings{Name: "bad"})
		if !errors.Is(err, ErrInvalidModule) {
			t.Fatalf("%s: %v, want ErrInvalidModule", name, err)
		}
		_, err = nodes[0].messenger.Request(ctx, nodes[1].Self().TransportAddr, topicStage, append([]byte(moduleDigest(wasm)), wasm...))
		if err == nil || !strings.Contains(err.Error(), ErrInvalidModule.Error()) {
			t.Fatalf("%s: the other member's answer to a stage request: %v, want its refusal as an invalid module", name, err)
		}
	}
	for _, n := range nodes {
		if types := n.Types(); len(types) != 0 {
			t.Fatalf("%s knows types %v", n.Self().Address, types)
		}
		files, err := os.ReadDir(n.modules.dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != 0 {
			t.Fatalf("%s stored %d files of refused modules", n.Self().Address, len(files))
		}
	}
}

// TestStageRefusesBytesThatAreNotTheDigest: a stage request whose bytes do not have the
// digest it names is refused, and nothing is stored.
func TestStageRefusesBytesThatAreNotTheDigest(t *testing.T) {
	nodes := startNodes(t, 2, func(c *Config) { c.Runtime.CompileBeforeServing = false })
	wasm := testwasm.RustBytes(t, "counter-rust")
	other := append([]byte(nil), wasm...)
	other[len(other)-1] ^= 1
	_, err := nodes[0].messenger.Request(context.Background(), nodes[1].Self().TransportAddr, topicStage, append([]byte(moduleDigest(other)), wasm...))
	if err == nil || !strings.Contains(err.Error(), "another digest") {
		t.Fatalf("stage of bytes under another digest: %v", err)
	}
	if files, err := os.ReadDir(nodes[1].modules.dir); err != nil || len(files) != 0 {
		t.Fatalf("files stored: %v %v", files, err)
	}
}

// TestDeployStoresOnEveryMemberBeforeReturning: when a deploy returns, every member it
// reports ready holds the module: its file, with the deployed bytes, and the module
// validated in memory, none compiled yet; and no temporary file is left.
func TestDeployStoresOnEveryMemberBeforeReturning(t *testing.T) {
	nodes := startNodes(t, 3, func(c *Config) { c.Runtime.CacheDir, c.Runtime.CompileBeforeServing = t.TempDir(), false })
	release := make(chan struct{})
	defer close(release)
	for _, n := range nodes {
		holdCompilations(n, release)
	}
	wasm := testwasm.Bytes(t, "counter")
	res, err := nodes[1].Deploy(context.Background(), wasm, sharding.TypeSettings{Name: "counter"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Members) != len(nodes) {
		t.Fatalf("members %+v", res.Members)
	}
	for _, m := range res.Members {
		if !m.Ready {
			t.Fatalf("%s not ready: %s", m.Node, m.Error)
		}
	}
	for _, n := range nodes {
		b, err := os.ReadFile(n.modules.path(res.Type.Digest))
		if err != nil || !bytes.Equal(b, wasm) {
			t.Fatalf("%s: the module's file: %d bytes, %v", n.Self().Address, len(b), err)
		}
		mod := n.modules.loaded(res.Type.Digest)
		if mod == nil || !mod.Interpreted() {
			t.Fatalf("%s: the module is not loaded on the interpreter (%v)", n.Self().Address, mod)
		}
		if files, err := os.ReadDir(n.modules.dir); err != nil || len(files) != 1 {
			t.Fatalf("%s: files in the module directory %v %v", n.Self().Address, files, err)
		}
	}
}

// TestDeployRefusedByTheDeployerLeavesNothing: a module that another member accepts and
// stores in the deploy's first step (stage), but the deploying member refuses (its
// memory cap is under what the module needs at its start), fails the deploy; no member
// learns of the type, and the other member removes the module again.
func TestDeployRefusedByTheDeployerLeavesNothing(t *testing.T) {
	small := startNode(t, nil, func(c *Config) {
		c.Runtime.MemoryLimit, c.Runtime.CompileBeforeServing = 1<<20, false
	})
	other := startNode(t, []string{small.Self().Address}, func(c *Config) { c.Runtime.CompileBeforeServing = false })
	nodes := []*Node{small, other}
	waitMembers(t, nodes)
	wasm := testwasm.Bytes(t, "counter")
	_, err := small.Deploy(context.Background(), wasm, sharding.TypeSettings{Name: "counter"})
	if !errors.Is(err, ErrInvalidModule) {
		t.Fatalf("deploy from the member with a 1 MiB cap: %v, want ErrInvalidModule", err)
	}
	for _, n := range nodes {
		if types := n.Types(); len(types) != 0 {
			t.Fatalf("%s knows types %v", n.Self().Address, types)
		}
		if files, err := os.ReadDir(n.modules.dir); err != nil || len(files) != 0 {
			t.Fatalf("%s: files of the refused module %v %v", n.Self().Address, files, err)
		}
		if n.modules.loaded(moduleDigest(wasm)) != nil {
			t.Fatalf("%s holds the refused module in memory", n.Self().Address)
		}
	}
	// A module that a catalog entry names stays: the same bytes deployed from the
	// other member, then refused again by the small one.
	if _, err := other.Deploy(context.Background(), wasm, sharding.TypeSettings{Name: "counter"}); err != nil {
		t.Fatal(err)
	}
	if _, err := small.Deploy(context.Background(), wasm, sharding.TypeSettings{Name: "counter2"}); !errors.Is(err, ErrInvalidModule) {
		t.Fatalf("second deploy from the member with a 1 MiB cap: %v", err)
	}
	if !other.modules.has(moduleDigest(wasm)) || other.modules.loaded(moduleDigest(wasm)) == nil {
		t.Fatal("the module of a deployed type was discarded")
	}
}

// TestDeployReportsMemberThatFailsToLoad: a member whose memory cap is under what the
// module needs at its start refuses it and the deploy says so for that member; the
// others have the type ready.
func TestDeployReportsMemberThatFailsToLoad(t *testing.T) {
	first := startNode(t, nil, func(c *Config) { c.Runtime.CompileBeforeServing = false })
	small := startNode(t, []string{first.Self().Address}, func(c *Config) {
		c.Runtime.MemoryLimit, c.Runtime.CompileBeforeServing = 1<<20, false
	})
	waitMembers(t, []*Node{first, small})
	res, err := first.Deploy(context.Background(), testwasm.Bytes(t, "counter"), sharding.TypeSettings{Name: "counter"})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Members {
		switch m.Node {
		case first.Self().Address:
			if !m.Ready {
				t.Fatalf("the deploying member is not ready: %s", m.Error)
			}
		case small.Self().Address:
			if m.Ready || !strings.Contains(m.Error, "invalid module") {
				t.Fatalf("the member with a 1 MiB cap: ready %v, error %q", m.Ready, m.Error)
			}
		}
	}
	if small.modules.has(res.Type.Digest) {
		t.Fatal("the member that refused the module stored it")
	}
}

// TestBackgroundCompileFailureIsReported: a member whose compilation fails says so in
// its module list, and its entities go on answering on the interpreter.
func TestBackgroundCompileFailureIsReported(t *testing.T) {
	n := startNodes(t, 1, func(c *Config) { c.Runtime.CacheDir, c.Runtime.CompileBeforeServing = "", false })[0]
	n.rt.compileHook = func(context.Context, string) error { return errors.New("no executable memory") }
	ctx := context.Background()
	res, err := n.Deploy(ctx, testwasm.Bytes(t, "counter"), sharding.TypeSettings{Name: "counter"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, time.Minute, "the compilation's failure listed", func() error {
		for _, m := range n.Modules() {
			if m.Digest == res.Type.Digest && m.Engine == "interpreter (compile failed)" && strings.Contains(m.CompileError, "no executable memory") {
				return nil
			}
		}
		return fmt.Errorf("modules %+v", n.Modules())
	})
	for want := 1; want <= 2; want++ {
		if out, err := n.Sharding().Ask(ctx, "counter", "x", []byte("inc")); err != nil || string(out.Payload) != fmt.Sprint(want) {
			t.Fatalf("ask on the interpreter: %q %v", out.Payload, err)
		}
	}
}

// TestCompiledModuleLoadsCompiledAfterRestart: a module compiled in the background is
// marked beside the compilation cache, and a runtime with that cache (a restarted
// member) loads it compiled at once instead of starting on the interpreter.
func TestCompiledModuleLoadsCompiledAfterRestart(t *testing.T) {
	cache := t.TempDir()
	wasm := testwasm.RustBytes(t, "counter-rust")
	ctx := context.Background()
	rt, _ := newTestRuntime(t, func(c *RuntimeConfig) { c.CacheDir = cache })
	m, err := rt.Load(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Interpreted() {
		t.Fatal("a module never compiled loads compiled")
	}
	<-m.CompileInBackground()
	if m.Interpreted() || m.CompileError() != nil {
		t.Fatalf("after its compilation: interpreted %v, %v", m.Interpreted(), m.CompileError())
	}
	again, _ := newTestRuntime(t, func(c *RuntimeConfig) { c.CacheDir = cache })
	m2, err := again.Load(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	if m2.Interpreted() {
		t.Fatal("a module compiled before starts on the interpreter again")
	}
	other, _ := newTestRuntime(t, func(c *RuntimeConfig) { c.CacheDir = t.TempDir() })
	if m3, err := other.Load(ctx, wasm); err != nil || !m3.Interpreted() {
		t.Fatalf("with another cache: interpreted %v, %v", m3 != nil && m3.Interpreted(), err)
	}
}

// TestInterpretedGoSnapshotRestoresCompiled: a Go guest's instance on the interpreter
// (memory and the runtime's globals) goes on in an instance of the compiled module, as
// an active entity does when its module's compilation ends (wasmEntity.toCompiled).
func TestInterpretedGoSnapshotRestoresCompiled(t *testing.T) {
	ctx := context.Background()
	wasm := testwasm.Bytes(t, "counter")
	interp, _ := newTestRuntime(t, func(c *RuntimeConfig) { c.CacheDir = "" })
	m, err := interp.Load(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := m.Instantiate(ctx, "counter", "c")
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"inc", "inc 41"} {
		if _, err := inst.Receive(ctx, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := inst.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	compiled := compile(t, newRuntimeOnly(t), "counter")
	moved, err := compiled.Restore(ctx, "counter", "c", snap)
	if err != nil {
		t.Fatal(err)
	}
	if moved.code.interpreted {
		t.Fatal("restored on the interpreter")
	}
	if out, err := moved.Receive(ctx, []byte("inc")); err != nil || string(out) != "43" {
		t.Fatalf("after the move: %q %v, want 43", out, err)
	}
}

// newRuntimeOnly is newTestRuntime without its log.
func newRuntimeOnly(t *testing.T) *wasmRuntime {
	rt, _ := newTestRuntime(t, nil)
	return rt
}

// TestInterpreterKeepsTheSandbox: a module run on the interpreter (a deploy, before its
// compilation ends) has the compiled module's sandbox: its linear memory comes from the
// arena, a loop is stopped at the message deadline by the checks compiled into the
// module, and a memory bomb traps at the cap.
func TestInterpreterKeepsTheSandbox(t *testing.T) {
	const deadline, limit = time.Second, 32 << 20
	rt, _ := newTestRuntime(t, func(c *RuntimeConfig) { c.MessageDeadline, c.MemoryLimit, c.CacheDir = deadline, limit, "" })
	m, err := rt.Load(context.Background(), testwasm.Bytes(t, "faulty"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inst, err := m.Instantiate(ctx, "faulty", "loop")
	if err != nil {
		t.Fatal(err)
	}
	if !inst.code.interpreted {
		t.Fatal("a loaded module's instance is not on the interpreter")
	}
	rt.arena.mu.Lock()
	failed := rt.arena.failed
	rt.arena.mu.Unlock()
	if inst.lm == nil && !failed {
		t.Fatal("the interpreter's instance has its memory on the Go heap, not in the arena")
	}
	_, err = inst.Receive(ctx, []byte("loop"))
	var ge *GuestError
	if !errors.As(err, &ge) || !errors.Is(err, ErrGuestDeadline) || !inst.Closed() {
		t.Fatalf("loop on the interpreter: %v (closed %v)", err, inst.Closed())
	}
	if ge.Ran < deadline {
		t.Fatalf("the loop was stopped after %v, before its deadline %v", ge.Ran, deadline)
	}
	// The bomb touches every page it grows: slow on the interpreter (under the race
	// detector, seconds), so under a deadline that does not end it first.
	rt, _ = newTestRuntime(t, func(c *RuntimeConfig) { c.MessageDeadline, c.MemoryLimit, c.CacheDir = 5*time.Minute, limit, "" })
	if m, err = rt.Load(ctx, testwasm.Bytes(t, "faulty")); err != nil {
		t.Fatal(err)
	}
	inst, err = m.Instantiate(ctx, "faulty", "grow")
	if err != nil {
		t.Fatal(err)
	}
	_, err = inst.Receive(ctx, []byte("grow"))
	if !errors.As(err, &ge) || !errors.Is(err, ErrGuestTrap) || !strings.Contains(err.Error(), "out of memory") {
		t.Fatalf("grow on the interpreter: %v", err)
	}
	if ge.MemoryBytes > limit || ge.MemoryBytes < limit/2 {
		t.Fatalf("the guest trapped with %d MiB of memory; want the cap, %d MiB, or just under", ge.MemoryBytes>>20, limit>>20)
	}
}
