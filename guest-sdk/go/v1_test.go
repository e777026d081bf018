package shardhost

import (
	"bytes"
	"errors"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
	"time"
)

// probe runs the function the test gives it for each message.
type probe struct {
	receive     func(ctx *Context, msg []byte) ([]byte, error)
	activate    func(ctx *Context) error
	passivate   func(ctx *Context)
	activations int
}

func (p *probe) Receive(ctx *Context, msg []byte) ([]byte, error) { return p.receive(ctx, msg) }

func (p *probe) OnActivate(ctx *Context) error {
	p.activations++
	if p.activate != nil {
		return p.activate(ctx)
	}
	return nil
}

func (p *probe) OnPassivate(ctx *Context) {
	if p.passivate != nil {
		p.passivate(ctx)
	}
}

var (
	_ Activator  = (*probe)(nil)
	_ Passivator = (*probe)(nil)
)

func newProbe(p *probe) *Harness {
	return NewHarness("probe", "p1", func(string) Entity { return p })
}

func TestHostErrorMatchesSentinels(t *testing.T) {
	for c := CodeError; c <= CodeReadOnly; c++ {
		err := error(&HostError{Code: c, Text: "why"})
		if !errors.Is(err, sentinel(c)) {
			t.Errorf("code %d does not match its sentinel", c)
		}
		if c != CodeTimeout && errors.Is(err, ErrTimeout) {
			t.Errorf("code %d matches ErrTimeout", c)
		}
		var he *HostError
		if !errors.As(err, &he) || he.Code != c || he.Text != "why" {
			t.Errorf("errors.As: %v", he)
		}
	}
	if got := (&HostError{Code: CodeTimeout, Text: "5s"}).Error(); got != "shardhost: timeout: 5s" {
		t.Errorf("Error() = %q", got)
	}
	if got := Code(42).String(); got != "code 42" {
		t.Errorf("String() = %q", got)
	}
	if codeError(CodeOK, []byte("x")) != nil {
		t.Error("CodeOK gives an error")
	}
}

