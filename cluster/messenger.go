package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Request is an incoming request or one-way message given to a topic Handler.
type Request struct {
	// From is the transport address of the sender.
	From string
	// Topic is the topic the message was sent to.
	Topic string
	// Body is the message's payload; the handler owns it.
	Body []byte

	id      uint64
	oneWay  bool
	replied atomic.Bool
	m       *Messenger
	ctx     context.Context
	span    trace.Span // the server span of a traced request, ended by Reply
	start   time.Time
	slot    *frameSlot // the request's share of its connection's frames in flight, or nil
	resp    Frame      // the reply, sent by Reply: one allocation with the request
}

// OneWay reports whether the sender expects no reply (the message came by Tell).
func (r *Request) OneWay() bool { return r.oneWay }

// Context returns the context of the request: the sender's trace context and baggage
// (Frame.Trace) and, for a traced request, the server span that Reply ends. It is never
// cancelled. Work done for the request starts its spans from it.
func (r *Request) Context() context.Context {
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}

// Reply answers the request with body, or with err if it is not nil (the requester
// then gets an error wrapping ErrRemote whose text is err.Error()). It may be
// called later and from any goroutine; only the first call counts, later calls are
// ignored. It is a no-op for a one-way message. Sending the reply is best effort:
// a failure is logged, and the requester times out.
func (r *Request) Reply(body []byte, err error) {
	if r.oneWay {
		return
	}
	if !r.replied.CompareAndSwap(false, true) {
		r.m.log.DebugContext(r.Context(), "reply called more than once; ignored", "topic", r.Topic, "from", r.From)
		return
	}
	if r.slot != nil {
		r.slot.release()
	}
	r.m.tel.serverDone(r, err)
	if r.From == "" {
		r.m.log.WarnContext(r.Context(), "request without a sender address; cannot reply", "topic", r.Topic)
		return
	}
	resp := &r.resp
	*resp = Frame{Kind: FrameResponse, ID: r.id, From: r.m.localAddr, Topic: r.Topic}
	if err != nil {
		resp.Error = err.Error()
		if resp.Error == "" {
			resp.Error = ErrRemote.Error()
		}
	} else {
		resp.Body = body
	}
	serr := r.m.transport.Send(r.From, resp)
	resp.Body = nil // the transport has encoded it
	if serr != nil {
		r.m.log.DebugContext(r.Context(), "sending reply failed", "topic", r.Topic, "to", r.From, "err", serr)
	}
}

// Handler handles the messages of one topic. It is called on the transport's
// reader goroutine, so it must not block: hand work off to another goroutine and
// Reply from there. A panic in a handler is recovered, logged, and answered with an
// error reply.
type Handler func(r *Request)

// remoteError is the error of a request whose remote handler replied with an error.
// Its text is the remote error's text; errors.Is(err, ErrRemote) holds.
type remoteError struct {
	// Msg is the remote error's text.
	Msg string
}

// Error returns the remote error's text.
func (e *remoteError) Error() string { return e.Msg }

// Unwrap returns ErrRemote.
func (e *remoteError) Unwrap() error { return ErrRemote }

// Messenger gives a Transport topics and request/response: handlers register per
// topic, Tell sends one-way messages, Request and RequestAsync send a request and
// wait for its reply with a deadline. Requests to the messenger's own address go
// through the transport like any other.
//
// All methods are safe for concurrent use.
type Messenger struct {
	log       *slog.Logger
	transport Transport
	localAddr string
	ready     chan struct{} // closed once transport is set

	handlersMu sync.Mutex                         // serialises Handle
	handlers   atomic.Pointer[map[string]Handler] // copy on write

	nextID  atomic.Uint64
	mu      sync.Mutex
	closed  bool
	pending map[uint64]*pendingRequest
	// timeouts are the pending requests with a timeout, earliest deadline first, and
	// timer fires at the earliest (at timerAt; zero when not set). One timer for them
	// all: a timer of its own for each request cost a tenth of a request's CPU.
	timeouts deadlineHeap
	timer    *time.Timer
	timerAt  time.Time
	once     sync.Once
	tel      *messengerTelemetry
}

