package host

import (
	"cmp"
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/internal/obs"
)

// Per-entity logs (docs/observability.md, "Entity logs"): what a guest writes to stdout
// and stderr and what it passes to the log host function goes, line by line, to a
// bounded ring per entity on the member that runs it, to the followers of that entity
// or of its type, and to the OpenTelemetry logs pipeline when one is configured. A line
// over the entity's rate is dropped and counted; nothing here ever blocks the guest.

const (
	// DefaultEntityLogLines is how many lines an entity's ring keeps when its type sets
	// no other number.
	DefaultEntityLogLines = 1000
	// MaxEntityLogLines is the largest per-type ring size a deployment may ask for.
	MaxEntityLogLines = 100_000
	// DefaultEntityLogRate is how many lines per second an entity may log, on average,
	// before lines are dropped (RuntimeConfig.EntityLogRate); it may log twice that (at
	// least one line) in a burst.
	DefaultEntityLogRate = 100
	// DefaultEntityLogBytes bounds the text all the rings of a member hold, in bytes
	// (RuntimeConfig.EntityLogBytes): past it, the rings written least recently are dropped.
	DefaultEntityLogBytes = 64 << 20
	// followPage is the most lines one poll of a member returns to a follower.
	followPage = 1000
)

// EntityLogLine is one line of an entity's log.
type EntityLogLine struct {
	// N numbers the lines of every entity on the member that logged it, from 1, in
	// the order the member received them; it restarts with the member.
	N uint64 `json:"n"`
	// Time is when the host received the line.
	Time time.Time `json:"time"`
	// Type and ID name the entity.
	Type string `json:"type"`
	ID   string `json:"id"`
	// Member is the transport address of the member that ran the entity.
	Member string `json:"member,omitempty"`
	// Level is "debug", "info", "warn" or "error": stdout is info, stderr warn, and a
	// log call's is its level.
	Level string `json:"level"`
	// Stream is "stdout", "stderr" or "log" (the log host function).
	Stream string `json:"stream"`
	// Text is the line, without its newline, cut at 4 KiB.
	Text string `json:"text"`
	// Seq is the sequence number of the message being handled, when the entity's
	// journal numbered it; 0 otherwise.
	Seq uint64 `json:"seq,omitempty"`
	// TraceID is the W3C trace ID of the message being handled, hex; empty when it
	// had none.
	TraceID string `json:"trace_id,omitempty"`
}

// levelName names an slog level the way EntityLogLine.Level does.
func levelName(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	}
	return "error"
}

// ParseLogLevel reads "debug", "info", "warn" or "error" (any case) as a log/slog
// level. An empty string is debug: every line. Other text is an error wrapping
// ErrBadRequest.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "", "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%w: level=%q is not debug, info, warn or error", ErrBadRequest, s)
}

// entityRing is one entity's lines, oldest first from start, and its rate bucket.
type entityRing struct {
	name   string
	lines  []EntityLogLine
	start  int // index of the oldest line when the ring is full
	bytes  int64
	tokens float64
	filled time.Time // when tokens was last topped up
	elem   *list.Element
}

// add appends l, dropping the oldest line past capacity; it returns the bytes added
// (negative when the line dropped was longer).
func (r *entityRing) add(l EntityLogLine, capacity int) int64 {
	size := int64(len(l.Text))
	if len(r.lines) < capacity {
		r.lines = append(r.lines, l)
		r.bytes += size
		return size
	}
	if len(r.lines) > capacity { // the type's setting shrank: keep the newest
		r.lines = append(r.lines[:0:0], r.ordered()[len(r.lines)-capacity:]...)
		r.start = 0
		var b int64
		for _, x := range r.lines {
			b += int64(len(x.Text))
		}
		size -= r.bytes - b
		r.bytes = b
	}
	old := int64(len(r.lines[r.start].Text))
	r.lines[r.start] = l
	r.start = (r.start + 1) % len(r.lines)
	r.bytes += int64(len(l.Text)) - old
	return size - old
}

// ordered returns the lines oldest first, in a new slice.
func (r *entityRing) ordered() []EntityLogLine {
	out := make([]EntityLogLine, 0, len(r.lines))
	out = append(out, r.lines[r.start:]...)
	return append(out, r.lines[:r.start]...)
}

