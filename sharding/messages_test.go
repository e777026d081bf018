package sharding

import (
	"errors"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	env := Envelope{EntityType: "counter", EntityID: "ü/1", Payload: []byte("inc"), Hops: 1}
	var back Envelope
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
	f.Add(encode(Envelope{EntityType: "t", EntityID: "i", Payload: []byte("p")}))
	f.Add(encode(wireReply{Payload: []byte("r"), Node: "n", Code: CodeEntityError, Error: "e"}))
	f.Add(encode(shardRef{Type: "t", Shard: 3, Requester: "r"}))
	f.Add(encode(RegionState{Node: "n", Shards: []ShardState{{Type: "t", ID: 1, Entities: []string{"a"}}}}))
	f.Add([]byte{0x9f, 0x9f, 0x9f})
	f.Fuzz(func(t *testing.T, b []byte) {
		var env Envelope
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
