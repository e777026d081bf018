package cluster

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardhost/shardhost/internal/testutil"
)

// TestTCPCapsUnauthenticatedConnections: past MaxPendingConns inbound connections that
// have not carried a frame, a new one is closed at once; the silent ones are closed
// after WriteTimeout; a peer that sends frames is served meanwhile.
func TestTCPCapsUnauthenticatedConnections(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h, frames := chanHandler(16)
	a := newTestTCP(t, h, func(c *TCPConfig) { c.MaxPendingConns = 2; c.WriteTimeout = 2 * time.Second; c.Logger = nil })
	defer a.Close()
	var silent []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", a.LocalAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	testutil.EventuallyNil(t, 10*time.Second, "a third connection closed at once", func() error { return closedAtOnce(a.LocalAddr()) })
	if a.Stats().RefusedConnections == 0 {
		t.Error("no refused connection counted")
	}
	for _, c := range silent {
		expectClosedByPeer(t, c)
	}
	// With the slots free again, a peer gets its frames through.
	b := newTestTCP(t, func(*Frame) {})
	defer b.Close()
	testutil.EventuallyNil(t, 10*time.Second, "a frame after the silent connections", func() error {
		if err := b.Send(a.LocalAddr(), seqFrame(7)); err != nil {
			return err
		}
		select {
		case <-frames:
			return nil
		case <-time.After(500 * time.Millisecond):
			return context.DeadlineExceeded
		}
	})
}

// TestTCPFramesInFlightBackPressure: a handler that holds its frames gets
// MaxFramesInFlight of them and no more until it releases some; then the rest arrive,
// in order, and the waits are counted.
func TestTCPFramesInFlightBackPressure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const limit, total = 4, 40
	var mu sync.Mutex
	var held []func()
	var got []uint64
	a := newTestTCP(t, func(f *Frame) {
		mu.Lock()
		defer mu.Unlock()
		held = append(held, f.Hold())
		got = append(got, binary.BigEndian.Uint64(f.Body))
	}, func(c *TCPConfig) { c.MaxFramesInFlight = limit })
	defer a.Close()
	b := newTestTCP(t, func(*Frame) {})
	defer b.Close()
	if err := sendSeq(b, a.LocalAddr(), total); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	testutil.Eventually(t, 10*time.Second, "the first frames", func() bool { return count() == limit })
	// The reader stops: it waits for a frame in flight to be done before handing over
	// the next, and nothing more arrives while the frames are held.
	testutil.Eventually(t, 10*time.Second, "the reader waiting", func() bool { return a.Stats().BackpressureWaits > 0 })
	if n := count(); n != limit {
		t.Fatalf("%d frames handed to the handler with %d held", n, limit)
	}
	for done := 0; done < total; {
		mu.Lock()
		for _, release := range held {
			release()
			release() // a second call does nothing
		}
		done += len(held)
		held = nil
		mu.Unlock()
		testutil.Eventually(t, 10*time.Second, "more frames", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == total || len(held) > 0
		})
	}
	for i, seq := range got {
		if seq != uint64(i) {
			t.Fatalf("frame %d is %d: out of order", i, seq)
		}
	}
	if a.Stats().BackpressureWaits == 0 {
		t.Error("no back-pressure wait counted")
	}
}

// TestMessengerRequestHoldsItsSlotUntilAnswered: with one frame in flight per
// connection, a second request is handled only once the first is answered; a request a
// handler drops unanswered frees its slot when collected.
func TestMessengerRequestHoldsItsSlotUntilAnswered(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	newM := func() *Messenger {
		m, err := NewMessenger(func(h FrameHandler) (Transport, error) {
			cfg := DefaultLocalTCPConfig()
			cfg.MaxFramesInFlight = 1
			return NewTCPTransport(cfg, h)
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	server, client := newM(), newM()
	defer server.Close()
	defer client.Close()
	var handled atomic.Int32
	pending := make(chan *Request, 4)
	server.Handle("slow", func(r *Request) { handled.Add(1); pending <- r })
	server.Handle("drop", func(r *Request) { handled.Add(1) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			_, err := client.Request(ctx, server.LocalAddr(), "slow", nil)
			results <- err
		}()
	}
	first := <-pending
	// The reader has read the second request and waits for the first's slot.
	testutil.Eventually(t, 10*time.Second, "the reader waiting", func() bool {
		return server.Transport().(*TCPTransport).Stats().BackpressureWaits > 0
	})
	if n := handled.Load(); n != 1 {
		t.Fatalf("%d requests handled while the first is unanswered", n)
	}
	first.Reply([]byte("ok"), nil)
	(<-pending).Reply([]byte("ok"), nil)
	for i := 0; i < 2; i++ {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}

	handled.Store(0)
	for i := 0; i < 2; i++ {
		client.RequestAsync(server.LocalAddr(), "drop", nil, 100*time.Millisecond, func([]byte, error) {})
	}
	testutil.Eventually(t, 20*time.Second, "the second dropped request handled after the first is collected", func() bool {
		runtime.GC()
		return handled.Load() == 2
	})
}

// closedAtOnce dials addr and returns nil if the other side closes the connection within
// a second without a byte.
func closedAtOnce(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		return err
	}
	return nil
}