// pendingRequest is a request awaiting its reply. Whoever removes it from
// Messenger.pending (reply, timeout, cancel, Close) completes it.
type pendingRequest struct {
	m  *Messenger
	cb func([]byte, error)
	id uint64
	// deadline is when a request sent with a timeout times out, and index its place
	// in Messenger.timeouts (-1 when it is not there).
	deadline    time.Time
	index       int
	addr, topic string
	timeout     time.Duration
	frame       Frame // the request, given to the transport: one allocation with p
}

// frameNotSent fails the request, if it still waits for its reply, with an error
// wrapping ErrNotSent: the transport dropped its frame before any of it left
// (notSentListener). The callback runs on a goroutine of its own, as expire's do (and
// for the same reason): the transport calls this from its own goroutines, or from
// Send's caller.
func (p *pendingRequest) frameNotSent(err error) {
	if p.m.take(p.id) == nil {
		return // answered, timed out or failed by Close meanwhile
	}
	go p.cb(nil, notSent(fmt.Errorf("cluster: request %q to %s: not sent: %w", p.topic, p.addr, err)))
}

// notSentError is the error of a request that never left this member: its text is
// its cause's, and errors.Is finds both ErrNotSent and what the cause wraps.
type notSentError struct{ cause error }

func (e *notSentError) Error() string   { return e.cause.Error() }
func (e *notSentError) Unwrap() []error { return []error{ErrNotSent, e.cause} }

// notSent marks err, the failure of a request before it left, with ErrNotSent.
func notSent(err error) error { return &notSentError{err} }

// MessengerOption configures a Messenger's telemetry.
type MessengerOption func(*messengerOptions)

type messengerOptions struct {
	tp   trace.TracerProvider
	mp   metric.MeterProvider
	prop propagation.TextMapPropagator
}

// WithTracing has the messenger carry the trace context of requests and tells in
// their frames (with prop; nil: W3C Trace Context and Baggage) and make a CLIENT span
// for each request sent, and a SERVER span for each request received, from a traced
// context (named by topic, with the rpc.* attributes of the semantic conventions,
// rpc.system = shardhost).
func WithTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator) MessengerOption {
	return func(o *messengerOptions) { o.tp, o.prop = tp, prop }
}

// WithMetrics has the messenger record rpc.client.duration and rpc.server.duration
// (milliseconds, by rpc.method) and its transport's counters (frames and bytes in and
// out, frames dropped, malformed frames, connection errors) when the transport has a
// Stats method.
func WithMetrics(mp metric.MeterProvider) MessengerOption {
	return func(o *messengerOptions) { o.mp = mp }
}

// NewMessenger creates a messenger and its transport: newTransport is called once
// with the messenger's FrameHandler, e.g.
//
//	m, err := NewMessenger(func(h FrameHandler) (Transport, error) {
//		return NewTCPTransport(cfg, h)
//	}, logger)
//
// Frames that arrive before newTransport returns wait for it. Register handlers
// with Handle before other nodes learn the address: a request for a topic without
// a handler gets an error reply. The messenger owns the transport and closes it in
// Close. A nil logger means slog.Default(). It returns newTransport's error, if any.
func NewMessenger(newTransport func(FrameHandler) (Transport, error), logger *slog.Logger, opts ...MessengerOption) (*Messenger, error) {
	if logger == nil {
		logger = slog.Default()
	}
	var o messengerOptions
	for _, opt := range opts {
		opt(&o)
	}
	m := &Messenger{
		log:     logger.With("component", "cluster.messenger"),
		ready:   make(chan struct{}),
		pending: make(map[uint64]*pendingRequest),
	}
	m.handlers.Store(&map[string]Handler{})
	t, err := newTransport(m.handleFrame)
	if err == nil && t == nil {
		err = fmt.Errorf("cluster: NewMessenger: newTransport returned no transport: %w", ErrInvalidTransportConfig)
	}
	if err != nil {
		close(m.ready)
		return nil, err
	}
	m.transport = t
	m.localAddr = t.LocalAddr()
	m.log = m.log.With("local", t.LocalAddr())
	m.tel = newMessengerTelemetry(o, t)
	close(m.ready)
	return m, nil
}

// LocalAddr returns the transport address of this messenger, which peers send to.
func (m *Messenger) LocalAddr() string { return m.localAddr }

