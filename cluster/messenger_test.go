package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// messengerTransports are the transports every messenger test runs over.
var messengerTransports = []string{"tcp", "inmem"}

// newTestMessengers returns count messengers on one network of the given kind
// ("tcp" or "inmem"), and a function that closes them all. For "inmem" the
// network is returned too.
func newTestMessengers(t testing.TB, kind string, count int) ([]*Messenger, *InmemNetwork, func()) {
	t.Helper()
	var net *InmemNetwork
	if kind == "inmem" {
		net = NewInmemNetwork()
	}
	var ms []*Messenger
	closeAll := func() {
		for _, m := range ms {
			_ = m.Close()
		}
	}
	for i := range count {
		m, err := NewMessenger(func(h FrameHandler) (Transport, error) {
			if net != nil {
				return net.NewTransport(fmt.Sprintf("node-%d", i), h)
			}
			cfg := DefaultLocalTCPConfig()
			cfg.Logger = transportTestLogger(t)
			return NewTCPTransport(cfg, h)
		}, transportTestLogger(t))
		if err != nil {
			closeAll()
			t.Fatalf("NewMessenger: %v", err)
		}
		ms = append(ms, m)
	}
	return ms, net, closeAll
}

// forEachTransport runs test as a subtest over each messenger transport, with a
// goroutine leak check.
func forEachTransport(t *testing.T, test func(t *testing.T, kind string)) {
	for _, kind := range messengerTransports {
		t.Run(kind, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			test(t, kind)
		})
	}
}

func echoHandler(r *Request) {
	r.Reply(append([]byte("echo:"), r.Body...), nil)
}

func TestMessengerRequestReply(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		ms, _, closeAll := newTestMessengers(t, kind, 2)
		defer closeAll()
		a, b := ms[0], ms[1]
		b.Handle("echo", echoHandler)
		a.Handle("echo", echoHandler)

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, err := a.Request(ctx, b.LocalAddr(), "echo", []byte("hi"))
		if err != nil || string(got) != "echo:hi" {
			t.Fatalf("Request = %q, %v", got, err)
		}
		// To itself, through the transport.
		got, err = a.Request(ctx, a.LocalAddr(), "echo", []byte("me"))
		if err != nil || string(got) != "echo:me" {
			t.Fatalf("Request to self = %q, %v", got, err)
		}

		// Many concurrent requests, each getting its own reply.
		var wg sync.WaitGroup
		errs := make(chan error, 400)
		for g := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					body := fmt.Appendf(nil, "%d/%d", g, i)
					got, err := a.Request(ctx, b.LocalAddr(), "echo", body)
					if err != nil || !bytes.Equal(got, append([]byte("echo:"), body...)) {
						errs <- fmt.Errorf("request %s: %q, %v", body, got, err)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}

		// The callback form.
		done := make(chan struct{})
		a.RequestAsync(b.LocalAddr(), "echo", []byte("async"), 10*time.Second, func(body []byte, err error) {
			if err != nil || string(body) != "echo:async" {
				t.Errorf("RequestAsync = %q, %v", body, err)
			}
			close(done)
		})
		<-done
	})
}

func TestMessengerRemoteError(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		ms, _, closeAll := newTestMessengers(t, kind, 2)
		defer closeAll()
		a, b := ms[0], ms[1]
		b.Handle("fail", func(r *Request) { r.Reply([]byte("ignored"), errors.New("entity exploded")) })
		b.Handle("panic", func(r *Request) { panic("handler bug") })

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		body, err := a.Request(ctx, b.LocalAddr(), "fail", nil)
		if !errors.Is(err, ErrRemote) || err.Error() != "entity exploded" || body != nil {
			t.Fatalf("Request = %q, %v; want ErrRemote with the remote text", body, err)
		}
		var re *remoteError
		if !errors.As(err, &re) || re.Msg != "entity exploded" {
			t.Fatalf("errors.As RemoteError: %v", err)
		}

		_, err = a.Request(ctx, b.LocalAddr(), "panic", nil)
		if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), "panicked") {
			t.Fatalf("panicking handler: %v", err)
		}
		// b goes on serving.
		_, err = a.Request(ctx, b.LocalAddr(), "fail", nil)
		if !errors.Is(err, ErrRemote) {
			t.Fatalf("after a panic: %v", err)
		}
	})
}