func TestConsistencyStrings(t *testing.T) {
	for c, want := range map[Consistency]string{
		{}: "local", Local: "local", Majority: "majority", All: "all",
		MajorityPlus(2): "majority+2", Replicas(3): "3",
	} {
		if c.String() != want {
			t.Errorf("%#v: %q, want %q", c, c.String(), want)
		}
		if !validConsistency(c.String()) {
			t.Errorf("%q is not valid for the harness", c)
		}
	}
	for _, bad := range []string{"most", "majority+", "majority+x", "0", "-1", "majority+-1"} {
		if validConsistency(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestKindAndSender(t *testing.T) {
	var got []string
	p := &probe{receive: func(ctx *Context, msg []byte) ([]byte, error) {
		got = append(got, ctx.Kind().String()+" "+ctx.Sender()+" "+string(msg))
		return nil, nil
	}}
	p.activate = func(ctx *Context) error {
		got = append(got, "activate "+ctx.Kind().String()+" "+ctx.Sender())
		return ctx.StartTimer("tick", []byte("t"), time.Second)
	}
	h := newProbe(p)
	h.Send([]byte("a"))
	h.SendFrom("other/9", []byte("b"))
	h.FireTimer("tick")
	h.UpdateData("k", TypeFlag, "enable")
	if _, err := h.DeliverChanged("k"); !errors.Is(err, ErrNotSubscribed) {
		t.Fatalf("DeliverChanged unsubscribed: %v", err)
	}
	h.subs["k"] = true
	h.DeliverChanged("k")
	want := "activate message |message  a|message other/9 b|timer tick t|changed k true"
	if s := strings.Join(got, "|"); s != want {
		t.Fatalf("got  %q\nwant %q", s, want)
	}
	if _, err := h.FireTimer("tick"); !errors.Is(err, ErrNoTimer) {
		t.Fatalf("one-shot timer fired twice: %v", err)
	}
}

func TestTellAskForward(t *testing.T) {
	p := &probe{receive: func(ctx *Context, msg []byte) ([]byte, error) {
		f := strings.Fields(string(msg))
		switch f[0] {
		case "tell":
			return nil, ctx.Tell(f[1], f[2], []byte(f[3]))
		case "ask":
			return ctx.Ask(f[1], f[2], []byte(f[3]), 1500*time.Microsecond)
		case "fwd":
			if err := ctx.Forward(f[1], f[2]); err != nil {
				return nil, err
			}
			if len(f) > 3 {
				return nil, errors.New("changed my mind")
			}
			return []byte("dropped"), nil
		}
		return nil, errors.New("?")
	}}
	h := newProbe(p)
	if _, err := h.Send([]byte("tell room r1 hi")); err != nil {
		t.Fatal(err)
	}
	if len(h.Tells) != 1 || h.Tells[0].Type != "room" || h.Tells[0].ID != "r1" || string(h.Tells[0].Msg) != "hi" || h.Tells[0].Sender != "probe/p1" {
		t.Fatalf("tells %+v", h.Tells)
	}
	_, err := h.Send([]byte("ask room r1 hi"))
	if !errors.Is(err, ErrUnavailable) && !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("ask without Asker: %v", err)
	}
	h.Asker = func(typ, id string, msg []byte, timeout time.Duration) ([]byte, error) {
		switch id {
		case "slow":
			return nil, &HostError{Code: CodeTimeout}
		case "bad":
			return nil, errors.New("no such thing")
		}
		return []byte(typ + "/" + id + " got " + string(msg) + " within " + timeout.String()), nil
	}
	if out, err := h.Send([]byte("ask room r1 hi")); err != nil || string(out) != "room/r1 got hi within 2ms" {
		t.Fatalf("ask: %q %v", out, err)
	}
	if len(h.Asks) != 2 || h.Asks[1].Timeout != 2*time.Millisecond {
		t.Fatalf("asks %+v", h.Asks)
	}
	// The errors reach the entity as HostErrors.
	p.receive = func(ctx *Context, msg []byte) ([]byte, error) {
		_, err := ctx.Ask("x", string(msg), nil, 0)
		var he *HostError
		if errors.As(err, &he) {
			return []byte(he.Code.String() + ": " + he.Text), nil
		}
		return nil, err
	}
	for id, want := range map[string]string{"slow": "timeout: ", "bad": "entity error: no such thing", "": "bad request: empty entity type or ID"} {
		if out, err := h.Send([]byte(id)); err != nil || string(out) != want {
			t.Errorf("ask %q: %q %v, want %q", id, out, err, want)
		}
	}
	p.receive = func(ctx *Context, msg []byte) ([]byte, error) {
		_, err := ctx.Ask("probe", "p1", nil, 0)
		if !errors.Is(err, ErrAskCycle) {
			return nil, err
		}
		return []byte("cycle"), nil
	}
	if out, err := h.Send(nil); err != nil || string(out) != "cycle" {
		t.Fatalf("ask self: %q %v", out, err)
	}

	// Forwards: recorded with the original sender; Asker's answer is the reply.
	p.receive = func(ctx *Context, msg []byte) ([]byte, error) {
		f := strings.Fields(string(msg))
		if err := ctx.Forward(f[1], f[2]); err != nil {
			return nil, err
		}
		if len(f) > 3 {
			return nil, errors.New("changed my mind")
		}
		return []byte("dropped"), nil
	}
	if out, err := h.SendFrom("cli/1", []byte("fwd room r2")); err != nil || string(out) != "room/r2 got fwd room r2 within 0s" {
		t.Fatalf("forward: %q %v", out, err)
	}
	if _, err := h.Send([]byte("fwd room r3 fail")); err == nil || err.Error() != "changed my mind" {
		t.Fatalf("failed forward: %v", err)
	}
	if len(h.Forwards) != 1 || h.Forwards[0].Sender != "cli/1" || h.Forwards[0].ID != "r2" || string(h.Forwards[0].Msg) != "fwd room r2" {
		t.Fatalf("forwards %+v", h.Forwards)
	}
	// A timer's message is not forwarded.
	p.activate = nil
	p.receive = func(ctx *Context, msg []byte) ([]byte, error) {
		if ctx.Kind() == KindTimer {
			return nil, ctx.Forward("room", "r1")
		}
		return nil, ctx.StartTimer("t", nil, 0)
	}
	h.Send(nil)
	if _, err := h.FireTimer("t"); err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Fatalf("forward of a timer: %v", err)
	}
}

func TestNotAllowedInOnPassivate(t *testing.T) {
	var got error
	p := &probe{receive: func(*Context, []byte) ([]byte, error) { return nil, nil }}
	p.passivate = func(ctx *Context) {
		got = ctx.Tell("a", "b", nil)
		ctx.Passivate() // ignored, no trap
		ctx.Log(LevelInfo, "bye "+ctx.EntityID()+" "+strconv.Itoa(int(ctx.Kind())))
	}
	h := newProbe(p)
	h.Send(nil)
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got, ErrNotAllowed) {
		t.Fatalf("tell in OnPassivate: %v", got)
	}
	if len(h.Logs) != 1 || h.Logs[0] != "INFO bye p1 0" {
		t.Fatalf("logs %q", h.Logs)
	}
}