// Transport returns the messenger's transport, e.g. for its stats.
func (m *Messenger) Transport() Transport { return m.transport }

// Handle registers h for topic. Register before traffic for the topic arrives.
// It panics if topic already has a handler, or topic is empty or h nil.
func (m *Messenger) Handle(topic string, h Handler) {
	if topic == "" || h == nil {
		panic("cluster: Messenger.Handle needs a topic and a handler")
	}
	m.handlersMu.Lock()
	defer m.handlersMu.Unlock()
	old := *m.handlers.Load()
	if _, dup := old[topic]; dup {
		panic(fmt.Sprintf("cluster: Messenger.Handle: topic %q already has a handler", topic))
	}
	next := make(map[string]Handler, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[topic] = h
	m.handlers.Store(&next)
}

// Tell sends body to topic at addr as a one-way message. It returns the
// transport's Send error (ErrTransportClosed, ErrQueueFull, ErrUnreachable,
// ErrFrameTooLarge); nil does not mean the message was delivered.
func (m *Messenger) Tell(addr, topic string, body []byte) error {
	return m.transport.Send(addr, &Frame{Kind: FrameOneWay, From: m.localAddr, Topic: topic, Body: body})
}

// TellContext is Tell carrying ctx's trace context and baggage (WithTracing) in the
// frame: the receiver's Request.Context has them. It makes no span: the caller's span
// is the message's producer.
func (m *Messenger) TellContext(ctx context.Context, addr, topic string, body []byte) error {
	return m.transport.Send(addr, &Frame{Kind: FrameOneWay, From: m.localAddr, Topic: topic, Body: body,
		Trace: m.tel.inject(ctx)})
}

// Request sends body to topic at addr and waits for the reply or for ctx. Errors:
// the remote handler's error (wrapping ErrRemote, text as sent), the transport's
// Send error, ErrTransportClosed if the messenger closes meanwhile, or ctx's error
// (a deadline also wraps ErrRequestTimeout). The error of a request that never left
// this member also wraps ErrNotSent (a Send error, a closed messenger, ctx done
// before the send, a frame the transport dropped before writing it). A request
// without a deadline whose reply is lost waits until ctx is cancelled or the
// messenger closes.
func (m *Messenger) Request(ctx context.Context, addr, topic string, body []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, notSent(requestCtxError(addr, topic, err))
	}
	type result struct {
		body []byte
		err  error
	}
	ch := make(chan result, 1)
	ctx, done := m.tel.clientStart(ctx, addr, topic)
	id, err := m.start(addr, topic, body, m.tel.inject(ctx), 0, func(b []byte, err error) { done(err); ch <- result{b, err} })
	if err != nil {
		done(err)
		return nil, err
	}
	select {
	case r := <-ch:
		return r.body, r.err
	case <-ctx.Done():
		if m.take(id) != nil {
			err := requestCtxError(addr, topic, ctx.Err())
			done(err)
			return nil, err
		}
		r := <-ch // completed meanwhile
		return r.body, r.err
	}
}

// RequestAsync sends body to topic at addr and calls cb exactly once, from some
// other goroutine (never the caller's), with the reply or an error: the remote
// handler's error (wrapping ErrRemote), the transport's Send error,
// ErrTransportClosed at Close, or after timeout an error wrapping both
// ErrRequestTimeout and context.DeadlineExceeded. A timeout <= 0 times out at
// once, unsent. The error of a request that never left this member also wraps
// ErrNotSent, as Request's does; a timeout, ErrTransportClosed at Close and a
// remote error do not (the request may have been handled). cb must not block: it
// may run on a transport reader goroutine.
func (m *Messenger) RequestAsync(addr, topic string, body []byte, timeout time.Duration, cb func([]byte, error)) {
	m.RequestAsyncContext(context.Background(), addr, topic, body, timeout, cb)
}