func TestMessengerUnknownTopic(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		ms, _, closeAll := newTestMessengers(t, kind, 2)
		defer closeAll()
		a, b := ms[0], ms[1]
		got := make(chan *Request, 4)
		b.Handle("known", func(r *Request) { got <- r })

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := a.Request(ctx, b.LocalAddr(), "nope", nil)
		if !errors.Is(err, ErrRemote) || err.Error() != "cluster: no handler for topic nope" {
			t.Fatalf("Request to unknown topic = %v", err)
		}
		// A one-way message to an unknown topic is dropped; the next one arrives.
		if err := a.Tell(b.LocalAddr(), "nope", []byte("lost")); err != nil {
			t.Fatal(err)
		}
		if err := a.Tell(b.LocalAddr(), "known", []byte("kept")); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			if string(r.Body) != "kept" || !r.OneWay() || r.From != a.LocalAddr() || r.Topic != "known" {
				t.Fatalf("got %+v", r)
			}
			r.Reply([]byte("no-op"), nil) // a one-way message takes no reply
		case <-time.After(10 * time.Second):
			t.Fatal("one-way message not delivered")
		}
	})
}

func TestMessengerTimeout(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		ms, _, closeAll := newTestMessengers(t, kind, 2)
		defer closeAll()
		a, b := ms[0], ms[1]
		held := make(chan *Request, 4)
		b.Handle("slow", func(r *Request) { held <- r })

		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := a.Request(ctx, b.LocalAddr(), "slow", nil)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrRequestTimeout) {
			t.Fatalf("Request past its deadline = %v", err)
		}

		done := make(chan error, 1)
		a.RequestAsync(b.LocalAddr(), "slow", nil, 50*time.Millisecond, func(_ []byte, err error) { done <- err })
		if err := <-done; !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrRequestTimeout) {
			t.Fatalf("RequestAsync past its timeout = %v", err)
		}
		a.RequestAsync(b.LocalAddr(), "slow", nil, 0, func(_ []byte, err error) { done <- err })
		if err := <-done; !errors.Is(err, ErrRequestTimeout) {
			t.Fatalf("RequestAsync with no time = %v", err)
		}

		// Late replies find nothing pending and are dropped.
		for range 2 {
			r := <-held
			r.Reply([]byte("late"), nil)
		}
		// A cancelled context is not a timeout.
		cctx, ccancel := context.WithCancel(context.Background())
		ccancel()
		if _, err := a.Request(cctx, b.LocalAddr(), "slow", nil); !errors.Is(err, context.Canceled) || errors.Is(err, ErrRequestTimeout) {
			t.Fatalf("Request with a cancelled context = %v", err)
		}
		a.mu.Lock()
		n := len(a.pending)
		a.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d requests still pending", n)
		}
	})
}

// TestMessengerTimeoutsShareOneTimer: requests with timeouts in no particular order,
// some answered, some never, some replied to after their timeout: each callback runs
// once, the unanswered with a timeout error whatever the order of their deadlines, the
// answered with their reply; those with an hour left fail at Close.
func TestMessengerTimeoutsShareOneTimer(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		ms, _, closeAll := newTestMessengers(t, kind, 2)
		defer closeAll()
		a, b := ms[0], ms[1]
		b.Handle("echo", func(r *Request) { r.Reply(r.Body, nil) })
		b.Handle("never", func(r *Request) {})
		const n = 60
		type outcome struct {
			i   int
			err error
		}
		got := make(chan outcome, 2*n)
		calls := make([]int, n)
		for i := range n {
			topic, timeout := "never", time.Duration(1+(i*7)%13)*10*time.Millisecond
			switch i % 3 {
			case 1:
				topic, timeout = "echo", time.Hour
			case 2:
				timeout = time.Hour
			}
			a.RequestAsync(b.LocalAddr(), topic, []byte{byte(i)}, timeout, func(body []byte, err error) {
				if err == nil && (len(body) != 1 || body[0] != byte(i)) {
					err = fmt.Errorf("reply %v", body)
				}
				got <- outcome{i, err}
			})
		}
		check := func(o outcome, wantErr error) {
			t.Helper()
			calls[o.i]++
			if calls[o.i] != 1 {
				t.Fatalf("request %d: callback %d times", o.i, calls[o.i])
			}
			if wantErr == nil && o.err != nil || wantErr != nil && !errors.Is(o.err, wantErr) {
				t.Fatalf("request %d: %v, want %v", o.i, o.err, wantErr)
			}
		}
		for range 2 * n / 3 { // the answered and the timed out
			var o outcome
			select {
			case o = <-got:
			case <-time.After(time.Minute):
				t.Fatal("a request neither answered nor timed out")
			}
			switch o.i % 3 {
			case 0:
				check(o, ErrRequestTimeout)
			case 1:
				check(o, nil)
			default:
				t.Fatalf("request %d with an hour to go completed: %v", o.i, o.err)
			}
		}
		a.mu.Lock()
		pending, timeouts := len(a.pending), len(a.timeouts)
		a.mu.Unlock()
		if pending != n/3 || timeouts != n/3 {
			t.Fatalf("%d pending, %d with a timeout; want %d", pending, timeouts, n/3)
		}
		closeAll()
		for range n / 3 {
			check(<-got, ErrTransportClosed)
		}
		select {
		case o := <-got:
			t.Fatalf("request %d: a callback more: %v", o.i, o.err)
		default:
		}
	})
}

