package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Every test here checks for goroutine leaks with
// defer goleak.VerifyNone(t, goleak.IgnoreCurrent()): goroutines that were already
// running when the test started (left by other tests of the package, such as
// memberlist's) are not counted against it.

// transportTestLogger logs warnings and errors into the test's output.
func transportTestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// waitCond waits until cond holds, checking it every few milliseconds, and fails
// the test if it does not within timeout.
func waitCond(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

// recvFrame waits for a frame on ch, failing the test after timeout.
func recvFrame(t testing.TB, ch <-chan *Frame, timeout time.Duration) *Frame {
	t.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(timeout):
		t.Fatalf("no frame within %v", timeout)
		return nil
	}
}

// chanHandler returns a FrameHandler that puts frames on a buffered channel
// (dropping them if it is full, so a reader never blocks).
func chanHandler(size int) (FrameHandler, chan *Frame) {
	ch := make(chan *Frame, size)
	return func(f *Frame) {
		select {
		case ch <- f:
		default:
		}
	}, ch
}

// newTestTCP starts a TCP transport on 127.0.0.1:0 with DefaultLocalTCPConfig,
// changed by the given functions. The caller closes it.
func newTestTCP(t testing.TB, h FrameHandler, change ...func(*TCPConfig)) *TCPTransport {
	t.Helper()
	cfg := DefaultLocalTCPConfig()
	cfg.Logger = transportTestLogger(t)
	for _, c := range change {
		c(&cfg)
	}
	tr, err := NewTCPTransport(cfg, h)
	if err != nil {
		t.Fatalf("NewTCPTransport: %v", err)
	}
	return tr
}

// seqRecorder checks that frames from every sender carry consecutive sequence
// numbers (an 8-byte big-endian body) starting at 0, and signals when it has seen
// want frames.
type seqRecorder struct {
	mu    sync.Mutex
	next  map[string]uint64
	err   error
	total int
	want  int
	done  chan struct{}
}

func newSeqRecorder(want int) *seqRecorder {
	return &seqRecorder{next: make(map[string]uint64), want: want, done: make(chan struct{})}
}

func (r *seqRecorder) handle(f *Frame) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq := binary.BigEndian.Uint64(f.Body)
	if seq != r.next[f.From] && r.err == nil {
		r.err = fmt.Errorf("from %s: got seq %d, want %d", f.From, seq, r.next[f.From])
	}
	r.next[f.From] = seq + 1
	r.total++
	if r.total == r.want {
		close(r.done)
	}
}

func (r *seqRecorder) wait(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("received %d of %d frames within %v (err %v)", r.total, r.want, timeout, r.err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		t.Fatal(r.err)
	}
}

func seqFrame(i int) *Frame {
	return &Frame{Kind: FrameOneWay, Topic: "seq", Body: binary.BigEndian.AppendUint64(nil, uint64(i))}
}

// sendSeq sends n sequence frames from tr to addr, failing on any error.
func sendSeq(tr Transport, addr string, n int) error {
	for i := range n {
		if err := tr.Send(addr, seqFrame(i)); err != nil {
			return fmt.Errorf("send %d to %s: %w", i, addr, err)
		}
	}
	return nil
}

