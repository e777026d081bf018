package sharding

import (
	"context"
	"log/slog"
	"sync"
)

// logRecorder is a slog.Handler that keeps every record: its level, message and
// attributes (each as its Value's String; a logger's With attributes are dropped).
type logRecorder struct {
	mu      sync.Mutex
	records []logRecord
}

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	lr := logRecord{level: rec.Level, msg: rec.Message, attrs: map[string]string{}}
	rec.Attrs(func(a slog.Attr) bool {
		lr.attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, lr)
	return nil
}

// find returns the records whose message is msg and whose attributes include those
// of want (key, value pairs).
func (r *logRecorder) find(msg string, want ...string) []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRecord
next:
	for _, lr := range r.records {
		if lr.msg != msg {
			continue
		}
		for i := 0; i+1 < len(want); i += 2 {
			if lr.attrs[want[i]] != want[i+1] {
				continue next
			}
		}
		out = append(out, lr)
	}
	return out
}
