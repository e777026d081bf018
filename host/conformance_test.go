package host

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

// The ABI v1 conformance suite: the same scenarios run against the test module
// examples/wasm/abitest built by TinyGo and by Go's wasip1 port, and against its Rust
// twin abitest-rust, which answer the same text commands, on a cluster of three nodes.
// The types are deployed together, so the scenarios also cross languages.

// conformanceType is an entity type of the suite and how its module is built.
type conformanceType struct {
	typ    string
	wasm   func(testing.TB) []byte
	tinygo bool // built by TinyGo: left out (its subtest skipped) where TinyGo is missing
}

var conformanceTypes = []conformanceType{
	{"abitest-tinygo", func(tb testing.TB) []byte { return testwasm.TinyGoBytes(tb, "abitest") }, true},
	{"abitest-go", func(tb testing.TB) []byte { return testwasm.Bytes(tb, "abitest") }, false},
	{"abitest-rust", func(tb testing.TB) []byte { return testwasm.RustBytes(tb, "abitest-rust") }, false},
}

type conformance struct {
	t     *testing.T
	nodes []*Node
}

// startConformance starts the cluster and deploys the types whose toolchains are here;
// it returns the deployed ones.
func startConformance(t *testing.T) (*conformance, []conformanceType) {
	t.Helper()
	var types []conformanceType
	for _, ct := range conformanceTypes {
		if _, ok := testwasm.TinyGo(); ct.tinygo && !ok {
			continue // its subtest skips, or fails with SHARDHOST_REQUIRE_TINYGO=1
		}
		types = append(types, ct)
	}
	nodes := startNodes(t, 3, func(c *Config) {
		c.Runtime.MessageDeadline = 2 * time.Second
		c.Runtime.MemoryLimit = 32 << 20
	})
	ctx := context.Background()
	for _, ct := range types {
		if _, err := nodes[0].Deploy(ctx, ct.wasm(t), sharding.TypeSettings{Name: ct.typ, NumberOfShards: 10}); err != nil {
			t.Fatalf("deploy %s: %v", ct.typ, err)
		}
	}
	return &conformance{t: t, nodes: nodes}, types
}

// ask sends msg to typ/id through node 0 and returns the reply or the error's text.
func (c *conformance) ask(typ, id, msg string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := c.nodes[0].Sharding().Ask(ctx, typ, id, []byte(msg))
	return string(r.Payload), err
}

func (c *conformance) want(typ, id, msg, want string) {
	c.t.Helper()
	got, err := c.ask(typ, id, msg)
	if err != nil || got != want {
		c.t.Fatalf("%s/%s %q: %q, %v; want %q", typ, id, msg, got, err, want)
	}
}

func (c *conformance) wantErr(typ, id, msg, code, contains string) error {
	c.t.Helper()
	got, err := c.ask(typ, id, msg)
	if err == nil {
		c.t.Fatalf("%s/%s %q: %q, want an error", typ, id, msg, got)
	}
	if code != "" && sharding.ErrorCode(err) != code {
		c.t.Fatalf("%s/%s %q: error code %s (%v), want %s", typ, id, msg, sharding.ErrorCode(err), err, code)
	}
	if !strings.Contains(err.Error(), contains) {
		c.t.Fatalf("%s/%s %q: %v, want it to contain %q", typ, id, msg, err, contains)
	}
	return err
}

// eventually polls msg until its reply satisfies ok.
func (c *conformance) eventually(typ, id, msg string, ok func(string) bool) string {
	c.t.Helper()
	var got string
	testutil.EventuallyNil(c.t, 15*time.Second, fmt.Sprintf("%s/%s %q", typ, id, msg), func() error {
		var err error
		got, err = c.ask(typ, id, msg)
		if err == nil && !ok(got) {
			return fmt.Errorf("last %q", got)
		}
		return err
	})
	return got
}

func TestABIConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and builds two test modules")
	}
	c, types := startConformance(t)
	for _, ct := range conformanceTypes {
		if !slices.ContainsFunc(types, func(d conformanceType) bool { return d.typ == ct.typ }) {
			t.Run(ct.typ, func(t *testing.T) { testwasm.RequireTinyGo(t) })
		}
	}
	for k, ct := range types {
		// Each type talks to the next one (TinyGo → Go → Rust → TinyGo).
		typ, other := ct.typ, types[(k+1)%len(types)].typ
		t.Run(typ, func(t *testing.T) {
			c := &conformance{t: t, nodes: c.nodes}
			t.Run("identity and source", func(t *testing.T) {
				c := &conformance{t: t, nodes: c.nodes}
				c.want(typ, "a", "whoami", typ+"/a")
				c.want(typ, "a", "echo hello there", "hello there")
				c.want(typ, "a", "source", "0 ")
				c.wantErr(typ, "a", "nonsense", sharding.CodeEntityError, "unknown command")
			})
			t.Run("ask and sender", func(t *testing.T) {
				c := &conformance{t: t, nodes: c.nodes}
				c.want(typ, "a", "ask "+typ+"/b whoami", typ+"/b")
				c.want(typ, "a", "ask "+typ+"/b source", "0 "+typ+"/a")
				// Across languages, and to entities on other members (10 shards, 3 members).
				for i := 0; i < 6; i++ {
					id := "x" + strconv.Itoa(i)
					c.want(typ, "a", "ask "+other+"/"+id+" source", "0 "+typ+"/a")
				}
				c.want(typ, "a", "askms 3000 "+other+"/b echo hi", "hi")
				// The asked entity's error comes back with code 9 and its text.
				c.wantErr(typ, "a", "ask "+typ+"/b nonsense", sharding.CodeEntityError, "code 9: unknown command")
				// An unknown type is unavailable (6).
				c.wantErr(typ, "a", "ask nosuchtype/b echo", sharding.CodeEntityError, "code 6:")
			})
			t.Run("ask cycles are refused", func(t *testing.T) {
				c := &conformance{t: t, nodes: c.nodes}
				c.wantErr(typ, "s", "askself", sharding.CodeEntityError, "code 5:")
				// a asks b, which asks a back: b learns at once that a waits for it.
				err := c.wantErr(typ, "c1", "ask "+other+"/c2 ask "+typ+"/c1 echo x", sharding.CodeEntityError, "code 9: code 5:")
				t.Logf("two entities asking each other: %v", err)
				// Through a third entity, on whatever members they live.
				c.wantErr(typ, "c1", "ask "+other+"/c2 ask "+typ+"/c3 ask "+typ+"/c1 echo x", sharding.CodeEntityError, "code 5:")
				// A tell back is no cycle: nobody waits for it.
				k := "conf-tellback-" + typ
				c.want(typ, "c1", "ask "+other+"/c2 tell "+typ+"/c1 ddup "+k+" gcounter local incr 1", "ok")
				c.eventually(typ, "c1", "ddget "+k+" local", func(s string) bool { return s == "1" })
			})
			t.Run("tell", func(t *testing.T) {
				c := &conformance{t: t, nodes: c.nodes}
				k := "conf-tell-" + typ
				c.want(typ, "t", "tell "+other+"/t ddup "+k+" gcounter local incr 1", "ok")
				c.want(typ, "t", "tell "+other+"/t ddup "+k+" gcounter local incr 2", "ok")
				c.eventually(other, "t", "ddget "+k+" local", func(s string) bool { return s == "3" })
				// In order: a tell and then an ask from one sender reach the entity in order.
				c.want(typ, "t2", "tell "+other+"/t2 count", "ok")
				c.want(typ, "t2", "ask "+other+"/t2 count", "2")
				c.wantErr(typ, "t", "tell "+typ+"/ count", sharding.CodeEntityError, "code 7:")
			})
			t.Run("idempotency keys", func(t *testing.T) {
				// The receiver's type journals (the default): a second send with the
				// key of the first is not handled again. An ask gets the first reply.
				c := &conformance{t: t, nodes: c.nodes}
				k := "conf-key-" + typ
				c.want(typ, "ik", "askkey "+k+"-a "+other+"/ik count", "1")
				c.want(typ, "ik", "askkey "+k+"-a "+other+"/ik count", "1")
				c.want(typ, "ik", "ask "+other+"/ik count", "2")
				// Two tells with one key: the ask after them (from the same sender, so
				// after them) counts the first one and itself.
				c.want(typ, "ik", "tellkey "+k+"-t "+other+"/ik2 count", "ok")
				c.want(typ, "ik", "tellkey "+k+"-t "+other+"/ik2 count", "ok")
				c.want(typ, "ik", "ask "+other+"/ik2 count", "2")
				// Another key, or the key sent to another entity, is another message.
				c.want(typ, "ik", "askkey "+k+"-b "+other+"/ik count", "3")
				c.want(typ, "ik", "askkey "+k+"-a "+other+"/ik3 count", "1")
				// From another sender, the key is the same message to the receiver.
				c.want(typ, "ik-b", "askkey "+k+"-a "+other+"/ik count", "1")
				// The first message's error, again, without running it.
				first := c.wantErr(typ, "ik", "askkey "+k+"-e "+other+"/ik nonsense", sharding.CodeEntityError, "code 9: unknown command")
				again := c.wantErr(typ, "ik", "askkey "+k+"-e "+other+"/ik nonsense", sharding.CodeEntityError, "code 9: unknown command")
				if first.Error() != again.Error() {
					t.Fatalf("a retry's error %q, the first %q", again, first)
				}
				// A key over the cap is refused, naming it, and nothing is sent.
				long := strings.Repeat("k", sharding.MaxIdempotencyKeyLen+1)
				c.wantErr(typ, "ik", "tellkey "+long+" "+other+"/ik count", sharding.CodeEntityError, "code 7:")
				c.wantErr(typ, "ik", "askkey "+long+" "+other+"/ik count", sharding.CodeEntityError, "at most 256")
				c.want(typ, "ik", "ask "+other+"/ik count", "4")
			})
			t.Run("forward keeps the sender and the asker", func(t *testing.T) {
				c := &conformance{t: t, nodes: c.nodes}
				c.want(typ, "f", "fwd "+other+"/g hello", "got hello from ")
				c.want(typ, "h", "ask "+typ+"/f fwd "+other+"/g hi", "got hi from "+typ+"/h")
				// A chain of forwards ends at the entity it names.
				c.want(typ, "f", "fwd "+typ+"/f2 fwd", "got fwd from ")
			})
			t.Run("distributed data", func(t *testing.T) {
				c := &conformance{t: t, nodes: c.nodes}
				k := "conf-" + typ
				c.want(typ, "d", "ddup "+k+"-n pncounter majority incr 5", "5")
				c.want(typ, "d", "ddup "+k+"-n pncounter all decr 2", "3")
				c.want(other, "d", "ddget "+k+"-n majority", "3")
				c.want(typ, "d", "ddup "+k+"-s orset majority add b", `["b"]`)
				// Written by an entity that may live on another member: a majority read
				// after two majority writes sees both.
				if out, err := c.ask(typ, "e", "ddup "+k+"-s orset majority add a"); err != nil || !strings.Contains(out, `"a"`) {
					t.Fatalf("add a: %q %v", out, err)
				}
				c.want(other, "e", "ddget "+k+"-s majority", `["a","b"]`)
				c.want(typ, "d", "ddup "+k+"-m lwwmap - put room1 hello world", `{"room1":"hello world"}`)
				c.want(typ, "d", "ddup "+k+"-f flag local enable", "true")
				c.wantErr(typ, "d", "ddget "+k+"-missing local", sharding.CodeEntityError, "code 2:")
				c.wantErr(typ, "d", "ddup "+k+"-n orset local add x", sharding.CodeEntityError, "code 10:")
				c.wantErr(typ, "d", "ddup "+k+"-n pncounter local jump", sharding.CodeEntityError, "code 7:")
				c.wantErr(typ, "d", "ddup "+k+"-n pncounter sometimes incr", sharding.CodeEntityError, "code 7:")
				c.want(typ, "d", "dddel "+k+"-f majority", "ok")
				c.wantErr(typ, "d", "ddget "+k+"-f local", sharding.CodeEntityError, "code 3:")
			})
			t.Run("subscriptions deliver changes", func(t *testing.T) {
				c := &conformance{t: t, nodes: c.nodes}
				k := "conf-topic-" + typ
				c.want(typ, "sub", "sub "+k, "ok")
				c.want(other, "w", "ddup "+k+" lwwregister majority set hello", `"hello"`)
				c.eventually(typ, "sub", "events", func(s string) bool { return strings.Contains(s, `2 `+k+` "hello"`) })
				c.want(typ, "sub", "unsub "+k, "ok")
			})
			t.Run("timers", func(t *testing.T) {
				c := &conformance{t: t, nodes: c.nodes}
				c.want(typ, "tm", "timer once 30 0 ping", "ok")
				c.eventually(typ, "tm", "events", func(s string) bool { return strings.Contains(s, "1 once ping") })
				c.want(typ, "tm", "timer rep 10 10 r", "ok")
				c.eventually(typ, "tm", "events", func(s string) bool { return strings.Count(s, "1 rep r") >= 3 })
				c.want(typ, "tm", "cancel rep", "1")
				c.want(typ, "tm", "cancel rep", "0")
				c.want(typ, "tm", "cancel never", "0")
				// A canceled timer fires no more: a timer set after the cancel, due in
				// 100 ms, is the next event (the canceled one, every 10 ms, would come
				// first).
				before, _ := c.ask(typ, "tm", "events")
				c.want(typ, "tm", "timer mark 100 0 m", "ok")
				c.eventually(typ, "tm", "events", func(s string) bool { return strings.Contains(s, "1 mark m") })
				if before != "" {
					before += "\n"
				}
				c.want(typ, "tm", "events", before+"1 mark m")
				c.wantErr(typ, "tm", "timer "+strings.Repeat("n", 300)+" 10 0 x", sharding.CodeEntityError, "code 7:")
			})
			t.Run("timers and hooks across passivation", func(t *testing.T) {
				c := &conformance{t: t, nodes: c.nodes}
				c.want(typ, "p", "hooks", "activations=1 passivations=0")
				c.want(typ, "p", "timer late 400 0 wake", "ok")
				c.want(typ, "p", "passivate", "ok")
				for _, n := range c.nodes {
					waitPassivated(t, n, typ, "p")
				}
				c.want(typ, "p", "hooks", "activations=2 passivations=1")
				c.eventually(typ, "p", "events", func(s string) bool { return strings.Contains(s, "1 late wake") })
			})
			t.Run("time and randomness", func(t *testing.T) {
				c := &conformance{t: t, nodes: c.nodes}
				out, err := c.ask(typ, "r", "now")
				if err != nil {
					t.Fatal(err)
				}
				var wall, mono int64
				if _, err := fmt.Sscanf(out, "%d %d", &wall, &mono); err != nil {
					t.Fatalf("now: %q: %v", out, err)
				}
				if d := time.Since(time.Unix(0, wall)); d < -time.Minute || d > time.Minute || mono < 0 {
					t.Fatalf("now: wall %v off by %v, monotonic %d", time.Unix(0, wall), d, mono)
				}
				a, _ := c.ask(typ, "r", "random 16")
				b, _ := c.ask(typ, "r", "random 16")
				if _, err := hex.DecodeString(a); err != nil || len(a) != 32 || a == b {
					t.Fatalf("random: %q %q", a, b)
				}
				c.want(typ, "r", "trace hello", "ok")
			})
			t.Run("sandbox", func(t *testing.T) {
				c := &conformance{t: t, nodes: c.nodes}
				c.want(typ, "sb", "count", "1")
				c.want(typ, "sb", "budget 100", "ok")
				err := c.wantErr(typ, "sb", "budget 20000", sharding.CodeGuestTrap, "host call budget")
				var re *sharding.RemoteError
				if !errors.Is(err, ErrGuestTrap) && !errors.As(err, &re) {
					t.Fatalf("budget: %v", err)
				}
				// The instance is recreated in memory with its state after its last
				// successful message (in-memory recovery): the count goes on.
				c.want(typ, "sb", "count", "2")
				c.wantErr(typ, "sb", "loop", sharding.CodeGuestDeadline, "deadline")
				// A memory bomb hits the cap (a trap), or on a slow machine the deadline first.
				if err := c.wantErr(typ, "sb", "grow", "", ""); sharding.ErrorCode(err) != sharding.CodeGuestTrap && sharding.ErrorCode(err) != sharding.CodeGuestDeadline {
					t.Fatalf("grow: %v", err)
				}
				c.wantErr(typ, "sb", "trap", sharding.CodeGuestTrap, "")
				// Three failures in a row: the entity rests.
				c.wantErr(typ, "sb", "count", sharding.CodeBackoff, "keeps failing")
			})
		})
	}
}