func TestTCPTwoTransportsExchangeInOrder(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const n = 5000
	ra, rb := newSeqRecorder(n), newSeqRecorder(n)
	a := newTestTCP(t, ra.handle)
	defer a.Close()
	b := newTestTCP(t, rb.handle)
	defer b.Close()

	if p := a.LocalAddr(); strings.HasSuffix(p, ":0") || !strings.HasPrefix(p, "127.0.0.1:") {
		t.Fatalf("LocalAddr = %q, want 127.0.0.1 with the real port", p)
	}
	errs := make(chan error, 2)
	go func() { errs <- sendSeq(a, b.LocalAddr(), n) }()
	go func() { errs <- sendSeq(b, a.LocalAddr(), n) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ra.wait(t, 10*time.Second)
	rb.wait(t, 10*time.Second)

	waitCond(t, 5*time.Second, "send stats", func() bool { return a.Stats().FramesSent == n })
	sa, sb := a.Stats(), b.Stats()
	if sa.FramesReceived != n || sb.FramesReceived != n || sa.FramesDropped != 0 || sa.BytesSent != sb.BytesReceived {
		t.Fatalf("stats a %+v, b %+v", sa, sb)
	}
	if sa.Writes == 0 || sa.Writes > sa.FramesSent {
		t.Fatalf("a made %d writes for %d frames", sa.Writes, sa.FramesSent)
	}
}

func TestTCPThreeTransportsExchangeInOrder(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const n = 2000
	var recs []*seqRecorder
	var trs []*TCPTransport
	for range 3 {
		r := newSeqRecorder(2 * n)
		tr := newTestTCP(t, r.handle)
		defer tr.Close()
		recs = append(recs, r)
		trs = append(trs, tr)
	}
	errs := make(chan error, 6)
	for i, from := range trs {
		for j, to := range trs {
			if i != j {
				go func() { errs <- sendSeq(from, to.LocalAddr(), n) }()
			}
		}
	}
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range recs {
		r.wait(t, 10*time.Second)
	}
}

func TestTCPSendToSelf(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h, ch := chanHandler(1)
	a := newTestTCP(t, h)
	defer a.Close()
	if err := a.Send(a.LocalAddr(), &Frame{Kind: FrameOneWay, Topic: "self"}); err != nil {
		t.Fatal(err)
	}
	if f := recvFrame(t, ch, 5*time.Second); f.From != a.LocalAddr() || f.Topic != "self" {
		t.Fatalf("got %+v", f)
	}
}

func TestTCPPeerRestartIsRedialed(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := newTestTCP(t, func(*Frame) {})
	defer a.Close()
	hb, chb := chanHandler(16)
	b := newTestTCP(t, hb)
	addr := b.LocalAddr()

	if err := a.Send(addr, &Frame{Kind: FrameOneWay, Topic: "before"}); err != nil {
		t.Fatal(err)
	}
	recvFrame(t, chb, 5*time.Second)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	hb2, chb2 := chanHandler(1024)
	b2 := newTestTCP(t, hb2, func(c *TCPConfig) { c.BindAddr = addr })
	defer b2.Close()

	// Frames sent while a still holds the dead connection, or backs off, are lost;
	// keep sending until one arrives over a new connection.
	deadline := time.After(10 * time.Second)
	for i := 0; ; i++ {
		_ = a.Send(addr, &Frame{Kind: FrameOneWay, Topic: "after"})
		select {
		case f := <-chb2:
			if f.Topic != "after" || f.From != a.LocalAddr() {
				t.Fatalf("got %+v", f)
			}
			return
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("restarted peer got nothing after %d sends; stats %+v", i, a.Stats())
		}
	}
}

// deadAddr returns an address on 127.0.0.1 where nothing listens.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestTCPPeerDownDropsAndBacksOff(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := newTestTCP(t, func(*Frame) {}, func(c *TCPConfig) {
		c.RedialBackoff = time.Minute
		c.MaxRedialBackoff = time.Minute
		c.Logger = nil
	})
	defer a.Close()
	addr := deadAddr(t)

	if err := a.Send(addr, &Frame{Kind: FrameOneWay}); err != nil {
		t.Fatalf("first Send to a down peer = %v, want nil (queued)", err)
	}
	waitCond(t, 5*time.Second, "the frame to be dropped", func() bool { return a.Stats().FramesDropped >= 1 })
	for range 100 {
		if err := a.Send(addr, &Frame{Kind: FrameOneWay}); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("Send while backing off = %v, want ErrUnreachable", err)
		}
	}
	if s := a.Stats(); s.FramesDropped != 101 || s.FramesSent != 0 {
		t.Fatalf("stats %+v, want 101 dropped", s)
	}
}

// notSentRecorder is a Frame.notSent listener that records what it is told.
type notSentRecorder struct{ errs chan error }

func (r *notSentRecorder) frameNotSent(err error) { r.errs <- err }