// logFollower is told through ch of a new line of one entity (id set) or of a type
// (id empty), at min or above; a signal it has no room for is not needed (one waits).
type logFollower struct {
	typ, id string
	min     slog.Level
	ch      chan EntityLogLine
}

func (f *logFollower) wants(typ, id string, level slog.Level) bool {
	return level >= f.min && f.typ == typ && (f.id == "" || f.id == id)
}

// entityLogs holds the rings of a member's entities.
type entityLogs struct {
	rate     float64 // lines per second per entity; <= 0: no limit
	maxBytes int64
	member   string
	clock    func() time.Time
	otel     otellog.Logger // nil: no OpenTelemetry export
	dropped  metric.Int64Counter
	lines    metric.Int64Counter
	byType   *obs.AttrCache[string]

	epoch int64 // when l was made, in Unix nanoseconds: tells a restarted member's lines apart

	mu        sync.Mutex
	seq       uint64 // the N of the last line
	rings     map[string]*entityRing
	lru       *list.List // of *entityRing, least recently written first
	bytes     int64
	typeLines map[string]int
	followers map[*logFollower]struct{}
}

// entityLogsConfig configures newEntityLogs.
type entityLogsConfig struct {
	rate     float64
	maxBytes int64
	member   string
	clock    func() time.Time
	provider otellog.LoggerProvider
	meter    metric.MeterProvider
}

func newEntityLogs(c entityLogsConfig) *entityLogs {
	if c.rate == 0 {
		c.rate = DefaultEntityLogRate
	}
	if c.maxBytes <= 0 {
		c.maxBytes = DefaultEntityLogBytes
	}
	if c.clock == nil {
		c.clock = time.Now
	}
	m := obs.Meter(c.meter, "host")
	l := &entityLogs{epoch: time.Now().UnixNano(), rate: c.rate, maxBytes: c.maxBytes, member: c.member, clock: c.clock,
		rings: map[string]*entityRing{}, lru: list.New(), typeLines: map[string]int{}, followers: map[*logFollower]struct{}{},
		byType: obs.NewAttrCache(func(typ string) attribute.Set { return attribute.NewSet(obs.EntityType.String(typ)) })}
	l.dropped = obs.Must(m.Int64Counter("shardhost.entity.log.dropped", metric.WithUnit("{line}"),
		metric.WithDescription("Entity log lines dropped because the entity logged faster than the member's per-entity rate (--entity-log-rate). [shardhost.entity.type]")))
	l.lines = obs.Must(m.Int64Counter("shardhost.entity.log.lines", metric.WithUnit("{line}"),
		metric.WithDescription("Entity log lines kept: guest stdout, stderr and log calls. [shardhost.entity.type]")))
	if c.provider != nil {
		l.otel = c.provider.Logger("github.com/shardhost/shardhost/host/entity")
	}
	return l
}

// burst is how many lines an entity may log at once: twice its rate, at least one.
func (l *entityLogs) burst() float64 { return max(2*l.rate, 1) }

// setTypeLines sets how many lines the rings of typ keep; n <= 0 restores the default.
func (l *entityLogs) setTypeLines(typ string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n <= 0 {
		delete(l.typeLines, typ)
		return
	}
	l.typeLines[typ] = n
}

// capacityOf returns the ring size of typ; l.mu is held.
func (l *entityLogs) capacityOf(typ string) int {
	if n, ok := l.typeLines[typ]; ok {
		return n
	}
	return DefaultEntityLogLines
}