func TestDDataHelpers(t *testing.T) {
	var ctx *Context
	p := &probe{receive: func(c *Context, msg []byte) ([]byte, error) { ctx = c; return nil, nil }}
	h := newProbe(p)
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// Helpers are used during a message; the test calls them from inside one.
	run := func(f func()) {
		t.Helper()
		p.receive = func(c *Context, msg []byte) ([]byte, error) { ctx = c; f(); return nil, nil }
		if _, err := h.Send(nil); err != nil {
			t.Fatal(err)
		}
	}
	run(func() {
		n, err := ctx.PNCounter("pn").Value(Local)
		check("pn value absent", err)
		if n != 0 {
			t.Errorf("absent counter %d", n)
		}
		n, err = ctx.PNCounter("pn").Incr(5, Majority)
		check("pn incr", err)
		n, err = ctx.PNCounter("pn").Incr(-7, Majority)
		check("pn incr -7", err)
		if n != -2 {
			t.Errorf("pn %d", n)
		}
		n, err = ctx.PNCounter("pn").Decr(-3, All)
		check("pn decr -3", err)
		if n != 1 {
			t.Errorf("pn %d", n)
		}
		if n, _ := ctx.PNCounter("pn").Value(Replicas(2)); n != 1 {
			t.Errorf("pn read %d", n)
		}
		u, err := ctx.GCounter("g").Incr(3, Local)
		check("gcounter", err)
		if u, _ = ctx.GCounter("g").Incr(4, MajorityPlus(1)); u != 7 {
			t.Errorf("gcounter %d", u)
		}
		if v, _ := ctx.GCounter("g").Value(Local); v != 7 {
			t.Errorf("gcounter read %d", v)
		}

		s, err := ctx.ORSet("or").Add("b c", Majority)
		check("orset add", err)
		s, _ = ctx.ORSet("or").Add("a", Majority)
		if strings.Join(s, "|") != "a|b c" {
			t.Errorf("orset %q", s)
		}
		s, _ = ctx.ORSet("or").Remove("a", Local)
		if strings.Join(s, "|") != "b c" {
			t.Errorf("orset after remove %q", s)
		}
		check("orset clear", ctx.ORSet("or").Clear(Local))
		if s, err := ctx.ORSet("or").Elements(Local); err != nil || len(s) != 0 {
			t.Errorf("orset after clear %q %v", s, err)
		}
		ctx.GSet("gs").Add("x", Local)
		if s, _ := ctx.GSet("gs").Elements(Local); len(s) != 1 || s[0] != "x" {
			t.Errorf("gset %q", s)
		}

		m, err := ctx.LWWMap("m").Put("k1", "v 1", Majority)
		check("lwwmap put", err)
		m, _ = ctx.LWWMap("m").Put("k2", "", Majority)
		if len(m) != 2 || m["k1"] != "v 1" || m["k2"] != "" {
			t.Errorf("lwwmap %q", m)
		}
		if _, err := ctx.LWWMap("m").Put("two words", "v", Local); !errors.Is(err, ErrBadRequest) {
			t.Errorf("lwwmap key with a space: %v", err)
		}
		m, _ = ctx.LWWMap("m").Remove("k2", Local)
		if v, ok, err := ctx.LWWMap("m").Get("k1", Local); err != nil || !ok || v != "v 1" || len(m) != 1 {
			t.Errorf("lwwmap get: %q %v %v %q", v, ok, err, m)
		}
		if _, ok, _ := ctx.LWWMap("m").Get("k2", Local); ok {
			t.Error("removed entry found")
		}

		if _, ok, err := ctx.LWWRegister("r").Get(Local); ok || err != nil {
			t.Errorf("register absent: %v %v", ok, err)
		}
		check("register set", ctx.LWWRegister("r").Set("hello world", Local))
		if v, ok, err := ctx.LWWRegister("r").Get(Local); v != "hello world" || !ok || err != nil {
			t.Errorf("register: %q %v %v", v, ok, err)
		}
		if on, _ := ctx.Flag("f").Enabled(Local); on {
			t.Error("absent flag enabled")
		}
		check("flag", ctx.Flag("f").Enable(All))
		if on, _ := ctx.Flag("f").Enabled(Local); !on {
			t.Error("flag not enabled")
		}

		// Raw calls and their errors.
		if _, err := ctx.DDataGet("none", Local, 0); !errors.Is(err, ErrNotFound) {
			t.Errorf("get absent: %v", err)
		}
		if _, err := ctx.DDataUpdate("pn", TypeGCounter, "incr", Local, 0); !errors.Is(err, ErrTypeMismatch) {
			t.Errorf("type mismatch: %v", err)
		}
		if _, err := ctx.DDataUpdate("x", TypePNCounter, "double", Local, 0); !errors.Is(err, ErrBadRequest) {
			t.Errorf("bad op: %v", err)
		}
		if _, err := ctx.DDataUpdate("x", "tree", "grow", Local, 0); !errors.Is(err, ErrBadRequest) {
			t.Errorf("bad type: %v", err)
		}
		if _, err := ctx.DDataGet("pn", ConsistencyOf("most"), 0); !errors.Is(err, ErrBadRequest) {
			t.Errorf("bad consistency: %v", err)
		}
		check("delete", ctx.DDataDelete("pn", Majority, time.Second))
		if _, err := ctx.PNCounter("pn").Value(Local); !errors.Is(err, ErrDeleted) {
			t.Errorf("read deleted: %v", err)
		}
		if _, err := ctx.PNCounter("pn").Incr(1, Local); !errors.Is(err, ErrDeleted) {
			t.Errorf("update deleted: %v", err)
		}
		if err := ctx.DDataDelete("pn", Local, 0); !errors.Is(err, ErrDeleted) {
			t.Errorf("delete deleted: %v", err)
		}
	})
	if v, err := h.Data("m"); err != nil || string(v) != `{"k1":"v 1"}` {
		t.Fatalf("Data: %s %v", v, err)
	}
	if v, err := h.UpdateData("or", TypeORSet, "add z"); err != nil || string(v) != `["z"]` {
		t.Fatalf("UpdateData: %s %v", v, err)
	}

	// Injected faults: a timed-out update is applied all the same.
	h.DDataFault = func(op, key string) error {
		if key == "slow" {
			return &HostError{Code: CodeTimeout, Text: "not acknowledged"}
		}
		return nil
	}
	run(func() {
		if _, err := ctx.PNCounter("slow").Incr(2, All); !errors.Is(err, ErrTimeout) {
			t.Errorf("timeout: %v", err)
		}
		if _, err := ctx.PNCounter("slow").Value(All); !errors.Is(err, ErrTimeout) {
			t.Errorf("read timeout: %v", err)
		}
	})
	if v, _ := h.Data("slow"); string(v) != "2" {
		t.Fatalf("timed-out update not applied: %s", v)
	}
}