// TestTCPTellsFramesDroppedUnsent: a frame queued for a peer that cannot be dialled is
// dropped, and its listener told, with the dial's error; a frame refused by Send (the
// backoff) is not told, its sender has the error; a frame written to a peer that then
// never reads it, nor one whose write failed, is never told.
func TestTCPTellsFramesDroppedUnsent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := newTestTCP(t, func(*Frame) {}, func(c *TCPConfig) {
		c.RedialBackoff = time.Minute
		c.MaxRedialBackoff = time.Minute
		c.WriteTimeout = 20 * time.Millisecond
		c.SendQueueSize = 4
		c.MaxFrameSize = 1 << 20
		c.Logger = nil
	})
	defer a.Close()
	rec := &notSentRecorder{errs: make(chan error, 64)}
	dead := deadAddr(t)
	if err := a.Send(dead, &Frame{Kind: FrameRequest, ID: 1, notSent: rec}); err != nil {
		t.Fatalf("first Send to a down peer = %v, want nil (queued)", err)
	}
	select {
	case err := <-rec.errs:
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			t.Fatalf("told %v, want the dial's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the frame dropped at the dial was not told")
	}
	if err := a.Send(dead, &Frame{Kind: FrameRequest, ID: 2, notSent: rec}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Send while backing off = %v, want ErrUnreachable", err)
	}

	// A peer that accepts and never reads: its frames are written, then a write times
	// out and drops its batch. None of them is told.
	addr, stop := stuckListener(t)
	defer stop()
	body := make([]byte, 512<<10)
	var refused atomic.Uint64
	before := a.Stats().FramesDropped
	waitCond(t, 10*time.Second, "a write to time out", func() bool {
		if err := a.Send(addr, &Frame{Kind: FrameRequest, ID: 3, Body: body, notSent: rec}); err != nil {
			refused.Add(1)
		}
		return a.Stats().FramesDropped > before+refused.Load()
	})
	select {
	case err := <-rec.errs:
		t.Fatalf("told %v: a frame that Send refused, or that was written", err)
	default:
	}
}

func TestTCPCloseWhileDialing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// 192.0.2.0/24 (TEST-NET-1) is never routed: the dial hangs or fails at once.
	a := newTestTCP(t, func(*Frame) {}, func(c *TCPConfig) { c.DialTimeout = time.Minute; c.Logger = nil })
	for range 10 {
		_ = a.Send("192.0.2.1:7947", &Frame{Kind: FrameOneWay})
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := a.Send("192.0.2.1:7947", &Frame{Kind: FrameOneWay}); !errors.Is(err, ErrTransportClosed) {
		t.Fatalf("Send after Close = %v, want ErrTransportClosed", err)
	}
}

// expectClosedByPeer waits for the server to close c: a read returns EOF or a reset.
func expectClosedByPeer(t testing.TB, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the transport did not close a connection that sent a bad frame")
	}
}

func TestTCPBadInboundClosesOnlyThatConnection(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h, ch := chanHandler(16)
	a := newTestTCP(t, h, func(c *TCPConfig) { c.MaxFrameSize = 1 << 20; c.Logger = nil })
	defer a.Close()
	b := newTestTCP(t, func(*Frame) {})
	defer b.Close()

	valid := stream(t, &Frame{Kind: FrameOneWay, From: "raw", Topic: "raw"})
	bad := map[string][]byte{
		"http request":      []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"oversize prefix":   {0x00, 0x10, 0x00, 0x01},
		"zero length":       {0, 0, 0, 0},
		"garbage body":      append([]byte{0, 0, 0, 5}, "junk!"...),
		"bad kind":          {0, 0, 0, 3, 0xa1, 0x01, 0x07},
		"valid then broken": append(append([]byte{}, valid...), 0xff, 0xff, 0xff, 0xff),
	}
	for name, data := range bad {
		c, err := net.Dial("tcp", a.LocalAddr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(data); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		expectClosedByPeer(t, c)
		_ = c.Close()
	}
	// The one valid frame, sent ahead of garbage on the same connection, arrived.
	if f := recvFrame(t, ch, 5*time.Second); f.Topic != "raw" {
		t.Fatalf("got %+v", f)
	}
	if s := a.Stats(); s.MalformedFrames != uint64(len(bad)) {
		t.Fatalf("MalformedFrames = %d, want %d", s.MalformedFrames, len(bad))
	}

	// The transport still serves other peers, and a raw client speaking the protocol.
	if err := b.Send(a.LocalAddr(), &Frame{Kind: FrameOneWay, Topic: "still-serving"}); err != nil {
		t.Fatal(err)
	}
	if f := recvFrame(t, ch, 5*time.Second); f.Topic != "still-serving" {
		t.Fatalf("got %+v", f)
	}
	c, err := net.Dial("tcp", a.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(valid); err != nil {
		t.Fatal(err)
	}
	if f := recvFrame(t, ch, 5*time.Second); f.Topic != "raw" {
		t.Fatalf("got %+v", f)
	}
}

func TestTCPSendRejectsOversizeAndInvalidFrames(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := newTestTCP(t, func(*Frame) {}, func(c *TCPConfig) { c.MaxFrameSize = 1024 })
	defer a.Close()
	if err := a.Send(a.LocalAddr(), &Frame{Kind: FrameOneWay, Body: make([]byte, 2000)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize Send = %v, want ErrFrameTooLarge", err)
	}
	if err := a.Send(a.LocalAddr(), &Frame{Kind: 9}); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("invalid kind Send = %v, want ErrMalformedFrame", err)
	}
	if err := a.Send(a.LocalAddr(), nil); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("nil frame Send = %v, want ErrMalformedFrame", err)
	}
	if err := a.Send("", &Frame{Kind: FrameOneWay}); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Send to an empty address = %v, want ErrUnreachable", err)
	}
	if d := a.Stats().FramesDropped; d != 4 {
		t.Fatalf("FramesDropped = %d, want 4", d)
	}
}

