package host

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/host/internal/wasmbin"
	"github.com/shardhost/shardhost/internal/testwasm"
	"github.com/shardhost/shardhost/sharding"
)

func TestJournalEffectsRoundTrip(t *testing.T) {
	calls := []hostRecord{
		{fn: "tell"},
		{fn: "now", ret: 1_700_000_000_123_456_789},
		{fn: "ask", ret: 3, result: []byte("reply")},
		{fn: "random", ret: 0, mem: []byte{1, 2, 3, 4}},
		{fn: "tell_key"},
		{fn: "ask_key", ret: 9, result: []byte("its first error")},
		{fn: "a_future_function", ret: 7, result: []byte{0}},
	}
	extras := &entityExtras{Timers: []savedTimer{{Name: "tick", Message: []byte("m"), Due: 42, Interval: 1000}},
		Subscriptions: []string{"k1", "k2"}}
	for _, c := range []struct {
		calls  []hostRecord
		extras *entityExtras
	}{{nil, nil}, {calls, nil}, {nil, extras}, {calls, extras}} {
		b, err := encodeEffects(c.calls, c.extras)
		if err != nil {
			t.Fatal(err)
		}
		gotCalls, gotExtras, err := decodeEffects(b)
		if err != nil {
			t.Fatalf("decode of %d calls, extras %v: %v", len(c.calls), c.extras != nil, err)
		}
		if len(c.calls) == 0 {
			gotCalls = nil
		}
		if !reflect.DeepEqual(gotCalls, c.calls) || !reflect.DeepEqual(gotExtras, c.extras) {
			t.Fatalf("round trip:\n got %+v %+v\nwant %+v %+v", gotCalls, gotExtras, c.calls, c.extras)
		}
	}
	// A known function costs one byte of name: a call to now is 1 + its varint.
	b, _ := encodeEffects([]hostRecord{{fn: "now", ret: 1 << 62}}, nil)
	if len(b) > 16 {
		t.Fatalf("a call to now takes %d bytes of effects, want at most 16", len(b))
	}
}

func TestJournalEffectsRefuseGarbage(t *testing.T) {
	good, _ := encodeEffects([]hostRecord{{fn: "ask", result: []byte("x")}}, &entityExtras{Subscriptions: []string{"k"}})
	for name, b := range map[string][]byte{
		"version":   append([]byte{9}, good[1:]...),
		"truncated": good[:len(good)-1],
		"extra":     append(bytes.Clone(good), 0),
		"function":  {journalEffectsVersion, 1, 200, 0, 0, 0, 0},
		"calls":     {journalEffectsVersion, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		if _, _, err := decodeEffects(b); !errors.Is(err, errBadEffects) {
			t.Fatalf("%s: %v, want errBadEffects", name, err)
		}
	}
}

func FuzzDecodeJournalEffects(f *testing.F) {
	good, _ := encodeEffects([]hostRecord{{fn: "ask", ret: 1, result: []byte("x")}, {fn: "random", mem: []byte{1}}},
		&entityExtras{Subscriptions: []string{"k"}})
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		calls, extras, err := decodeEffects(b)
		if err != nil {
			if !errors.Is(err, errBadEffects) {
				t.Fatalf("%v: not errBadEffects", err)
			}
			return
		}
		if _, err := encodeEffects(calls, extras); err != nil {
			t.Fatal(err)
		}
	})
}

// The numbers of the host functions in a record's effects are part of its format: each
// keeps its number (new ones are appended), and every host function whose calls are
// recorded has one.
func TestJournalCallNumbersAreStable(t *testing.T) {
	want := []string{"tell", "ask", "forward", "ddata_get", "ddata_update", "ddata_delete", "ddata_subscribe",
		"ddata_unsubscribe", "timer_start", "timer_cancel", "now", "random", "tell_key", "ask_key", "http_request", "reminder_set",
		"reminder_cancel", "reminder_list"}
	if !reflect.DeepEqual(journalCallNames, want) {
		t.Fatalf("journalCallNames %q, want %q (append, never reorder)", journalCallNames, want)
	}
	for name, effect := range hostEffects {
		if effect == effectRecord && journalCallIndex[name] == 0 {
			t.Errorf("%s is recorded but has no number in journalCallNames", name)
		}
	}
}

// A tell and an ask with an idempotency key are recorded like tell and ask, in every
// abitest build: the record keeps the ask's reply, survives the journal's encoding, and
// a replay answers both from it without sending anything.
func TestJournalRecordsSendsWithKeys(t *testing.T) {
	for _, ct := range conformanceTypes {
		t.Run(ct.typ, func(t *testing.T) {
			if ct.tinygo {
				testwasm.RequireTinyGo(t)
			}
			rt, _ := newTestRuntime(t, nil)
			m, err := rt.Compile(context.Background(), ct.wasm(t))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			inst := mustInstantiate(t, m, ct.typ, "s")
			svc := newFakeServices()
			inst.svc = svc
			inst.startRecording()
			if out, err := inst.Receive(ctx, []byte("tellkey k1 other/b count")); err != nil || string(out) != "ok" {
				t.Fatalf("tellkey: %q %v", out, err)
			}
			if svc.last.IdempotencyKey != "k1" || svc.last.EntityID != "b" || string(svc.last.Payload) != "count" {
				t.Fatalf("told %+v", svc.last)
			}
			if out, err := inst.Receive(ctx, []byte("askkey k2 other/c echo hi")); err != nil || string(out) != "re: echo hi" {
				t.Fatalf("askkey: %q %v", out, err)
			}
			if svc.last.IdempotencyKey != "k2" || svc.last.Sender != ct.typ+"/s" {
				t.Fatalf("asked %+v", svc.last)
			}
			calls := inst.stopRecording()
			if len(calls) != 2 || calls[0].fn != abi.ImportTellKey || calls[1].fn != abi.ImportAskKey ||
				string(calls[1].result) != "re: echo hi" {
				t.Fatalf("recorded %+v, want tell_key, then ask_key with its reply", calls)
			}
			b, err := encodeEffects(calls, nil)
			if err != nil {
				t.Fatal(err)
			}
			decoded, _, err := decodeEffects(b)
			if err != nil || !reflect.DeepEqual(decoded, calls) {
				t.Fatalf("effects round trip: %+v %v, want %+v", decoded, err, calls)
			}
			// Both messages replayed in a new instance, from the record: nothing is sent.
			replay := mustInstantiate(t, m, ct.typ, "s")
			quiet := newFakeServices()
			replay.svc = quiet
			tellCalls, askCalls := decoded[:1], decoded[1:]
			if err := replay.replay(wasmbin.OpReceive, []byte("tellkey k1 other/b count"), sharding.MessageInfo{}, tellCalls); err != nil {
				t.Fatalf("replay of tellkey: %v", err)
			}
			if err := replay.replay(wasmbin.OpReceive, []byte("askkey k2 other/c echo hi"), sharding.MessageInfo{}, askCalls); err != nil {
				t.Fatalf("replay of askkey: %v", err)
			}
			if quiet.calls != 0 {
				t.Fatalf("the replay sent %d messages", quiet.calls)
			}
		})
	}
}