func TestSubscriptionsAndChanged(t *testing.T) {
	var topic string
	p := &probe{}
	p.activate = func(ctx *Context) error { return ctx.Subscribe("topics") }
	p.receive = func(ctx *Context, msg []byte) ([]byte, error) {
		switch {
		case ctx.Kind() == KindChanged && ctx.Sender() == "topics":
			m, err := ParseStringMap(msg)
			if err != nil {
				return nil, err
			}
			topic = m["r1"]
		case string(msg) == "unsub":
			return nil, ctx.Unsubscribe("topics")
		}
		return nil, nil
	}
	h := newProbe(p)
	if err := h.Activate(); err != nil {
		t.Fatal(err)
	}
	if !h.Subscribed("topics") {
		t.Fatal("not subscribed")
	}
	if _, err := h.DeliverChanged("topics"); !errors.Is(err, ErrNotSubscribed) {
		t.Fatalf("no value yet: %v", err)
	}
	h.UpdateData("topics", TypeLWWMap, "put r1 cats and dogs")
	if _, err := h.DeliverChanged("topics"); err != nil || topic != "cats and dogs" {
		t.Fatalf("changed: %q %v", topic, err)
	}
	h.Send([]byte("unsub"))
	if h.Subscribed("topics") {
		t.Fatal("still subscribed")
	}
}