// stuckListener accepts connections and never reads from them.
func stuckListener(t testing.TB) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String(), func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

func TestTCPQueueFullAndCloseWithStuckPeer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	addr, stop := stuckListener(t)
	defer stop()
	a := newTestTCP(t, func(*Frame) {}, func(c *TCPConfig) {
		c.SendQueueSize = 4
		c.WriteTimeout = time.Hour
		c.MaxFrameSize = 1 << 20
	})
	body := make([]byte, 512<<10)
	full := false
	for i := 0; i < 10_000 && !full; i++ {
		err := a.Send(addr, &Frame{Kind: FrameOneWay, Body: body})
		switch {
		case errors.Is(err, ErrQueueFull):
			full = true
		case err != nil:
			t.Fatal(err)
		}
	}
	if !full {
		t.Fatal("the queue of a peer that does not read never filled")
	}
	// Close unblocks the writer stuck in a write.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestTCPWriteTimeoutDropsBatch(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	addr, stop := stuckListener(t)
	defer stop()
	a := newTestTCP(t, func(*Frame) {}, func(c *TCPConfig) {
		c.SendQueueSize = 4
		c.WriteTimeout = 20 * time.Millisecond
		c.MaxFrameSize = 1 << 20
		c.Logger = nil
	})
	defer a.Close()
	body := make([]byte, 512<<10)
	var refused atomic.Uint64
	waitCond(t, 10*time.Second, "a write to time out", func() bool {
		if err := a.Send(addr, &Frame{Kind: FrameOneWay, Body: body}); err != nil {
			refused.Add(1)
		}
		return a.Stats().FramesDropped > refused.Load()
	})
}

func TestTCPIdlePeerIsClosedAndRecreated(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h, ch := chanHandler(16)
	b := newTestTCP(t, h)
	defer b.Close()
	a := newTestTCP(t, func(*Frame) {}, func(c *TCPConfig) { c.IdleTimeout = 10 * time.Millisecond })
	defer a.Close()
	peers := func() int {
		a.mu.RLock()
		defer a.mu.RUnlock()
		return len(a.peers)
	}
	for round := range 2 {
		if err := a.Send(b.LocalAddr(), &Frame{Kind: FrameOneWay, Topic: "x"}); err != nil {
			t.Fatal(err)
		}
		recvFrame(t, ch, 5*time.Second)
		waitCond(t, 5*time.Second, fmt.Sprintf("round %d: idle peer writer to retire", round), func() bool { return peers() == 0 })
	}
}

func TestTCPCloseWhileTrafficFlows(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var got atomic.Int64
	count := func(*Frame) { got.Add(1) }
	quiet := func(c *TCPConfig) { c.Logger = nil }
	a := newTestTCP(t, count, quiet)
	b := newTestTCP(t, count, quiet)
	var wg sync.WaitGroup
	for _, pair := range [][2]*TCPTransport{{a, b}, {b, a}, {a, b}, {b, a}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := pair[0].Send(pair[1].LocalAddr(), &Frame{Kind: FrameOneWay, Body: make([]byte, 64)})
				if errors.Is(err, ErrTransportClosed) {
					return
				}
			}
		}()
	}
	waitCond(t, 10*time.Second, "traffic", func() bool { return got.Load() > 2000 })
	var cw sync.WaitGroup
	for _, tr := range []*TCPTransport{a, b} {
		cw.Add(1)
		go func() { defer cw.Done(); _ = tr.Close() }()
	}
	cw.Wait()
	wg.Wait()
}