// TestMessengerTimeoutCallbacksDoNotWaitForEachOther: the callback of one timed-out
// request blocks until another's has run; both time out together.
func TestMessengerTimeoutCallbacksDoNotWaitForEachOther(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ms, _, closeAll := newTestMessengers(t, "inmem", 2)
	defer closeAll()
	a, b := ms[0], ms[1]
	b.Handle("never", func(r *Request) {})
	second, done := make(chan struct{}), make(chan error, 2)
	a.RequestAsync(b.LocalAddr(), "never", nil, 20*time.Millisecond, func(_ []byte, err error) {
		select {
		case <-second:
			done <- err
		case <-time.After(time.Minute):
			done <- errors.New("the other callback did not run")
		}
	})
	a.RequestAsync(b.LocalAddr(), "never", nil, 20*time.Millisecond, func(_ []byte, err error) {
		close(second)
		done <- err
	})
	for range 2 {
		if err := <-done; !errors.Is(err, ErrRequestTimeout) {
			t.Fatal(err)
		}
	}
}

// TestDeadlineHeap pushes and removes requests in a pseudo-random order and checks the
// heap's order and indexes after each step.
func TestDeadlineHeap(t *testing.T) {
	var h deadlineHeap
	base := time.Now()
	var in []*pendingRequest
	x := uint32(1)
	next := func() int { x = x*1664525 + 1013904223; return int(x >> 8) }
	for step := range 2000 {
		if len(in) == 0 || next()%3 != 0 {
			p := &pendingRequest{deadline: base.Add(time.Duration(next()%1000) * time.Millisecond)}
			h.push(p)
			in = append(in, p)
		} else {
			k := next() % len(in)
			p := in[k]
			h.remove(p.index)
			if p.index != -1 {
				t.Fatalf("step %d: a removed request has index %d", step, p.index)
			}
			in = append(in[:k], in[k+1:]...)
		}
		if len(h) != len(in) {
			t.Fatalf("step %d: heap of %d, want %d", step, len(h), len(in))
		}
		for i, p := range h {
			if p.index != i {
				t.Fatalf("step %d: h[%d].index = %d", step, i, p.index)
			}
			if i > 0 && h[i].deadline.Before(h[(i-1)/2].deadline) {
				t.Fatalf("step %d: h[%d] is due before its parent", step, i)
			}
		}
	}
}

func TestMessengerReplyTwiceAndLater(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		ms, _, closeAll := newTestMessengers(t, kind, 2)
		defer closeAll()
		a, b := ms[0], ms[1]
		var workers sync.WaitGroup
		defer workers.Wait()
		b.Handle("twice", func(r *Request) {
			r.Reply([]byte("first"), nil)
			r.Reply([]byte("second"), nil)
			r.Reply(nil, errors.New("third"))
		})
		// Replies later, from another goroutine.
		b.Handle("later", func(r *Request) {
			workers.Add(1)
			go func() {
				defer workers.Done()
				r.Reply(append([]byte("later:"), r.Body...), nil)
			}()
		})

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range 3 {
			got, err := a.Request(ctx, b.LocalAddr(), "twice", nil)
			if err != nil || string(got) != "first" {
				t.Fatalf("request %d: %q, %v", i, got, err)
			}
		}
		for i := range 50 {
			body := fmt.Appendf(nil, "%d", i)
			got, err := a.Request(ctx, b.LocalAddr(), "later", body)
			if err != nil || string(got) != "later:"+string(body) {
				t.Fatalf("request %d: %q, %v", i, got, err)
			}
		}
	})
}