func TestTimers(t *testing.T) {
	var fired []string
	p := &probe{receive: func(ctx *Context, msg []byte) ([]byte, error) {
		if ctx.Kind() == KindTimer {
			fired = append(fired, ctx.Sender()+":"+string(msg)+"@"+ctx.Now().Sub(HarnessEpoch).String())
			return nil, nil
		}
		f := strings.Fields(string(msg))
		switch f[0] {
		case "once":
			return nil, ctx.StartTimer(f[1], []byte(f[1]), 1500*time.Microsecond)
		case "every":
			return nil, ctx.StartRepeatingTimer(f[1], []byte(f[1]), time.Second, 3*time.Second)
		case "cancel":
			return []byte(strconv.FormatBool(ctx.CancelTimer(f[1]))), nil
		case "bad":
			return nil, ctx.StartRepeatingTimer("b", nil, time.Second, 0)
		case "long":
			return nil, ctx.StartTimer(strings.Repeat("n", MaxTimerName+1), nil, 0)
		case "many":
			for i := 0; i < MaxTimers; i++ {
				if err := ctx.StartTimer("m"+strconv.Itoa(i), nil, time.Hour); err != nil {
					return nil, err
				}
			}
			if err := ctx.StartTimer("m0", nil, time.Hour); err != nil { // a replacement
				return nil, err
			}
			return nil, ctx.StartTimer("one too many", nil, time.Hour)
		}
		return nil, nil
	}}
	h := newProbe(p)
	send(t, h, "once a", "")
	send(t, h, "every b", "")
	if tm, ok := h.Timer("a"); !ok || tm.Delay != 2*time.Millisecond || tm.Interval != 0 || !tm.Due.Equal(HarnessEpoch.Add(2*time.Millisecond)) {
		t.Fatalf("timer a: %+v %v", tm, ok)
	}
	if ts := h.Timers(); len(ts) != 2 || ts[0].Name != "a" || ts[1].Name != "b" || ts[1].Interval != 3*time.Second {
		t.Fatalf("timers %+v", ts)
	}
	if names, err := h.FireDue(); err != nil || len(names) != 0 {
		t.Fatalf("nothing due yet: %v %v", names, err)
	}
	h.Advance(time.Second)
	if names, err := h.FireDue(); err != nil || strings.Join(names, ",") != "a,b" {
		t.Fatalf("due: %v %v", names, err)
	}
	h.Advance(3 * time.Second)
	h.FireDue()
	send(t, h, "cancel b", "true")
	send(t, h, "cancel b", "false")
	h.Advance(time.Hour)
	h.FireDue()
	if got := strings.Join(fired, " "); got != "a:a@1s b:b@1s b:b@4s" {
		t.Fatalf("fired %q", got)
	}
	for _, bad := range []string{"bad", "long", "many"} {
		if _, err := h.Send([]byte(bad)); err == nil || !strings.Contains(err.Error(), "bad request") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if len(h.Timers()) != MaxTimers {
		t.Errorf("%d timers", len(h.Timers()))
	}
}

func TestTimeRandomTrace(t *testing.T) {
	var wall time.Time
	var mono time.Duration
	var rnd []byte
	p := &probe{receive: func(ctx *Context, msg []byte) ([]byte, error) {
		wall, mono = ctx.Now(), ctx.Monotonic()
		rnd = make([]byte, len(msg))
		ctx.Random(rnd)
		ctx.TraceEvent(string(msg))
		return nil, nil
	}}
	h := newProbe(p)
	h.Send(make([]byte, 3))
	if !wall.Equal(HarnessEpoch) || mono != 0 {
		t.Fatalf("start: %v %v", wall, mono)
	}
	first := append([]byte(nil), rnd...)
	h.Advance(1500 * time.Millisecond)
	h.Send(make([]byte, 3))
	if !wall.Equal(HarnessEpoch.Add(1500*time.Millisecond)) || mono != 1500*time.Millisecond {
		t.Fatalf("after Advance: %v %v", wall, mono)
	}
	if bytes.Equal(first, rnd) {
		t.Fatal("random repeats")
	}
	h.Seed(1)
	h.Send(make([]byte, 3))
	if !bytes.Equal(first, rnd) {
		t.Fatal("the same seed gives other bytes")
	}
	h.SetTime(time.Unix(7, 0))
	h.Send(make([]byte, MaxRandom+10)) // Random splits calls at MaxRandom
	if wall.Unix() != 7 || bytes.Equal(rnd[MaxRandom:], make([]byte, 10)) {
		t.Fatalf("SetTime or a long Random: %v", wall)
	}
	if len(h.Traces) != 4 || len(h.Traces[3]) != 256 {
		t.Fatalf("traces %d, last %d bytes", len(h.Traces), len(h.Traces[3]))
	}
}

func TestLifecycle(t *testing.T) {
	var events []string
	created := 0
	fail := true
	f := func(string) Entity {
		created++
		n := created
		p := &probe{}
		p.receive = func(ctx *Context, msg []byte) ([]byte, error) {
			events = append(events, "receive "+strconv.Itoa(n)+" "+string(msg))
			return nil, nil
		}
		p.activate = func(ctx *Context) error {
			events = append(events, "activate "+strconv.Itoa(n))
			if fail {
				fail = false
				return errors.New("not yet")
			}
			return nil
		}
		p.passivate = func(ctx *Context) { events = append(events, "passivate "+strconv.Itoa(n)) }
		return p
	}
	h := NewHarness("life", "1", f)
	if _, err := h.Send([]byte("a")); err == nil || err.Error() != "not yet" {
		t.Fatalf("failed activation: %v", err)
	}
	h.Send([]byte("b"))
	h.Send([]byte("c"))
	if err := h.Restart(); err != nil { // not a Snapshotter: the entity goes on (transparent)
		t.Fatal(err)
	}
	h.Send([]byte("d"))
	want := "activate 1|activate 2|receive 2 b|receive 2 c|passivate 2|activate 2|receive 2 d"
	if got := strings.Join(events, "|"); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}

	// A Snapshotter is restored into a new entity; a failed activation restores again.
	tf := func(string) Entity { return &tally{} }
	h = NewHarness("tally", "t", tf)
	send(t, h, "add 4", "4")
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	send(t, h, "add 1", "5")
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
	h.d.entity = nil // as after a failed activation
	send(t, h, "sum", "5")
}

