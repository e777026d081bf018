package cluster

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardhost/shardhost/internal/testutil"
)

// newTestInmem attaches a transport at addr to n, failing the test on error.
func newTestInmem(t testing.TB, n *InmemNetwork, addr string, h FrameHandler) *InmemTransport {
	t.Helper()
	tr, err := n.NewTransport(addr, h)
	if err != nil {
		t.Fatalf("NewTransport(%q): %v", addr, err)
	}
	return tr
}

func TestInmemOrderBothWays(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const n = 5000
	net := NewInmemNetwork()
	ra, rb := newSeqRecorder(n), newSeqRecorder(n)
	a := newTestInmem(t, net, "a", ra.handle)
	defer a.Close()
	b := newTestInmem(t, net, "b", rb.handle)
	defer b.Close()
	errs := make(chan error, 2)
	go func() { errs <- sendSeq(a, "b", n) }()
	go func() { errs <- sendSeq(b, "a", n) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ra.wait(t, 10*time.Second)
	rb.wait(t, 10*time.Second)
	if s := a.Stats(); s.FramesSent != n || s.FramesReceived != n || s.FramesDropped != 0 || s.BytesSent != b.Stats().BytesReceived {
		t.Fatalf("stats %+v", s)
	}
}

func TestInmemSendIsAsynchronous(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	net := NewInmemNetwork()
	release := make(chan struct{})
	got := make(chan *Frame, 1)
	b := newTestInmem(t, net, "b", func(f *Frame) { <-release; got <- f })
	defer b.Close()
	a := newTestInmem(t, net, "a", func(*Frame) {})
	defer a.Close()
	// Send returns while the handler is blocked: it does not run on this goroutine.
	if err := a.Send("b", &Frame{Kind: FrameOneWay, Topic: "x"}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if f := recvFrame(t, got, 5*time.Second); f.From != "a" || f.Topic != "x" {
		t.Fatalf("got %+v", f)
	}
}

// expectOnly receives the next frame on ch and checks that it is topic: frames
// that should have been dropped would come first.
func expectOnly(t testing.TB, ch <-chan *Frame, topic string) {
	t.Helper()
	f := recvFrame(t, ch, 5*time.Second)
	if f.Topic != topic {
		t.Fatalf("got frame %q, want %q (a dropped frame was delivered?)", f.Topic, topic)
	}
}

func TestInmemDisconnectReconnect(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	net := NewInmemNetwork()
	ha, cha := chanHandler(16)
	hb, chb := chanHandler(16)
	a := newTestInmem(t, net, "a", ha)
	defer a.Close()
	b := newTestInmem(t, net, "b", hb)
	defer b.Close()

	net.Disconnect("a", "b")
	// Dropped silently in both directions.
	if err := a.Send("b", &Frame{Kind: FrameOneWay, Topic: "lost"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Send("a", &Frame{Kind: FrameOneWay, Topic: "lost"}); err != nil {
		t.Fatal(err)
	}
	if a.Stats().FramesDropped != 1 || b.Stats().FramesDropped != 1 {
		t.Fatalf("drops not counted: a %+v b %+v", a.Stats(), b.Stats())
	}
	net.Reconnect("b", "a")
	if err := a.Send("b", &Frame{Kind: FrameOneWay, Topic: "kept"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Send("a", &Frame{Kind: FrameOneWay, Topic: "kept"}); err != nil {
		t.Fatal(err)
	}
	expectOnly(t, chb, "kept")
	expectOnly(t, cha, "kept")
}

func TestInmemDisconnectDropsQueuedFrames(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	net := NewInmemNetwork()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	got := make(chan *Frame, 16)
	b := newTestInmem(t, net, "b", func(f *Frame) {
		if f.Topic == "block" {
			entered <- struct{}{}
			<-release
		}
		got <- f
	})
	defer b.Close()
	a := newTestInmem(t, net, "a", func(*Frame) {})
	defer a.Close()
	c := newTestInmem(t, net, "c", func(*Frame) {})
	defer c.Close()

	if err := c.Send("b", &Frame{Kind: FrameOneWay, Topic: "block"}); err != nil {
		t.Fatal(err)
	}
	<-entered
	if err := a.Send("b", &Frame{Kind: FrameOneWay, Topic: "queued"}); err != nil {
		t.Fatal(err)
	}
	net.Disconnect("a", "b")
	if err := c.Send("b", &Frame{Kind: FrameOneWay, Topic: "marker"}); err != nil {
		t.Fatal(err)
	}
	close(release)
	expectOnly(t, got, "block")
	expectOnly(t, got, "marker")
	if d := a.Stats().FramesDropped; d != 1 {
		t.Fatalf("a's dropped = %d, want 1 (dropped at delivery)", d)
	}
}

func TestInmemPartitionHeal(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	net := NewInmemNetwork()
	addrs := []string{"a", "b", "c", "d", "e"}
	trs := map[string]*InmemTransport{}
	chans := map[string]chan *Frame{}
	for _, addr := range addrs {
		h, ch := chanHandler(64)
		trs[addr] = newTestInmem(t, net, addr, h)
		defer trs[addr].Close()
		chans[addr] = ch
	}
	// d and e are in no group: they form one of their own.
	net.Partition([]string{"a", "b"}, []string{"c"})
	reach := map[[2]string]bool{
		{"a", "b"}: true, {"b", "a"}: true, {"d", "e"}: true, {"e", "d"}: true,
	}
	check := func(healed bool) {
		t.Helper()
		for _, from := range addrs {
			for _, to := range addrs {
				if from == to {
					continue
				}
				if err := trs[from].Send(to, &Frame{Kind: FrameOneWay, Topic: from}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// A marker from each node to itself follows everything sent to it.
		for _, to := range addrs {
			_ = trs[to].Send(to, &Frame{Kind: FrameOneWay, Topic: "marker"})
		}
		for _, to := range addrs {
			seen := map[string]bool{}
			for f := recvFrame(t, chans[to], 5*time.Second); f.Topic != "marker"; f = recvFrame(t, chans[to], 5*time.Second) {
				seen[f.Topic] = true
			}
			for _, from := range addrs {
				if from == to {
					continue
				}
				if want := healed || reach[[2]string{from, to}]; seen[from] != want {
					t.Errorf("healed=%v: %s→%s delivered=%v, want %v", healed, from, to, seen[from], want)
				}
			}
		}
	}
	check(false)
	net.Disconnect("a", "c")
	net.Heal()
	check(true)
}

func TestInmemQueueFull(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	net := NewInmemNetwork()
	net.SetQueueSize(4)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	b := newTestInmem(t, net, "b", func(f *Frame) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	})
	a := newTestInmem(t, net, "a", func(*Frame) {})
	defer a.Close()
	if err := a.Send("b", &Frame{Kind: FrameOneWay}); err != nil {
		t.Fatal(err)
	}
	<-entered // the handler holds the first frame; the queue is empty
	for i := range 4 {
		if err := a.Send("b", &Frame{Kind: FrameOneWay}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := a.Send("b", &Frame{Kind: FrameOneWay}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Send to a full queue = %v, want ErrQueueFull", err)
	}
	close(release)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if d := a.Stats().FramesDropped; d < 1 {
		t.Fatalf("FramesDropped = %d", d)
	}
}

func TestInmemCodecLimits(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	net := NewInmemNetwork()
	net.SetMaxFrameSize(100)
	h, ch := chanHandler(4)
	a := newTestInmem(t, net, "a", h)
	defer a.Close()
	if err := a.Send("a", &Frame{Kind: FrameOneWay, Body: make([]byte, 200)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize: %v, want ErrFrameTooLarge", err)
	}
	if err := a.Send("a", &Frame{Kind: 0}); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("bad kind: %v, want ErrMalformedFrame", err)
	}
	body := []byte("mutable")
	if err := a.Send("a", &Frame{Kind: FrameOneWay, Body: body}); err != nil {
		t.Fatal(err)
	}
	body[0] = 'M' // the frame went through the codec: the receiver has its own copy
	if f := recvFrame(t, ch, 5*time.Second); string(f.Body) != "mutable" || f.From != "a" {
		t.Fatalf("got %+v", f)
	}
}

func TestInmemAddressesAndClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	net := NewInmemNetwork()
	a := newTestInmem(t, net, "a", func(*Frame) {})
	if _, err := net.NewTransport("a", func(*Frame) {}); err == nil {
		t.Fatal("NewTransport accepted an address in use")
	}
	if _, err := net.NewTransport("", func(*Frame) {}); err == nil {
		t.Fatal("NewTransport accepted an empty address")
	}
	if _, err := net.NewTransport("z", nil); err == nil {
		t.Fatal("NewTransport accepted a nil handler")
	}
	// An unknown address drops silently, and counts.
	if err := a.Send("nowhere", &Frame{Kind: FrameOneWay}); err != nil {
		t.Fatal(err)
	}
	if d := a.Stats().FramesDropped; d != 1 {
		t.Fatalf("FramesDropped = %d, want 1", d)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Send("a", &Frame{Kind: FrameOneWay}); !errors.Is(err, ErrTransportClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
	// The address is free again.
	a2 := newTestInmem(t, net, "a", func(*Frame) {})
	defer a2.Close()
}

func TestInmemDisconnectOneWay(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	net := NewInmemNetwork()
	ha, cha := chanHandler(16)
	hb, chb := chanHandler(16)
	a := newTestInmem(t, net, "a", ha)
	defer a.Close()
	b := newTestInmem(t, net, "b", hb)
	defer b.Close()
	net.DisconnectOneWay("a", "b")
	// a → b is dropped; b → a flows. A marker a → a and b → b follows each.
	_ = a.Send("b", &Frame{Kind: FrameOneWay, Topic: "a-to-b"})
	_ = b.Send("a", &Frame{Kind: FrameOneWay, Topic: "b-to-a"})
	_ = b.Send("b", &Frame{Kind: FrameOneWay, Topic: "marker"})
	expectOnly(t, cha, "b-to-a")
	expectOnly(t, chb, "marker")
	net.ReconnectOneWay("a", "b")
	_ = a.Send("b", &Frame{Kind: FrameOneWay, Topic: "again"})
	expectOnly(t, chb, "again")
	net.DisconnectOneWay("b", "a")
	net.Heal()
	_ = b.Send("a", &Frame{Kind: FrameOneWay, Topic: "healed"})
	expectOnly(t, cha, "healed")
	if s := a.Stats(); s.FramesDropped != 1 {
		t.Fatalf("a dropped %d frames, want 1", s.FramesDropped)
	}
}

func TestInmemFaultsLossAndDuplication(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const n = 2000
	net := NewInmemNetwork()
	var mu sync.Mutex
	got := map[uint64]int{}
	b := newTestInmem(t, net, "b", func(f *Frame) {
		mu.Lock()
		got[binary.BigEndian.Uint64(f.Body)]++
		mu.Unlock()
	})
	defer b.Close()
	a := newTestInmem(t, net, "a", func(*Frame) {})
	defer a.Close()
	net.SetFaults(InmemFaults{Loss: 0.3, Duplicate: 0.3, Seed: 7})
	if err := sendSeq(a, "b", n); err != nil {
		t.Fatal(err)
	}
	net.SetFaults(InmemFaults{})
	// The last frame goes through unharmed: once it is in, everything before it is.
	_ = a.Send("b", seqFrame(n))
	testutil.Eventually(t, 10*time.Second, "the last frame", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got[n] == 1
	})
	mu.Lock()
	defer mu.Unlock()
	lost, twice := 0, 0
	for i := range uint64(n) {
		switch got[i] {
		case 0:
			lost++
		case 2:
			twice++
		case 1:
		default:
			t.Fatalf("frame %d delivered %d times", i, got[i])
		}
	}
	// With 2000 draws at 0.3 and 0.7*0.3, both are far from 0 and from n.
	if lost < n/5 || lost > n*2/5 || twice < n/8 || twice > n*3/10 {
		t.Fatalf("lost %d and duplicated %d of %d frames; want about 30%% and 21%%", lost, twice, n)
	}
	if s := a.Stats(); s.FramesDropped != uint64(lost) {
		t.Fatalf("a counted %d dropped, %d were lost", s.FramesDropped, lost)
	}
}

func TestInmemFaultsReorderAndDelay(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	net := NewInmemNetwork()
	hb, chb := chanHandler(16)
	b := newTestInmem(t, net, "b", hb)
	defer b.Close()
	a := newTestInmem(t, net, "a", func(*Frame) {})
	defer a.Close()
	// A held-back frame is overtaken by the next one.
	net.SetFaults(InmemFaults{Reorder: 1, ReorderDelay: 50 * time.Millisecond})
	_ = a.Send("b", &Frame{Kind: FrameOneWay, Topic: "first"})
	net.SetFaults(InmemFaults{})
	_ = a.Send("b", &Frame{Kind: FrameOneWay, Topic: "second"})
	expectOnly(t, chb, "second")
	expectOnly(t, chb, "first")

	// A delayed frame is handled no sooner than the delay after Send, in order.
	const delay = 100 * time.Millisecond
	net.SetFaults(InmemFaults{Delay: delay})
	sent := time.Now()
	_ = a.Send("b", &Frame{Kind: FrameOneWay, Topic: "d1"})
	_ = a.Send("b", &Frame{Kind: FrameOneWay, Topic: "d2"})
	expectOnly(t, chb, "d1")
	if waited := time.Since(sent); waited < delay {
		t.Fatalf("a frame delayed by %v arrived after %v", delay, waited)
	}
	expectOnly(t, chb, "d2")
}

// TestInmemTellsFramesToNoTransport: a frame to an address without a transport (never
// attached, or closed) is dropped and its listener told, once, as a TCP dial refused
// would; one across a cut link or a partition is dropped untold, as one lost on a
// wire may have reached its peer; a frame delivered is never told.
func TestInmemTellsFramesToNoTransport(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	net := NewInmemNetwork()
	h, ch := chanHandler(8)
	a := newTestInmem(t, net, "a", func(*Frame) {})
	defer a.Close()
	b := newTestInmem(t, net, "b", h)
	defer b.Close()
	c := newTestInmem(t, net, "c", func(*Frame) {})
	rec := &notSentRecorder{errs: make(chan error, 8)}
	told := func(want int, what string) {
		t.Helper()
		for range want {
			if err := <-rec.errs; !errors.Is(err, ErrUnreachable) {
				t.Fatalf("%s: told %v, want ErrUnreachable", what, err)
			}
		}
		select {
		case err := <-rec.errs:
			t.Fatalf("%s: told %v once more", what, err)
		default:
		}
	}
	send := func(addr string) {
		t.Helper()
		if err := a.Send(addr, &Frame{Kind: FrameRequest, ID: 1, notSent: rec}); err != nil {
			t.Fatalf("Send to %s = %v", addr, err)
		}
	}

	send("nobody")
	told(1, "no transport ever")
	c.Close()
	send("c")
	told(1, "a closed transport")

	send("b")
	recvFrame(t, ch, 10*time.Second)
	net.Disconnect("a", "b")
	send("b")
	net.Heal()
	net.Partition([]string{"a"}, []string{"b"})
	send("b")
	net.Heal()
	// Duplicated, the frame is told at most once.
	net.SetFaults(InmemFaults{Duplicate: 1, Seed: 1})
	send("nobody")
	told(1, "delivered, across a cut link or partition, then a duplicate to nobody")
}