func TestTCPConfigValidate(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	if err := DefaultTCPConfig().Validate(); err != nil {
		t.Fatalf("DefaultTCPConfig invalid: %v", err)
	}
	if err := DefaultLocalTCPConfig().Validate(); err != nil {
		t.Fatalf("DefaultLocalTCPConfig invalid: %v", err)
	}
	bad := []func(*TCPConfig){
		func(c *TCPConfig) { c.BindAddr = "nope" },
		func(c *TCPConfig) { c.AdvertiseAddr = "host" },
		func(c *TCPConfig) { c.AdvertiseAddr = "host:0" },
		func(c *TCPConfig) { c.MaxFrameSize = 0 },
		func(c *TCPConfig) { c.MaxFrameSize = 2 << 30 },
		func(c *TCPConfig) { c.SendQueueSize = 0 },
		func(c *TCPConfig) { c.DialTimeout = 0 },
		func(c *TCPConfig) { c.WriteTimeout = -1 },
		func(c *TCPConfig) { c.IdleTimeout = 0 },
		func(c *TCPConfig) { c.RedialBackoff = 0 },
		func(c *TCPConfig) { c.MaxRedialBackoff = time.Millisecond },
	}
	for i, change := range bad {
		c := DefaultLocalTCPConfig()
		change(&c)
		if err := c.Validate(); !errors.Is(err, ErrInvalidTransportConfig) {
			t.Errorf("case %d: Validate = %v, want ErrInvalidTransportConfig", i, err)
		}
		if _, err := NewTCPTransport(c, func(*Frame) {}); err == nil {
			t.Errorf("case %d: NewTCPTransport accepted an invalid config", i)
		}
	}
	if _, err := NewTCPTransport(DefaultLocalTCPConfig(), nil); !errors.Is(err, ErrInvalidTransportConfig) {
		t.Errorf("nil handler: %v", err)
	}
	c := DefaultLocalTCPConfig()
	c.BindAddr = "0.0.0.0:0"
	if _, err := NewTCPTransport(c, func(*Frame) {}); !errors.Is(err, ErrInvalidTransportConfig) {
		t.Errorf("unspecified bind address without AdvertiseAddr: %v", err)
	}
	c.AdvertiseAddr = "node-1.example:7947"
	tr, err := NewTCPTransport(c, func(*Frame) {})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if tr.LocalAddr() != c.AdvertiseAddr {
		t.Fatalf("LocalAddr = %q, want the advertise address", tr.LocalAddr())
	}
}

// testTLSConfig returns a mutual-TLS config whose certificate (for 127.0.0.1) is
// signed by a fresh CA that both sides trust.
func testTLSConfig(t testing.TB) *tls.Config {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "shardhost test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "node"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
}

func TestTCPMutualTLS(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := testTLSConfig(t)
	withTLS := func(c *TCPConfig) { c.TLSConfig = cfg; c.Logger = nil }
	const n = 500
	ra, rb := newSeqRecorder(n), newSeqRecorder(n)
	a := newTestTCP(t, ra.handle, withTLS)
	defer a.Close()
	b := newTestTCP(t, rb.handle, withTLS)
	defer b.Close()
	if err := sendSeq(a, b.LocalAddr(), n); err != nil {
		t.Fatal(err)
	}
	if err := sendSeq(b, a.LocalAddr(), n); err != nil {
		t.Fatal(err)
	}
	ra.wait(t, 10*time.Second)
	rb.wait(t, 10*time.Second)

	// A plaintext client is refused, and its bytes never reach the handler.
	c, err := net.Dial("tcp", a.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(stream(t, seqFrame(0))); err != nil {
		t.Fatal(err)
	}
	expectClosedByPeer(t, c)
	// A TLS client without a client certificate is refused too.
	noCert := cfg.Clone()
	noCert.Certificates = nil
	tc, err := tls.Dial("tcp", a.LocalAddr(), noCert)
	if err == nil {
		defer tc.Close()
		_, _ = tc.Write(stream(t, seqFrame(0)))
		_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := tc.Read(make([]byte, 1)); err == nil {
			t.Fatalf("a client without a certificate was served: %v", err)
		}
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if ra.total != n || ra.err != nil {
		t.Fatalf("after refused clients: total %d, err %v", ra.total, ra.err)
	}
}
