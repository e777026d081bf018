package host

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/shardhost/shardhost/internal/testutil"
	"github.com/shardhost/shardhost/internal/testwasm"
)

// droppedLines reads shardhost.entity.log.dropped from reader, summed over types.
func droppedLines(t *testing.T, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "shardhost.entity.log.dropped" {
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					n += p.Value
				}
			}
		}
	}
	return n
}

// The ring keeps the newest lines up to its type's setting; lines beyond the rate are
// dropped and counted, and come back as the rate refills.
func TestEntityLogRingAndRate(t *testing.T) {
	now := time.Unix(1000, 0)
	reader := sdkmetric.NewManualReader()
	l := newEntityLogs(entityLogsConfig{rate: 5, clock: func() time.Time { return now },
		meter: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	l.setTypeLines("t", 3)
	kept := 0
	for i := range 15 {
		if l.add(context.Background(), "t", "a", "stdout", slog.LevelInfo, fmt.Sprint("line ", i), 0) {
			kept++
		}
	}
	if kept != 10 { // the burst: twice the rate
		t.Fatalf("kept %d of 15 lines at once, want the burst of 10", kept)
	}
	if d := droppedLines(t, reader); d != 5 {
		t.Fatalf("dropped metric %d, want 5", d)
	}
	lines, _ := l.since("t", "a", slog.LevelDebug, 0, 0)
	if len(lines) != 3 || lines[0].Text != "line 7" || lines[2].Text != "line 9" {
		t.Fatalf("ring of 3: %+v", lines)
	}
	now = now.Add(time.Second) // 5 more tokens
	for i := range 6 {
		l.add(context.Background(), "t", "a", "stderr", slog.LevelWarn, fmt.Sprint("later ", i), 0)
	}
	if d := droppedLines(t, reader); d != 6 {
		t.Fatalf("dropped metric %d after a second, want 6", d)
	}
	warn, _ := l.since("t", "a", slog.LevelWarn, 0, 0)
	if len(warn) != 3 || warn[2].Text != "later 4" || warn[2].Level != "warn" || warn[2].Stream != "stderr" {
		t.Fatalf("warn lines: %+v", warn)
	}
	// Another entity has its own rate, and its lines are apart.
	if !l.add(context.Background(), "t", "b", "log", slog.LevelError, "b's", 0) {
		t.Fatal("b's first line dropped")
	}
	if b, _ := l.since("t", "b", slog.LevelDebug, 0, 0); len(b) != 1 || b[0].Text != "b's" {
		t.Fatalf("b: %+v", b)
	}
	all, last := l.since("t", "", slog.LevelDebug, 0, 0)
	if len(all) != 4 || all[3].N != last {
		t.Fatalf("type t: %d lines, last %d: %+v", len(all), last, all)
	}
	if l.setTypeLines("t", 1); true {
		now = now.Add(time.Second)
		l.add(context.Background(), "t", "a", "stdout", slog.LevelInfo, "shrunk", 0)
		if a, _ := l.since("t", "a", slog.LevelDebug, 0, 0); len(a) != 1 || a[0].Text != "shrunk" {
			t.Fatalf("after shrinking to 1: %+v", a)
		}
	}
}

// The byte budget drops the rings written least recently.
func TestEntityLogByteBudget(t *testing.T) {
	l := newEntityLogs(entityLogsConfig{rate: -1, maxBytes: 100})
	for i := range 5 {
		l.add(context.Background(), "t", fmt.Sprint(i), "stdout", slog.LevelInfo, strings.Repeat("x", 40), 0)
	}
	all, _ := l.since("t", "", slog.LevelDebug, 0, 0)
	if len(all) != 2 || all[0].ID != "3" || all[1].ID != "4" {
		t.Fatalf("under a 100-byte budget: %+v", all)
	}
}

// logLines reads GET .../logs.
func logLines(t *testing.T, c apiClient, path string) []EntityLogLine {
	t.Helper()
	r := c.do("GET", path, nil)
	if r.status != 200 {
		t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	var page struct {
		Lines  []EntityLogLine `json:"lines"`
		Errors []string        `json:"errors"`
	}
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Errors) > 0 {
		t.Fatalf("GET %s: errors %v", path, page.Errors)
	}
	return page.Lines
}

// A wasm entity's stdout, stderr and log calls reach its log, readable from any
// member; a follow (from a member that may not host it) sees the lines the entity
// logs after a passivation and its next activation; a type's follow at warn sees only
// warn and above; lines beyond the rate are dropped, never failing the message.
func TestEntityLogsOfAWasmEntity(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	nodes := startNodes(t, 2, func(c *Config) { c.TracerProvider = tp })
	c0, c1 := client(t, nodes[0]), client(t, nodes[1])
	if r := c0.do("POST", "/v1/types/faulty", testwasm.Bytes(t, "faulty")); r.status != 200 {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	for _, msg := range []string{"print hello", "eprint oops", "log warn careful", "log debug detail"} {
		if r := c0.ask("faulty", "x", msg); r.status != 200 {
			t.Fatalf("%s: %d %s", msg, r.status, r.body)
		}
	}
	lines := logLines(t, c1, "/v1/entities/faulty/x/logs")
	var got []string
	for _, l := range lines {
		got = append(got, l.Stream+":"+l.Level+":"+l.Text)
		if l.Type != "faulty" || l.ID != "x" || l.Member == "" || l.TraceID == "" {
			t.Errorf("line %+v: want the entity, its member and a trace ID", l)
		}
	}
	if want := "stdout:info:hello stderr:warn:oops log:warn:careful log:debug:detail"; strings.Join(got, " ") != want {
		t.Fatalf("lines %q, want %q", strings.Join(got, " "), want)
	}
	if l := logLines(t, c0, "/v1/entities/faulty/x/logs?level=warn&limit=1"); len(l) != 1 || l[0].Text != "careful" {
		t.Fatalf("level=warn&limit=1: %+v", l)
	}
	// Under a journal, a line carries its message's record number.
	if r := c0.do("POST", "/v1/types/journaled?checkpoint=journal", testwasm.Bytes(t, "faulty")); r.status != 200 {
		t.Fatalf("deploy journaled: %d %s", r.status, r.body)
	}
	for _, msg := range []string{"print one", "print two"} {
		if r := c0.ask("journaled", "j", msg); r.status != 200 {
			t.Fatalf("%s: %d %s", msg, r.status, r.body)
		}
	}
	if l := logLines(t, c1, "/v1/entities/journaled/j/logs"); len(l) != 2 || l[0].Seq == 0 || l[1].Seq != l[0].Seq+1 {
		t.Fatalf("journaled lines: %+v, want consecutive seqs", l)
	}
	// A type's log_lines bounds its entities' rings, on every member; a bad value
	// changes nothing.
	if r := c0.do("POST", "/v1/types/short?log_lines=100001", testwasm.Bytes(t, "faulty")); r.status != 400 || !strings.Contains(r.err.Error, "log_lines") {
		t.Fatalf("log_lines=100001: %d %s", r.status, r.body)
	}
	if r := c0.do("POST", "/v1/types/short?log_lines=2", testwasm.Bytes(t, "faulty")); r.status != 200 || !strings.Contains(string(r.body), `"log_lines": 2`) {
		t.Fatalf("deploy short: %d %s", r.status, r.body)
	}
	for _, id := range []string{"s1", "s2", "s3", "s4"} { // on either member
		for _, msg := range []string{"print a", "print b", "print c"} {
			if r := c0.ask("short", id, msg); r.status != 200 {
				t.Fatalf("%s: %d %s", msg, r.status, r.body)
			}
		}
		if l := logLines(t, c1, "/v1/entities/short/"+id+"/logs"); len(l) != 2 || l[0].Text != "b" || l[1].Text != "c" {
			t.Fatalf("short/%s keeps %+v, want b and c", id, l)
		}
	}
	if r := c0.do("GET", "/v1/entities/faulty/x/logs?level=loud", nil); r.status != 400 || !strings.Contains(r.err.Error, "level") {
		t.Fatalf("level=loud: %d %s", r.status, r.body)
	}
	if r := c0.do("GET", "/v1/entities/nosuch/x/logs", nil); r.status != 404 {
		t.Fatalf("unknown type: %d %s", r.status, r.body)
	}

	// Follow the entity from the second member and the type at warn from the first.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	entity := follow(t, ctx, c1.base+"/v1/entities/faulty/x/logs?follow=1")
	typeWarn := follow(t, ctx, c0.base+"/v1/logs?type=faulty&level=warn&follow=1")
	for _, want := range []string{"hello", "oops", "careful", "detail"} { // the backlog
		if l := next(t, entity); l.Text != want {
			t.Fatalf("backlog: %q, want %q", l.Text, want)
		}
	}
	if r := c0.do("POST", "/v1/passivate?type=faulty&id=x", nil); r.status != 200 {
		t.Fatalf("passivate: %d %s", r.status, r.body)
	}
	if r := c1.ask("faulty", "x", "print back"); r.status != 200 {
		t.Fatalf("after passivation: %d %s", r.status, r.body)
	}
	if r := c1.ask("faulty", "y", "log error from y"); r.status != 200 {
		t.Fatalf("y: %d %s", r.status, r.body)
	}
	if l := next(t, entity); l.Text != "back" {
		t.Fatalf("followed after the activation: %+v", l)
	}
	for _, want := range []string{"oops", "careful"} { // the type's backlog at warn
		if l := next(t, typeWarn); l.Text != want {
			t.Fatalf("type backlog: %q, want %q", l.Text, want)
		}
	}
	if l := next(t, typeWarn); l.Text != "from y" || l.ID != "y" || l.Level != "error" {
		t.Fatalf("type at warn: %+v, want y's error (x's info line filtered out)", l)
	}
}

// follow opens a follow and returns its lines as they come; the stream ends with ctx.
func follow(t *testing.T, ctx context.Context, url string) <-chan EntityLogLine {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("follow %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan EntityLogLine, 100)
	done := make(chan struct{})
	go func() { // owned by the test: ends when ctx closes the body
		defer close(done)
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				event = e
				continue
			}
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			if event != "" {
				event = ""
				continue // an error event: a member that did not answer
			}
			var l EntityLogLine
			if json.Unmarshal([]byte(data), &l) == nil {
				ch <- l
			}
		}
	}()
	t.Cleanup(func() { <-done })
	return ch
}

func next(t *testing.T, ch <-chan EntityLogLine) EntityLogLine {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatal("the follow ended")
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatal("no line within 60 s")
	}
	return EntityLogLine{}
}

// A wasm entity over its rate keeps answering; the lines beyond are dropped.
func TestEntityLogRateDropsWasmLines(t *testing.T) {
	nodes := startNodes(t, 1, func(c *Config) { c.Runtime.EntityLogRate = 0.001 }) // one line, then one per 1000 s
	c := client(t, nodes[0])
	if r := c.do("POST", "/v1/types/faulty", testwasm.Bytes(t, "faulty")); r.status != 200 {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	for i := range 5 {
		if r := c.ask("faulty", "x", fmt.Sprint("print ", i)); r.status != 200 || string(r.body) != "printed" {
			t.Fatalf("print %d: %d %s", i, r.status, r.body)
		}
	}
	testutil.EventuallyNil(t, 10*time.Second, "one line kept", func() error {
		if l := logLines(t, c, "/v1/entities/faulty/x/logs"); len(l) != 1 || l[0].Text != "0" {
			return fmt.Errorf("%+v", l)
		}
		return nil
	})
}

// recordingExporter keeps the log records it is given.
type recordingExporter struct {
	mu      sync.Mutex
	records []sdklog.Record
}

func (e *recordingExporter) Export(_ context.Context, rs []sdklog.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range rs {
		e.records = append(e.records, r.Clone())
	}
	return nil
}
func (e *recordingExporter) Shutdown(context.Context) error   { return nil }
func (e *recordingExporter) ForceFlush(context.Context) error { return nil }

// A line goes to the OpenTelemetry logs pipeline with the entity, its seq, its level
// and its message's trace.
func TestEntityLogExportsOpenTelemetryRecords(t *testing.T) {
	exp := &recordingExporter{}
	lp := sdklog.NewLoggerProvider(sdklog.WithProcessor(sdklog.NewSimpleProcessor(exp)))
	defer lp.Shutdown(context.Background())
	l := newEntityLogs(entityLogsConfig{provider: lp})
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "message")
	l.add(ctx, "t", "a", "log", slog.LevelWarn, "careful", 7)
	span.End()
	exp.mu.Lock()
	defer exp.mu.Unlock()
	if len(exp.records) != 1 {
		t.Fatalf("%d records, want 1", len(exp.records))
	}
	r := exp.records[0]
	attrs := map[string]string{}
	r.WalkAttributes(func(kv attribute.KeyValue) bool { attrs[string(kv.Key)] = kv.Value.Emit(); return true })
	if r.Body().AsString() != "careful" || r.Severity() != otellog.SeverityWarn || r.TraceID() != span.SpanContext().TraceID() ||
		attrs["shardhost.entity"] != "t/a" || attrs["shardhost.message.seq"] != "7" || attrs["shardhost.log.stream"] != "log" {
		t.Fatalf("record: body %q severity %v trace %v attrs %v", r.Body().AsString(), r.Severity(), r.TraceID(), attrs)
	}
}

// A follow goes on across a handoff: the member that ran the entity leaves, and the
// line the entity logs on its new member reaches the follower.
func TestEntityLogFollowAcrossAHandoff(t *testing.T) {
	nodes := startNodes(t, 3, nil)
	c := client(t, nodes[0])
	if r := c.do("POST", "/v1/types/faulty", testwasm.Bytes(t, "faulty")); r.status != 200 {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	// An entity that lives on a member other than nodes[0], which the follow asks.
	id, host := "", -1
	for i := 0; host < 1; i++ {
		id = fmt.Sprint("h", i)
		r := c.ask("faulty", id, "print before")
		if r.status != 200 {
			t.Fatalf("ask %s: %d %s", id, r.status, r.body)
		}
		for k, n := range nodes {
			if n.Self().Address == r.node {
				host = k
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lines := follow(t, ctx, c.base+"/v1/entities/faulty/"+id+"/logs?follow=1")
	if l := next(t, lines); l.Text != "before" || l.Member != nodes[host].Self().Address {
		t.Fatalf("backlog: %+v", l)
	}
	if err := nodes[host].Close(); err != nil { // a graceful leave: its shards are handed off
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, 60*time.Second, "the entity answers on its new member", func() error {
		if r := c.ask("faulty", id, "print after"); r.status != 200 {
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		return nil
	})
	l := next(t, lines)
	if l.Text != "after" || l.Member == nodes[host].Self().Address {
		t.Fatalf("after the handoff: %+v", l)
	}
}

// BenchmarkEntityLogAdd is the cost of one kept line (no follower, no export), over
// 1,000 entities with full rings.
func BenchmarkEntityLogAdd(b *testing.B) {
	l := newEntityLogs(entityLogsConfig{rate: -1})
	ctx := context.Background()
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprint("e", i)
	}
	text := strings.Repeat("x", 80)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.add(ctx, "t", ids[i%len(ids)], "stdout", slog.LevelInfo, text, 0)
	}
}