func TestMessengerCloseFailsPending(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		ms, _, closeAll := newTestMessengers(t, kind, 2)
		defer closeAll()
		a, b := ms[0], ms[1]
		arrived := make(chan *Request, 2)
		b.Handle("hold", func(r *Request) { arrived <- r })

		results := make(chan error, 2)
		go func() {
			_, err := a.Request(context.Background(), b.LocalAddr(), "hold", nil)
			results <- err
		}()
		a.RequestAsync(b.LocalAddr(), "hold", nil, time.Hour, func(_ []byte, err error) { results <- err })
		for range 2 {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatal("requests did not arrive")
			}
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := <-results; !errors.Is(err, ErrTransportClosed) {
				t.Fatalf("pending request at Close = %v, want ErrTransportClosed", err)
			}
		}
		if err := a.Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
		if _, err := a.Request(context.Background(), b.LocalAddr(), "hold", nil); !errors.Is(err, ErrTransportClosed) {
			t.Fatalf("Request after Close = %v", err)
		}
		done := make(chan error, 1)
		a.RequestAsync(b.LocalAddr(), "hold", nil, time.Second, func(_ []byte, err error) { done <- err })
		if err := <-done; !errors.Is(err, ErrTransportClosed) {
			t.Fatalf("RequestAsync after Close = %v", err)
		}
		if err := a.Tell(b.LocalAddr(), "hold", nil); !errors.Is(err, ErrTransportClosed) {
			t.Fatalf("Tell after Close = %v", err)
		}
	})
}

func TestMessengerUnreachablePeer(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		ms, net, closeAll := newTestMessengers(t, kind, 2)
		defer closeAll()
		a, b := ms[0], ms[1]
		b.Handle("echo", echoHandler)
		addr := "node-404"
		if kind == "tcp" {
			addr = deadAddr(t)
		}
		// The request never leaves (dropped at the dial, or for want of a transport at
		// the address; with TCP, refused at once while the dial backs off): it fails
		// as not sent, long before its deadline.
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := a.Request(ctx, addr, "echo", nil)
			cancel()
			if !errors.Is(err, ErrNotSent) || errors.Is(err, ErrRequestTimeout) {
				t.Fatalf("Request to a dead address = %v, want ErrNotSent", err)
			}
		}
		if net == nil {
			return
		}
		// A partition loses requests, which may have reached the peer: a timeout, not
		// ErrNotSent. Healing restores them.
		net.Partition([]string{a.LocalAddr()}, []string{b.LocalAddr()})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := a.Request(ctx, b.LocalAddr(), "echo", nil)
		cancel()
		if !errors.Is(err, ErrRequestTimeout) || errors.Is(err, ErrNotSent) {
			t.Fatalf("Request across a partition = %v", err)
		}
		net.Heal()
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if got, err := a.Request(ctx, b.LocalAddr(), "echo", []byte("x")); err != nil || string(got) != "echo:x" {
			t.Fatalf("Request after Heal = %q, %v", got, err)
		}
	})
}

