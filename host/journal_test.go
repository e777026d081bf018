package host

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestJournalEffectsRoundTrip(t *testing.T) {
	calls := []hostRecord{
		{fn: "tell"},
		{fn: "now", ret: 1_700_000_000_123_456_789},
		{fn: "ask", ret: 3, result: []byte("reply")},
		{fn: "random", ret: 0, mem: []byte{1, 2, 3, 4}},
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