// add keeps one line of the entity typ/id, unless the entity is over its rate (then
// the line is counted in shardhost.entity.log.dropped). It never blocks: a follower
// with no room loses the line. ctx is the message's (its trace ID goes with the line).
func (l *entityLogs) add(ctx context.Context, typ, id, stream string, level slog.Level, text string, seq uint64) bool {
	now := l.clock()
	name := typ + "/" + id
	l.mu.Lock()
	r := l.rings[name]
	if r == nil {
		r = &entityRing{name: name, tokens: l.burst(), filled: now}
		r.elem = l.lru.PushBack(r)
		l.rings[name] = r
	} else {
		l.lru.MoveToBack(r.elem)
	}
	if l.rate > 0 {
		r.tokens = min(l.burst(), r.tokens+now.Sub(r.filled).Seconds()*l.rate)
		r.filled = now
		if r.tokens < 1 {
			l.mu.Unlock()
			l.dropped.Add(context.Background(), 1, l.byType.Get(typ))
			return false
		}
		r.tokens--
	}
	l.seq++
	line := EntityLogLine{N: l.seq, Time: now, Type: typ, ID: id, Member: l.member, Level: levelName(level),
		Stream: stream, Text: text, Seq: seq}
	var sc trace.SpanContext
	if ctx != nil {
		sc = trace.SpanContextFromContext(ctx)
		if sc.HasTraceID() {
			line.TraceID = sc.TraceID().String()
		}
	}
	l.bytes += r.add(line, l.capacityOf(typ))
	for l.bytes > l.maxBytes && l.lru.Front() != nil && l.lru.Front().Value.(*entityRing) != r {
		old := l.lru.Remove(l.lru.Front()).(*entityRing)
		delete(l.rings, old.name)
		l.bytes -= old.bytes
	}
	for f := range l.followers {
		if f.wants(typ, id, level) {
			select {
			case f.ch <- line:
			default:
			}
		}
	}
	l.mu.Unlock()
	l.lines.Add(context.Background(), 1, l.byType.Get(typ))
	if l.otel != nil {
		l.export(ctx, line, level, sc)
	}
	return true
}

// export emits line as an OpenTelemetry log record: the body is the text; the
// attributes the entity, the stream, the member's line number and the message's seq;
// the trace context the message's.
func (l *entityLogs) export(ctx context.Context, line EntityLogLine, level slog.Level, sc trace.SpanContext) {
	var rec otellog.Record
	rec.SetTimestamp(line.Time)
	rec.SetObservedTimestamp(line.Time)
	rec.SetBody(attribute.StringValue(line.Text))
	rec.SetSeverity(otellog.Severity(int(level) + int(otellog.SeverityInfo)))
	rec.SetSeverityText(strings.ToUpper(line.Level))
	rec.AddAttributes(
		attribute.String("shardhost.entity.type", line.Type),
		attribute.String("shardhost.entity.id", line.ID),
		attribute.String("shardhost.entity", line.Type+"/"+line.ID),
		attribute.String("shardhost.log.stream", line.Stream),
		attribute.Int64("shardhost.log.n", int64(line.N)),
	)
	if line.Seq != 0 {
		rec.AddAttributes(attribute.Int64("shardhost.message.seq", int64(line.Seq)))
	}
	if ctx == nil || !sc.IsValid() {
		ctx = context.Background()
	}
	l.otel.Emit(ctx, rec)
}

// since returns the lines of the entity typ/id (of every entity of typ when id is
// empty) at level min or above whose N is over after, oldest first: the last limit of
// them when limit > 0. last is the N of the member's last line of any entity, the
// cursor of the next call.
func (l *entityLogs) since(typ, id string, minLevel slog.Level, after uint64, limit int) (lines []EntityLogLine, last uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pick := func(r *entityRing) {
		for _, line := range r.ordered() {
			if line.N > after {
				if lv, _ := ParseLogLevel(line.Level); lv >= minLevel {
					lines = append(lines, line)
				}
			}
		}
	}
	if id != "" {
		if r := l.rings[typ+"/"+id]; r != nil {
			pick(r)
		}
	} else {
		prefix := typ + "/"
		for name, r := range l.rings {
			if strings.HasPrefix(name, prefix) {
				pick(r)
			}
		}
		slices.SortFunc(lines, func(a, b EntityLogLine) int { return cmp.Compare(a.N, b.N) })
	}
	if limit > 0 && len(lines) > limit {
		lines = lines[len(lines)-limit:]
	}
	return lines, l.seq
}

// waitSince is since, except that when there is no line yet it waits, up to wait or
// until ctx is done, for the first one.
func (l *entityLogs) waitSince(ctx context.Context, typ, id string, minLevel slog.Level, after uint64, limit int, wait time.Duration) ([]EntityLogLine, uint64) {
	if wait <= 0 {
		return l.since(typ, id, minLevel, after, limit)
	}
	f := &logFollower{typ: typ, id: id, min: minLevel, ch: make(chan EntityLogLine, 1)}
	l.mu.Lock()
	l.followers[f] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.followers, f)
		l.mu.Unlock()
	}()
	if lines, last := l.since(typ, id, minLevel, after, limit); len(lines) > 0 {
		return lines, last
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-f.ch:
	case <-t.C:
	case <-ctx.Done():
	}
	return l.since(typ, id, minLevel, after, limit)
}
