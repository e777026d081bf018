package host

import (
	"context"
	"math/rand"
	"net"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// A guest has no filesystem and no network: WASI gets no preopened directory and no
// sockets. (faulty built by TinyGo has no net package: its dial probe fails as such.)
func TestGuestHasNoFilesystemOrNetwork(t *testing.T) {
	for _, c := range testwasm.GoCompilers {
		t.Run(c.Name, func(t *testing.T) { testGuestHasNoFilesystemOrNetwork(t, c.Bytes(t, "faulty")) })
	}
}

func testGuestHasNoFilesystemOrNetwork(t *testing.T, faulty []byte) {
	rt, _ := newTestRuntime(t, nil)
	m, err := rt.Compile(context.Background(), faulty)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inst, err := m.Instantiate(ctx, "faulty", "sandbox")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, msg := range []string{"read /etc/hostname", "read /proc/self/environ", "read ../../go.mod", "read .", "dial " + ln.Addr().String()} {
		out, err := inst.Receive(ctx, []byte(msg))
		if err != nil || !strings.HasPrefix(string(out), "refused: ") {
			t.Fatalf("%q: %q %v, want refused", msg, out, err)
		}
		t.Logf("%s: %s", msg, out)
	}
}

// Time and randomness come from the runtime's Clock and Rand, so a test can fix them;
// trace_event lands on the span of the message.
func TestHostTimeRandomnessAndTraceEvents(t *testing.T) {
	for _, mod := range v1Modules {
		t.Run(mod.sdk, func(t *testing.T) {
			recorder := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
			defer tp.Shutdown(context.Background())
			fixed := time.Unix(1_700_000_000, 250)
			run := func() (now, random string) {
				rt, _ := newTestRuntime(t, func(c *RuntimeConfig) {
					c.Clock = func() time.Time { return fixed }
					c.Rand = rand.New(rand.NewSource(42))
					c.TracerProvider = tp
				})
				m, err := rt.Compile(context.Background(), mod.wasm(t))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				inst, err := m.Instantiate(ctx, "abitest", "clock")
				if err != nil {
					t.Fatal(err)
				}
				defer inst.Close(ctx)
				reply := func(msg string) string {
					out, err := inst.Receive(ctx, []byte(msg))
					if err != nil {
						t.Fatalf("%q: %v", msg, err)
					}
					return string(out)
				}
				mctx, span := tp.Tracer("test").Start(ctx, "message")
				if _, err := inst.Receive(mctx, []byte("trace checkpoint reached")); err != nil {
					t.Fatal(err)
				}
				span.End()
				return reply("now"), reply("random 8")
			}
			now1, random1 := run()
			now2, random2 := run()
			if now1 != "1700000000000000250 0" || now2 != now1 {
				t.Fatalf("now: %q then %q, want the fixed clock", now1, now2)
			}
			if len(random1) != 16 || random1 != random2 {
				t.Fatalf("random with the same seed: %q then %q", random1, random2)
			}
			found := false
			for _, s := range recorder.Ended() {
				for _, e := range s.Events() {
					found = found || (s.Name() == "message" && e.Name == "checkpoint reached")
				}
			}
			if !found {
				t.Fatal("no trace event on the message's span")
			}
		})
	}
}

// on_passivate tells whether a hook ran: a Go entity without a Passivator answers
// NoHook, so stopping it does not save a state no message changed.
func TestBeforeStopReportsWhetherAHookRan(t *testing.T) {
	rt, _ := newTestRuntime(t, nil)
	ctx := context.Background()
	for name, want := range map[string]bool{"counter": false, "abitest": true} {
		m := compile(t, rt, name)
		inst, err := m.Instantiate(ctx, name, "stop")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inst.Receive(ctx, []byte(map[string]string{"counter": "inc", "abitest": "count"}[name])); err != nil {
			t.Fatal(err)
		}
		if got := inst.BeforeStop(ctx); got != want {
			t.Errorf("%s: BeforeStop = %v, want %v", name, got, want)
		}
		inst.Close(ctx)
	}
}