func TestCallBudget(t *testing.T) {
	p := &probe{receive: func(ctx *Context, msg []byte) ([]byte, error) {
		n, _ := strconv.Atoi(string(msg))
		for i := 0; i < n; i++ {
			ctx.Monotonic()
		}
		return nil, nil
	}}
	h := newProbe(p)
	if _, err := h.Send([]byte("10000")); err != nil {
		t.Fatal(err)
	}
	h.CallBudget = 5
	if _, err := h.Send([]byte("5")); err != nil {
		t.Fatal(err)
	}
	if !canRecover {
		t.Log("not run: recover does not stop a panic here")
		return
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "budget of 5") {
			t.Fatalf("recovered %v", r)
		}
	}()
	h.Send([]byte("6"))
}

// TellWithKey and AskWithKey: the harness records each send's key; a key over the cap or
// not UTF-8 is refused as the host refuses it, sending nothing.
func TestSendsWithIdempotencyKeys(t *testing.T) {
	p := &probe{receive: func(ctx *Context, msg []byte) ([]byte, error) {
		verb, key, _ := strings.Cut(string(msg), " ")
		switch verb {
		case "tell":
			return nil, ctx.TellWithKey("ledger", "l1", []byte("credit 5"), key)
		case "ask":
			return ctx.AskWithKey("ledger", "l1", []byte("debit 5"), key, time.Second)
		}
		return nil, errors.New("?")
	}}
	h := newProbe(p)
	h.Asker = func(typ, id string, msg []byte, timeout time.Duration) ([]byte, error) {
		return []byte(typ + "/" + id + " " + string(msg)), nil
	}
	for i := 0; i < 2; i++ {
		if _, err := h.Send([]byte("tell pay-7")); err != nil {
			t.Fatal(err)
		}
		if out, err := h.Send([]byte("ask pay-8")); err != nil || string(out) != "ledger/l1 debit 5" {
			t.Fatalf("AskWithKey: %q %v", out, err)
		}
	}
	if _, err := h.Send([]byte("tell ")); err != nil {
		t.Fatal(err)
	}
	if len(h.Tells) != 3 || len(h.Asks) != 2 {
		t.Fatalf("tells %+v, asks %+v", h.Tells, h.Asks)
	}
	for k, want := range []string{"pay-7", "pay-7", ""} {
		if e := h.Tells[k]; e.Key != want || e.Type != "ledger" || e.ID != "l1" || string(e.Msg) != "credit 5" || e.Sender != "probe/p1" {
			t.Errorf("tell %d: %+v, want the key %q", k, e, want)
		}
	}
	for _, e := range h.Asks {
		if e.Key != "pay-8" || e.Timeout != time.Second || string(e.Msg) != "debit 5" {
			t.Errorf("ask %+v, want the key pay-8", e)
		}
	}
	// A plain tell or ask has no key.
	p.receive = func(ctx *Context, msg []byte) ([]byte, error) {
		if err := ctx.Tell("ledger", "l1", msg); err != nil {
			return nil, err
		}
		return ctx.Ask("ledger", "l1", msg, 0)
	}
	if _, err := h.Send([]byte("x")); err != nil || h.Tells[3].Key != "" || h.Asks[2].Key != "" {
		t.Fatalf("plain sends: %v, %+v, %+v", err, h.Tells[3], h.Asks[2])
	}
	// Keys the host refuses: over MaxIdempotencyKey bytes, or not UTF-8.
	p.receive = func(ctx *Context, msg []byte) ([]byte, error) {
		verb, key := msg[0], string(msg[1:])
		if verb == 't' {
			return nil, ctx.TellWithKey("ledger", "l1", nil, key)
		}
		return ctx.AskWithKey("ledger", "l1", nil, key, 0)
	}
	for _, key := range []string{strings.Repeat("k", MaxIdempotencyKey+1), "\xff\xfe"} {
		for _, verb := range "ta" {
			_, err := h.Send([]byte(string(verb) + key))
			var he *HostError
			if !errors.As(err, &he) || he.Code != CodeBadRequest || !strings.Contains(he.Text, "idempotency key") {
				t.Errorf("%c with a key of %d bytes: %v", verb, len(key), err)
			}
		}
	}
	if len(h.Tells) != 4 || len(h.Asks) != 3 {
		t.Fatalf("refused sends were recorded: %d tells, %d asks", len(h.Tells), len(h.Asks))
	}
	long := strings.Repeat("k", MaxIdempotencyKey)
	for _, verb := range "ta" {
		if _, err := h.Send([]byte(string(verb) + long)); err != nil {
			t.Errorf("%c with a key of %d bytes: %v", verb, MaxIdempotencyKey, err)
		}
	}
	if h.Tells[4].Key != long || h.Asks[3].Key != long {
		t.Fatalf("keys of %d bytes: %+v %+v", MaxIdempotencyKey, h.Tells[4], h.Asks[3])
	}
	// Not allowed in on_passivate, as Tell and Ask.
	p.passivate = func(ctx *Context) {
		if err := ctx.TellWithKey("ledger", "l1", nil, "k"); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("TellWithKey in OnPassivate: %v", err)
		}
		if _, err := ctx.AskWithKey("ledger", "l1", nil, "k", 0); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("AskWithKey in OnPassivate: %v", err)
		}
	}
	if err := h.Restart(); err != nil {
		t.Fatal(err)
	}
}

