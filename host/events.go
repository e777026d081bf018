package host

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// consoleEvents is how many recent events the console shows.
const consoleEvents = 200

// consoleEventMessages are the log messages, besides every warning and error, that the
// console lists as events: what happened to the cluster, its shards and its types.
var consoleEventMessages = map[string]bool{
	"shard handed off": true, "entity type deployed": true, "entity type stopped": true,
	"singleton starting here": true, "singleton stopping here": true, "shard coordinator active": true,
	"membership: member-up": true, "membership: member-left": true, "membership: member-exited": true,
	"membership: member-downed": true, "membership: member-removed": true,
	"membership: unreachable-member": true, "membership: reachable-member": true,
	"membership: leader-changed": true, "leaving the cluster": true,
}

// event is one kept log record.
type event struct {
	Time    time.Time
	Level   slog.Level
	Message string
	Attrs   []slog.Attr
}

// eventRing keeps the most recent events a node logs, newest last.
type eventRing struct {
	mu     sync.Mutex
	events []event
	next   int
	full   bool
}

func newEventRing(size int) *eventRing { return &eventRing{events: make([]event, size)} }

// recent returns the kept events, newest first.
func (r *eventRing) recent() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event
	n := r.next
	if r.full {
		n = len(r.events)
	}
	for i := 1; i <= n; i++ {
		out = append(out, r.events[(r.next-i+len(r.events))%len(r.events)])
	}
	return out
}

func (r *eventRing) add(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[r.next] = e
	r.next = (r.next + 1) % len(r.events)
	if r.next == 0 {
		r.full = true
	}
}

// handler returns a slog.Handler that passes every record to h and keeps the events.
func (r *eventRing) handler(h slog.Handler) slog.Handler { return eventHandler{h, r, nil} }

type eventHandler struct {
	slog.Handler
	ring  *eventRing
	attrs []slog.Attr
}

func (h eventHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelWarn || consoleEventMessages[rec.Message] {
		attrs := append([]slog.Attr(nil), h.attrs...)
		rec.Attrs(func(a slog.Attr) bool {
			attrs = append(attrs, a)
			return true
		})
		h.ring.add(event{Time: rec.Time, Level: rec.Level, Message: rec.Message, Attrs: attrs})
	}
	return h.Handler.Handle(ctx, rec)
}

func (h eventHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return eventHandler{h.Handler.WithAttrs(attrs), h.ring, append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

func (h eventHandler) WithGroup(name string) slog.Handler {
	return eventHandler{h.Handler.WithGroup(name), h.ring, h.attrs}
}