// TestMessengerTellsNotSentFromMaybeHandled: a request's error wraps ErrNotSent exactly
// when it never left this member, so that its peer cannot have handled it: sent to an
// address nobody listens on (TCP: the dial refused, then the backoff; in memory: no
// transport there), after Close, with no time left. A request the peer received and
// never answered, or one pending at Close, fails without it.
func TestMessengerTellsNotSentFromMaybeHandled(t *testing.T) {
	forEachTransport(t, func(t *testing.T, kind string) {
		ms, net, closeAll := newTestMessengers(t, kind, 3)
		defer closeAll()
		a, b, c := ms[0], ms[1], ms[2]
		held := make(chan *Request, 4)
		b.Handle("hold", func(r *Request) { held <- r })
		dead := "node-gone"
		if kind == "tcp" {
			dead = deadAddr(t)
		}

		done := make(chan error, 1)
		for range 3 {
			a.RequestAsync(dead, "hold", nil, time.Hour, func(_ []byte, err error) { done <- err })
			if err := <-done; !errors.Is(err, ErrNotSent) {
				t.Fatalf("RequestAsync to a dead address = %v, want ErrNotSent", err)
			}
		}

		// Received, never answered: its fate is unknown.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := a.Request(ctx, b.LocalAddr(), "hold", nil)
		cancel()
		if !errors.Is(err, ErrRequestTimeout) || errors.Is(err, ErrNotSent) {
			t.Fatalf("Request the peer holds = %v, want a timeout without ErrNotSent", err)
		}
		<-held
		a.RequestAsync(b.LocalAddr(), "hold", nil, 0, func(_ []byte, err error) { done <- err })
		if err := <-done; !errors.Is(err, ErrRequestTimeout) || !errors.Is(err, ErrNotSent) {
			t.Fatalf("RequestAsync with no time = %v, want a timeout, not sent", err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		if _, err := a.Request(ctx, b.LocalAddr(), "hold", nil); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotSent) {
			t.Fatalf("Request with a cancelled context = %v, want not sent", err)
		}

		if net != nil {
			// A member gone from the network: what it would have got is not sent.
			gone := c.LocalAddr()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Request(context.Background(), gone, "hold", nil); !errors.Is(err, ErrNotSent) {
				t.Fatalf("Request to a closed transport's address = %v, want ErrNotSent", err)
			}
		}

		// Pending at Close: sent, so not ErrNotSent; after Close: not sent.
		a.RequestAsync(b.LocalAddr(), "hold", nil, time.Hour, func(_ []byte, err error) { done <- err })
		<-held
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, ErrTransportClosed) || errors.Is(err, ErrNotSent) {
			t.Fatalf("request pending at Close = %v, want ErrTransportClosed without ErrNotSent", err)
		}
		if _, err := a.Request(context.Background(), b.LocalAddr(), "hold", nil); !errors.Is(err, ErrTransportClosed) || !errors.Is(err, ErrNotSent) {
			t.Fatalf("Request after Close = %v, want not sent", err)
		}
	})
}

func TestMessengerHandleDuplicatePanics(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ms, _, closeAll := newTestMessengers(t, "inmem", 1)
	defer closeAll()
	ms[0].Handle("t", func(*Request) {})
	defer func() {
		if recover() == nil {
			t.Fatal("Handle of a registered topic did not panic")
		}
	}()
	ms[0].Handle("t", func(*Request) {})
}

func TestNewMessengerTransportError(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	boom := errors.New("no transport today")
	if _, err := NewMessenger(func(FrameHandler) (Transport, error) { return nil, boom }, nil); !errors.Is(err, boom) {
		t.Fatalf("NewMessenger = %v, want the transport's error", err)
	}
	if _, err := NewMessenger(func(FrameHandler) (Transport, error) { return nil, nil }, nil); err == nil {
		t.Fatal("NewMessenger accepted a nil transport")
	}
}

// A messenger pair on an in-memory network: one node serves a topic, the other
// asks it.
func ExampleMessenger() {
	network := NewInmemNetwork()
	newNode := func(addr string) *Messenger {
		m, err := NewMessenger(func(h FrameHandler) (Transport, error) {
			return network.NewTransport(addr, h)
		}, nil)
		if err != nil {
			panic(err)
		}
		return m
	}
	server, client := newNode("node-a:7947"), newNode("node-b:7947")
	defer server.Close()
	defer client.Close()

	server.Handle("greet", func(r *Request) {
		if len(r.Body) == 0 {
			r.Reply(nil, errors.New("greet: empty name"))
			return
		}
		r.Reply(append([]byte("hello, "), r.Body...), nil)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	reply, err := client.Request(ctx, "node-a:7947", "greet", []byte("node-b"))
	fmt.Printf("%s %v\n", reply, err)
	_, err = client.Request(ctx, "node-a:7947", "greet", nil)
	fmt.Println(err, errors.Is(err, ErrRemote))
	// Output:
	// hello, node-b <nil>
	// greet: empty name true
}
