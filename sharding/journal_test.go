package sharding

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestJournalEntryRoundTrip(t *testing.T) {
	key := EntityKey{Type: "bank", Shard: 3, ID: "alice"}
	for _, e := range []JournalEntry{
		{Seq: 1, Time: time.UnixMilli(1_700_000_000_123), Payload: []byte("deposit 5")},
		{Seq: 1 << 40, Time: time.UnixMilli(-5), Kind: KindTimer, Sender: "tick", Tag: 99, Ask: true,
			TraceID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, Payload: []byte{},
			Effects: []byte{0, 1, 2, 255}, Outcome: "entity-error", ReplyDigest: ReplyDigest([]byte("ok")), IdempotencyKey: "k-1",
			Reply: []byte("the first reply")},
	} {
		rec := JournalRecord{Seq: e.Seq, Data: e.Encode(key)}
		got, err := DecodeJournalEntry(key, rec)
		if err != nil {
			t.Fatalf("decode of %+v: %v", e, err)
		}
		if len(e.Payload) == 0 {
			e.Payload, got.Payload = nil, nil // an empty payload decodes as empty
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
		}
	}
}

// A record of a plain message costs its payload and at most 20 bytes.
func TestJournalRecordOverhead(t *testing.T) {
	key := EntityKey{Type: "counter", Shard: 1, ID: "alice"}
	payload := bytes.Repeat([]byte("x"), 300)
	e := JournalEntry{Seq: 123456789, Time: time.Now(), Ask: true, Payload: payload, ReplyDigest: ReplyDigest([]byte("301"))}
	if n := len(e.Encode(key)) - len(payload); n > 20 {
		t.Fatalf("overhead %d bytes, want at most 20", n)
	}
	e.TraceID = [16]byte{1}
	if n := len(e.Encode(key)) - len(payload); n > 36 {
		t.Fatalf("overhead with a trace ID %d bytes, want at most 36", n)
	}
}

// Every single-bit flip, every truncation, and a record read under another entity or
// sequence number is refused.
func TestJournalRecordCorruptionIsDetected(t *testing.T) {
	key := EntityKey{Type: "counter", Shard: 1, ID: "alice"}
	e := JournalEntry{Seq: 7, Time: time.UnixMilli(42), Sender: "counter/bob", Payload: []byte("inc 1"), Effects: []byte{1, 2, 3}}
	data := e.Encode(key)
	if err := VerifyJournalRecord(key, JournalRecord{Seq: 7, Data: data}); err != nil {
		t.Fatal(err)
	}
	for i := range data {
		for bit := 0; bit < 8; bit++ {
			b := bytes.Clone(data)
			b[i] ^= 1 << bit
			if _, err := DecodeJournalEntry(key, JournalRecord{Seq: 7, Data: b}); !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("bit %d of byte %d flipped: %v, want ErrCorruptRecord", bit, i, err)
			}
		}
	}
	for n := 0; n < len(data); n++ {
		if _, err := DecodeJournalEntry(key, JournalRecord{Seq: 7, Data: data[:n]}); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("truncated to %d bytes: %v, want ErrCorruptRecord", n, err)
		}
	}
	for _, other := range []struct {
		key EntityKey
		seq uint64
	}{{EntityKey{Type: "counter", Shard: 1, ID: "bob"}, 7}, {EntityKey{Type: "other", Shard: 1, ID: "alice"}, 7}, {key, 8}} {
		if err := VerifyJournalRecord(other.key, JournalRecord{Seq: other.seq, Data: data}); !errors.Is(err, ErrCorruptRecord) {
			t.Fatalf("read as %v #%d: %v, want ErrCorruptRecord", other.key, other.seq, err)
		}
	}
}

func TestBaseFraming(t *testing.T) {
	for _, c := range []Base{{}, {Seq: 1, State: []byte("s")}, {Seq: 1 << 50, Keys: []byte{1, 2}, State: bytes.Repeat([]byte{0xff}, 100)}} {
		got, err := DecodeBase(EncodeBase(c))
		if err != nil || got.Seq != c.Seq || !bytes.Equal(got.Keys, c.Keys) || !bytes.Equal(got.State, c.State) {
			t.Fatalf("base %+v: got %+v %v", c, got, err)
		}
	}
	// A state saved before bases existed is the state after no record.
	b, err := DecodeBase([]byte("legacy"))
	if err != nil || b.Seq != 0 || string(b.State) != "legacy" || b.Keys != nil {
		t.Fatalf("unframed state: %+v %v", b, err)
	}
	if _, err := DecodeBase(baseMagic[:]); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("a base cut after its magic: %v, want ErrCorruptRecord", err)
	}
}

func FuzzDecodeJournalEntry(f *testing.F) {
	key := EntityKey{Type: "t", Shard: 0, ID: "i"}
	e := JournalEntry{Seq: 1, Time: time.UnixMilli(1), Sender: "s", Tag: 2, TraceID: [16]byte{3}, Payload: []byte("p"),
		Effects: []byte("e"), Outcome: "o", ReplyDigest: 4, IdempotencyKey: "k"}
	f.Add(e.Encode(key))
	f.Add([]byte{journalVersion, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Whatever the bytes, a decode returns an entry or ErrCorruptRecord, and an
		// entry re-encodes to the same record.
		got, err := DecodeJournalEntry(key, JournalRecord{Seq: 1, Data: b})
		if err != nil {
			if !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("decode: %v, not ErrCorruptRecord", err)
			}
			return
		}
		if again := got.Encode(key); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, read %x", again, b)
		}
	})
}

// TestJournalChecksumUnchanged: the checksum folds the key and seq in as crc32.Update
// of their bytes did (records written before verify), and allocates nothing.
func TestJournalChecksumUnchanged(t *testing.T) {
	reference := func(key EntityKey, seq uint64, body []byte) uint32 {
		var hdr [10]byte
		c := crc32.Update(0, journalCRC, []byte(key.Type))
		c = crc32.Update(c, journalCRC, []byte{0})
		c = crc32.Update(c, journalCRC, []byte(key.ID))
		c = crc32.Update(c, journalCRC, hdr[:binary.PutUvarint(hdr[:], seq)])
		return crc32.Update(c, journalCRC, body)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		key := EntityKey{Type: strings.Repeat("tÿ", rng.IntN(8)), Shard: i, ID: strings.Repeat("\x00é", rng.IntN(40))}
		seq := rng.Uint64() >> rng.IntN(64)
		body := make([]byte, rng.IntN(100))
		for j := range body {
			body[j] = byte(rng.Uint32())
		}
		if got, want := journalChecksum(key, seq, body), reference(key, seq, body); got != want {
			t.Fatalf("%q/%q #%d: %08x, want %08x", key.Type, key.ID, seq, got, want)
		}
	}
	key, body := EntityKey{Type: "counter", ID: "c-1"}, []byte("body")
	if n := testing.AllocsPerRun(100, func() { journalChecksum(key, 1<<40, body) }); n != 0 {
		t.Fatalf("%v allocations a checksum", n)
	}
}