// RequestAsyncContext is RequestAsync carrying ctx's trace context and baggage
// (WithTracing), under a CLIENT span when ctx is traced; ctx's cancellation is not
// watched (timeout bounds the wait).
func (m *Messenger) RequestAsyncContext(ctx context.Context, addr, topic string, body []byte, timeout time.Duration, cb func([]byte, error)) {
	ctx, done := m.tel.clientStart(ctx, addr, topic)
	fail := func(err error) {
		time.AfterFunc(0, func() { done(err); cb(nil, err) })
	}
	if timeout <= 0 {
		fail(notSent(timeoutError(addr, topic, timeout)))
		return
	}
	reply := cb
	if m.tel.traced || m.tel.metered {
		reply = func(b []byte, err error) { done(err); cb(b, err) }
	}
	if _, err := m.start(addr, topic, body, m.tel.inject(ctx), timeout, reply); err != nil {
		fail(err)
	}
}

// start registers a pending request (with a timeout timer if timeout > 0) and sends
// it. On error (which wraps ErrNotSent) nothing stays registered and cb will not be
// called.
func (m *Messenger) start(addr, topic string, body []byte, traceCtx map[string]string, timeout time.Duration, cb func([]byte, error)) (uint64, error) {
	id := m.nextID.Add(1)
	p := &pendingRequest{m: m, cb: cb, id: id, index: -1, addr: addr, topic: topic}
	if timeout > 0 {
		p.deadline, p.timeout = time.Now().Add(timeout), timeout
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0, notSent(fmt.Errorf("cluster: request %q to %s: %w", topic, addr, ErrTransportClosed))
	}
	m.pending[id] = p
	if timeout > 0 {
		m.timeouts.push(p)
		if m.timerAt.IsZero() || p.deadline.Before(m.timerAt) {
			m.setTimerLocked(p.deadline)
		}
	}
	m.mu.Unlock()

	// p.frame is start's alone: whoever completes p does not read it. The transport
	// tells p if it drops the frame unsent (frameNotSent).
	p.frame = Frame{Kind: FrameRequest, ID: id, From: m.localAddr, Topic: topic, Body: body, Trace: traceCtx, notSent: p}
	err := m.transport.Send(addr, &p.frame)
	p.frame = Frame{} // the transport has encoded it; keep neither body nor trace
	if err != nil {
		if m.take(id) == nil {
			// Close (or, in theory, a timer) completed it meanwhile; cb has run.
			return 0, nil
		}
		return 0, notSent(err)
	}
	return id, nil
}

// take removes and returns the pending request id, or returns nil if it is no longer
// pending. The messenger's timer is left as it is: should it fire for a deadline
// that no request has any more, expire sets it for the next.
func (m *Messenger) take(id uint64) *pendingRequest {
	m.mu.Lock()
	p := m.pending[id]
	if p != nil {
		delete(m.pending, id)
		if p.index >= 0 {
			m.timeouts.remove(p.index)
		}
	}
	m.mu.Unlock()
	return p
}

// setTimerLocked has the messenger's timer fire at at; m.mu is held.
func (m *Messenger) setTimerLocked(at time.Time) {
	m.timerAt = at
	if m.timer == nil {
		m.timer = time.AfterFunc(time.Until(at), m.expire)
		return
	}
	m.timer.Reset(time.Until(at))
}

// expire times out every pending request whose deadline has passed, and sets the
// timer for the earliest deadline left. It runs on the timer's goroutine, and calls
// each callback on a goroutine of its own, as a timer of its own did: a callback that
// blocks (a caller's lock) delays no other. Those goroutines, like the timer's that
// RequestAsync's failures run on, are not the messenger's (no owner.Group): each runs
// one callback of the caller's and ends with it, and Close must not wait for a callback
// that may be waiting for its caller.
func (m *Messenger) expire() {
	var expired []*pendingRequest
	m.mu.Lock()
	now := time.Now()
	for len(m.timeouts) > 0 && !m.timeouts[0].deadline.After(now) {
		p := m.timeouts[0]
		m.timeouts.remove(0)
		delete(m.pending, p.id)
		expired = append(expired, p)
	}
	m.timerAt = time.Time{}
	if len(m.timeouts) > 0 && !m.closed {
		m.setTimerLocked(m.timeouts[0].deadline)
	}
	m.mu.Unlock()
	for _, p := range expired {
		go p.cb(nil, timeoutError(p.addr, p.topic, p.timeout))
	}
}