// A timer moves with its entity: the member hosting it leaves gracefully, the entity's
// state (with the timer) is saved at the handoff, and the next incarnation on the other
// member re-arms it and it fires there.
func TestTimerMovesWithItsEntity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	nodes := startNodes(t, 2, nil)
	ctx := context.Background()
	const typ = "abitest-rust"
	if _, err := nodes[0].Deploy(ctx, testwasm.RustBytes(t, "abitest-rust"), sharding.TypeSettings{Name: typ, NumberOfShards: 10}); err != nil {
		t.Fatal(err)
	}
	// An entity that lives on node 1, the one that leaves.
	var id string
	for i := 0; id == ""; i++ {
		r, err := nodes[0].Sharding().Ask(ctx, typ, "m"+strconv.Itoa(i), []byte("timer moved 1500 0 wake"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Node == nodes[1].Self().Address {
			id = "m" + strconv.Itoa(i)
		}
	}
	if err := nodes[1].Close(); err != nil {
		t.Fatal(err)
	}
	c := &conformance{t: t, nodes: nodes[:1]}
	c.want(typ, id, "hooks", "activations=2 passivations=1")
	got := c.eventually(typ, id, "events", func(s string) bool { return strings.Contains(s, "1 moved wake") })
	if strings.Count(got, "1 moved wake") != 1 {
		t.Fatalf("events: %q, want the timer once", got)
	}
}

// tell_key and ask_key are optional imports (abi/SPEC.md): every abitest build imports
// them, and a module that never sends with a key imports neither, so that it runs on a
// host without them.
func TestConformanceSendsWithKeysAreOptionalImports(t *testing.T) {
	if testing.Short() {
		t.Skip("builds six modules")
	}
	rt, _ := newTestRuntime(t, nil)
	imports := func(t *testing.T, wasm []byte) map[string]bool {
		m, err := rt.Compile(context.Background(), wasm)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, imp := range m.code.Load().compiled.ImportedFunctions() {
			if mod, name, _ := imp.Import(); mod == abi.ImportModule {
				got[name] = true
			}
		}
		return got
	}
	for _, c := range []struct {
		name   string
		wasm   func(testing.TB) []byte
		tinygo bool
		keys   bool
	}{
		{"abitest-tinygo", func(tb testing.TB) []byte { return testwasm.TinyGoBytes(tb, "abitest") }, true, true},
		{"abitest-go", func(tb testing.TB) []byte { return testwasm.Bytes(tb, "abitest") }, false, true},
		{"abitest-rust", func(tb testing.TB) []byte { return testwasm.RustBytes(tb, "abitest-rust") }, false, true},
		{"counter-tinygo", func(tb testing.TB) []byte { return testwasm.TinyGoBytes(tb, "counter") }, true, false},
		{"counter-go", func(tb testing.TB) []byte { return testwasm.Bytes(tb, "counter") }, false, false},
		{"counter-rust", func(tb testing.TB) []byte { return testwasm.RustBytes(tb, "counter-rust") }, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.tinygo {
				testwasm.RequireTinyGo(t)
			}
			got := imports(t, c.wasm(t))
			if got[abi.ImportTellKey] != c.keys || got[abi.ImportAskKey] != c.keys {
				t.Fatalf("imports %v: tell_key %v, ask_key %v, want %v", got, got[abi.ImportTellKey], got[abi.ImportAskKey], c.keys)
			}
		})
	}
}
