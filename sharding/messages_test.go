package sharding

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	env := envelope{EntityType: "counter", EntityID: "ü/1", Payload: []byte("inc"), Hops: 1}
	var back envelope
	if err := decode(encode(env), &back); err != nil {
		t.Fatal(err)
	}
	if back.EntityType != env.EntityType || back.EntityID != env.EntityID || string(back.Payload) != "inc" ||
		back.Hops != 1 {
		t.Fatalf("%+v", back)
	}
	if err := decode([]byte{0xff, 0x00}, &back); !errors.Is(err, ErrMalformedMessage) {
		t.Fatalf("garbage: %v", err)
	}
}

func TestSpanContextRoundTrip(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	back := decodeSpanContext(encodeSpanContext(sc))
	if back.TraceID() != sc.TraceID() || back.SpanID() != sc.SpanID() || !back.IsSampled() || !back.IsRemote() {
		t.Fatalf("%v -> %v", sc, back)
	}
	if encodeSpanContext(trace.SpanContext{}) != "" || decodeSpanContext("zz").IsValid() || decodeSpanContext("00").IsValid() {
		t.Fatal("invalid span contexts are not refused")
	}
}

func TestRemoteErrorMatchesSentinels(t *testing.T) {
	err := error(&RemoteError{Code: CodeUnknownType, Message: "x"})
	if !errors.Is(err, ErrUnknownEntityType) || errors.Is(err, ErrBufferFull) || ErrorCode(err) != CodeUnknownType {
		t.Fatalf("remote unknown-type error does not match its sentinel")
	}
	if ErrorCode(errors.New("plain")) != CodeInternal {
		t.Fatal("plain error is not internal")
	}
}

// FuzzDecodeMessages feeds arbitrary bytes to every decoder of member-to-member
// messages: they return an error or a value, never panic.
func FuzzDecodeMessages(f *testing.F) {
	f.Add(encode(envelope{EntityType: "t", EntityID: "i", Payload: []byte("p")}))
	f.Add(encode(wireReply{Payload: []byte("r"), Node: "n", Code: CodeEntityError, Error: "e"}))
	f.Add(encode(shardRef{Type: "t", Shard: 3, Requester: "r"}))
	f.Add(encode(RegionState{Node: "n", Shards: []ShardState{{Type: "t", ID: 1, Entities: []string{"a"}}}}))
	f.Add([]byte{0x9f, 0x9f, 0x9f})
	f.Fuzz(func(t *testing.T, b []byte) {
		var env envelope
		decode(b, &env)
		var w wireReply
		decode(b, &w)
		var ref shardRef
		decode(b, &ref)
		var st RegionState
		decode(b, &st)
		var h shardHome
		decode(b, &h)
	})
}

func TestWrapCauseKeepsBothErrorsAndDoesNotStackPrefixes(t *testing.T) {
	store := fmt.Errorf("%w: 1 of 3 replicas answered", ErrStoreUnavailable)
	err := wrapCause(ErrStateNotSaved, "", store)
	if !errors.Is(err, ErrStateNotSaved) || !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("%v: want both ErrStateNotSaved and ErrStoreUnavailable", err)
	}
	if got := ErrorCode(err); got != CodeStateNotSaved {
		t.Fatalf("code %q, want %q", got, CodeStateNotSaved)
	}
	want := "sharding: the message was handled but the entity's state was not saved: entity state store unavailable: 1 of 3 replicas answered"
	if err.Error() != want {
		t.Fatalf("message\n%q, want\n%q", err.Error(), want)
	}
	// A cause of the same kind does not repeat the kind's text.
	inner := wrapCause(ErrShardUnavailable, "asking the coordinator at a:1", errors.New("timeout"))
	outer := wrapCause(ErrShardUnavailable, "counter/3", inner)
	if got, want := outer.Error(), "sharding: shard home could not be resolved: counter/3: asking the coordinator at a:1: timeout"; got != want {
		t.Fatalf("message\n%q, want\n%q", got, want)
	}
	if strings.Count(outer.Error(), "sharding:") != 1 {
		t.Fatalf("%q: the prefix is repeated", outer.Error())
	}
	// Across members the code comes back as the sentinel.
	remote := &RemoteError{Code: ErrorCode(err), Message: err.Error()}
	if !errors.Is(remote, ErrStateNotSaved) || errors.Is(remote, ErrShardUnavailable) {
		t.Fatalf("remote %v: want ErrStateNotSaved only", remote)
	}
	if got := ErrorCode(wrapCause(ErrStateNotLoaded, "counter/a", store)); got != CodeStateNotLoaded {
		t.Fatalf("code %q, want %q", got, CodeStateNotLoaded)
	}
}