// TestConstantsMatchABI checks the SDK's copies of abi/abi.go's constants: the SDK is a
// module of its own without dependencies, so it cannot import the abi package.
func TestConstantsMatchABI(t *testing.T) {
	src, err := parser.ParseFile(token.NewFileSet(), "../../abi/abi.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	abi := map[string]ast.Expr{}
	for _, decl := range src.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					abi[name.Name] = vs.Values[i]
				}
			}
		}
	}
	sdk := map[string]int64{
		"MaxTimerName": MaxTimerName, "MaxTimerMessage": MaxTimerMessage, "MaxTimers": MaxTimers,
		"MaxRandom": MaxRandom, "DefaultCallBudget": DefaultCallBudget, "MaxMessageSize": maxMessageSize,
		"KindMessage": int64(KindMessage), "KindTimer": int64(KindTimer), "KindChanged": int64(KindChanged), "KindHTTP": int64(KindHTTP),
		"ClockWall": int64(clockWall), "ClockMonotonic": int64(clockMonotonic),
		"CodeOK": int64(CodeOK), "CodeError": int64(CodeError), "CodeNotFound": int64(CodeNotFound),
		"CodeDeleted": int64(CodeDeleted), "CodeTimeout": int64(CodeTimeout), "CodeAskCycle": int64(CodeAskCycle),
		"CodeUnavailable": int64(CodeUnavailable), "CodeBadRequest": int64(CodeBadRequest),
		"CodeNotAllowed": int64(CodeNotAllowed), "CodeEntityError": int64(CodeEntityError),
		"CodeTypeMismatch": int64(CodeTypeMismatch), "Version": ABIVersion, "MaxIdempotencyKey": MaxIdempotencyKey,
		"CodeEgressDenied": int64(CodeEgressDenied), "CodeEgressTooLarge": int64(CodeEgressTooLarge),
		"CodeEgressFailed": int64(CodeEgressFailed), "CodeEgressRateLimited": int64(CodeEgressRateLimited), "CodeReadOnly": int64(CodeReadOnly),
	}
	for name, v := range sdk {
		expr, ok := abi[name]
		if !ok {
			t.Errorf("abi.go has no constant %s", name)
			continue
		}
		if want, ok := constant.Int64Val(evalConst(t, expr)); !ok || want != v {
			t.Errorf("abi.%s is %d, the SDK has %d", name, want, v)
		}
	}
}