func timeoutError(addr, topic string, timeout time.Duration) error {
	return fmt.Errorf("cluster: request %q to %s: no reply within %v: %w (%w)",
		topic, addr, timeout, ErrRequestTimeout, context.DeadlineExceeded)
}

func requestCtxError(addr, topic string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("cluster: request %q to %s: %w (%w)", topic, addr, ErrRequestTimeout, err)
	}
	return fmt.Errorf("cluster: request %q to %s: %w", topic, addr, err)
}

// Close closes the transport (stopping its goroutines, so no more replies arrive),
// then fails every pending request with ErrTransportClosed, calling their
// callbacks on the caller's goroutine, and stops their timers. Later calls to Tell,
// Request and RequestAsync fail with ErrTransportClosed. It is idempotent and
// returns the transport's Close error from the first call.
func (m *Messenger) Close() error {
	var err error
	m.once.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		err = m.transport.Close()

		m.mu.Lock()
		pending := m.pending
		m.pending = make(map[uint64]*pendingRequest)
		m.timeouts = nil
		if m.timer != nil {
			m.timer.Stop()
		}
		m.timerAt = time.Time{}
		m.mu.Unlock()
		for _, p := range pending {
			p.cb(nil, fmt.Errorf("cluster: messenger closed: %w", ErrTransportClosed))
		}
	})
	return err
}

// handleFrame is the messenger's FrameHandler.
func (m *Messenger) handleFrame(f *Frame) {
	<-m.ready
	if m.transport == nil {
		return
	}
	switch f.Kind {
	case FrameResponse:
		p := m.take(f.ID)
		if p == nil {
			m.log.Debug("response to no pending request (late or unknown); dropped", "id", f.ID, "from", f.From, "topic", f.Topic)
			return
		}
		if f.Error != "" {
			p.cb(nil, &remoteError{Msg: f.Error})
			return
		}
		p.cb(f.Body, nil)
	case FrameRequest, FrameOneWay:
		r := &Request{From: f.From, Topic: f.Topic, Body: f.Body, id: f.ID, oneWay: f.Kind == FrameOneWay, m: m}
		if !r.oneWay && f.slot != nil {
			// A request counts among its connection's frames in flight until it is
			// answered (TCPConfig.MaxFramesInFlight). Should a handler drop it
			// unanswered, the collector frees its share.
			f.slot.held = true // Frame.Hold, without making a closure
			r.slot = f.slot
			runtime.AddCleanup(r, (*frameSlot).release, r.slot)
		}
		m.tel.serverStart(r, f.Trace)
		h := (*m.handlers.Load())[f.Topic]
		if h == nil {
			if r.oneWay {
				m.log.Warn("one-way message for a topic without a handler; dropped", "topic", f.Topic, "from", f.From)
				return
			}
			r.Reply(nil, fmt.Errorf("cluster: no handler for topic %s", f.Topic))
			return
		}
		m.callHandler(h, r)
	}
}

// callHandler runs h, turning a panic into a log line and an error reply.
func (m *Messenger) callHandler(h Handler, r *Request) {
	defer func() {
		if v := recover(); v != nil {
			m.log.ErrorContext(r.Context(), "topic handler panicked", "topic", r.Topic, "from", r.From, "panic", v)
			r.Reply(nil, fmt.Errorf("cluster: handler for topic %s panicked: %v", r.Topic, v))
		}
	}()
	h(r)
}

// deadlineHeap is a min-heap of pending requests by deadline; each one's index is its
// place in it.
type deadlineHeap []*pendingRequest

// push adds p.
func (h *deadlineHeap) push(p *pendingRequest) {
	p.index = len(*h)
	*h = append(*h, p)
	h.up(p.index)
}

// remove takes out the request at index i.
func (h *deadlineHeap) remove(i int) {
	s := *h
	last := len(s) - 1
	s[i].index = -1
	if i != last {
		s[i] = s[last]
		s[i].index = i
	}
	s[last] = nil
	*h = s[:last]
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h deadlineHeap) less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }

func (h deadlineHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h deadlineHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

// down sifts i down and reports whether it moved.
func (h deadlineHeap) down(i int) bool {
	start := i
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		c := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			c = r
		}
		if !h.less(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}
