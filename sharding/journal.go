package sharding

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math"
	"time"

	"github.com/shardhost/shardhost/internal/binread"
)

// The journal (docs/design.md, "The journal"): every message an entity handles appends
// one record to the entity's journal in the state store before its reply, or anything
// else it caused, leaves the member (an output gate). An activation starts from the
// entity's last base (a snapshot, saved with the sequence number of the last record it
// holds) and replays the records after it, so that a crash of the member loses nothing
// that was acknowledged. Bases truncate the journal, but for the records the type's
// history keeps.

// Errors of journals.
var (
	// ErrCorruptRecord: a journal record failed its checksum, is of an unknown version,
	// or does not decode. A store refuses to write one and never returns one: it
	// repairs its copy from the other replicas, or fails the read.
	ErrCorruptRecord = errors.New("sharding: corrupt journal record")
)

// JournalRecord is one record of an entity's journal as a store keeps it: its sequence
// number (1 for the entity's first message, then one more for each; at most 2^63-1,
// what a PostgreSQL bigint holds) and its encoding
// (JournalEntry.Encode), which stores treat as opaque bytes and check with
// VerifyJournalRecord.
type JournalRecord struct {
	Seq  uint64 `cbor:"1,keyasint"`
	Data []byte `cbor:"2,keyasint"`
}

// JournalStore is a StateStore that also keeps entity journals. Every write is fenced
// as Save is: it carries the writer's allocation epoch for the shard and is refused
// with ErrStaleEpoch when the store has seen a newer one. Implementations are safe for
// concurrent use, and commit the appends of many entities together (group commit): the
// cost of a durable append falls as concurrency rises.
type JournalStore interface {
	StateStore
	// AppendJournal appends recs (at least one; their Seq consecutive, the first one
	// at least 1) to the entity's journal. It returns once they are durable as Save's
	// writes are (the replicated store: written and fsynced on a majority of the
	// shard's replicas; PostgreSQL: committed). A record at a Seq the journal holds
	// replaces it (a new owner of the shard writes over a record its former owner left
	// on fewer replicas than acknowledge); a record below the journal's truncation
	// point (TruncateJournal) is dropped, as a base holds it. Errors: ErrStaleEpoch,
	// ErrStoreUnavailable, ErrStateTooLarge (a record over the store's cap),
	// ErrCorruptRecord (a record that fails VerifyJournalRecord), ErrInvalidStateKey.
	AppendJournal(ctx context.Context, key EntityKey, epoch uint64, recs []JournalRecord) error
	// ReadJournal returns the entity's records with Seq >= from, in Seq order, at most
	// limit of them (0 or less: all). Every record it returns is durable: one that only some
	// replicas held is written to a majority first (read repair), so that a later read
	// returns it too. As Load, it refuses with ErrStaleEpoch when ctx carries a read
	// epoch (WithReadEpoch) older than the shard's. Errors: ErrStaleEpoch,
	// ErrStoreUnavailable, ErrCorruptRecord (no intact copy of a record), and
	// ErrInvalidStateKey.
	ReadJournal(ctx context.Context, key EntityKey, from uint64, limit int) ([]JournalRecord, error)
	// TruncateJournal deletes the entity's records with Seq < before. The truncation
	// point only rises: a lower one is a no-op. Errors: ErrStaleEpoch,
	// ErrStoreUnavailable, ErrInvalidStateKey.
	TruncateJournal(ctx context.Context, key EntityKey, epoch uint64, before uint64) error
}

// JournalEntry is what a journal record says of one handled message.
type JournalEntry struct {
	// Seq is the record's sequence number; it is not in the encoding, but its checksum
	// covers it (and the entity's key): a record read under another Seq or entity fails
	// VerifyJournalRecord.
	Seq uint64
	// Time is when the message was handled, to the millisecond.
	Time time.Time
	// Kind, Sender, Tag and Ask are the message's MessageInfo.
	Kind   MessageKind
	Sender string
	Tag    uint64
	Ask    bool
	// TraceID is the message's W3C trace ID; zero when it was not traced.
	TraceID [16]byte
	// Payload is the message.
	Payload []byte
	// Effects is what the entity recorded of the message beyond its payload: for a wasm
	// entity, the answers of its host calls, which a replay gives again (the entity's
	// own encoding; empty for none).
	Effects []byte
	// Outcome is "" when the message succeeded, else its error code (ErrorCode): an
	// entity error, or "forwarded" for a message the entity passed on.
	Outcome string
	// ReplyDigest is ReplyDigest of the reply (0 for none), so that a replay can tell
	// whether it replies the same.
	ReplyDigest uint32
	// IdempotencyKey is the key the message was sent with, if any, and Reply, kept only
	// with a key, the reply a retry of the message gets.
	IdempotencyKey string
	Reply          []byte
	// SenderSeq is the message's sender sequence (Message.SenderSeq; 0: none): the
	// receiver's high-water mark of its Sender after the message (delivery.go). With
	// it, Reply keeps the reply of an ask, or the error text of a failed message.
	SenderSeq uint64
	// SendSeq is the entity's own sender sequence after the message, when the message
	// numbered a send (0: unchanged), and Sends the tells it made that its outbox
	// delivers once the record is durable.
	SendSeq uint64
	Sends   []Send
}

// journalVersion is the encoding's version, its first byte; journalVersion2 adds a
// second byte of flags (jf2*), written only by a record that uses them, so that a
// record without them stays readable by members that know version 1 only.
const (
	journalVersion  = 1
	journalVersion2 = 2
)

// Flags of the second flags byte (journalVersion2).
const (
	jf2SenderSeq = 1 << iota
	jf2SendSeq
	jf2Sends
)

// Flags of an encoded entry.
const (
	jfAsk = 1 << iota
	jfSender
	jfTag
	jfTrace
	jfEffects
	jfOutcome
	jfReply
	jfIdempotency
)

// journalCRC is CRC-32C (Castagnoli), which CPUs compute in hardware.
var journalCRC = crc32.MakeTable(crc32.Castagnoli)

// maxJournalBytes and maxJournalString cap the variable fields of an entry that a
// decode accepts: payload and effects 64 MiB each, the other strings 64 KiB.
const (
	maxJournalBytes  = 64 << 20
	maxJournalString = 64 << 10
)

// Encode returns the entry's record for key's journal: a version byte, the fields
// (absent ones cost a flag bit), and a CRC-32C over the entity's key, Seq and the
// bytes before it. Without sender, tag, trace ID, effects, outcome and key, a record is
// its payload and at most 20 bytes.
func (e *JournalEntry) Encode(key EntityKey) []byte {
	n := 24 + len(e.Payload) + len(e.Sender) + len(e.Effects) + len(e.Outcome) + len(e.IdempotencyKey) + len(e.Reply)
	for _, sd := range e.Sends {
		n += 24 + len(sd.EntityType) + len(sd.EntityID) + len(sd.Payload) + len(sd.IdempotencyKey)
	}
	var flags2 byte
	if e.SenderSeq != 0 {
		flags2 |= jf2SenderSeq
	}
	if e.SendSeq != 0 {
		flags2 |= jf2SendSeq
	}
	if len(e.Sends) > 0 {
		flags2 |= jf2Sends
	}
	b := make([]byte, 0, n+32)
	if flags2 != 0 {
		b = append(b, journalVersion2)
	} else {
		b = append(b, journalVersion)
	}
	b = binary.AppendVarint(b, e.Time.UnixMilli())
	b = append(b, byte(e.Kind))
	var flags byte
	if e.Ask {
		flags |= jfAsk
	}
	if e.Sender != "" {
		flags |= jfSender
	}
	if e.Tag != 0 {
		flags |= jfTag
	}
	if e.TraceID != ([16]byte{}) {
		flags |= jfTrace
	}
	if len(e.Effects) > 0 {
		flags |= jfEffects
	}
	if e.Outcome != "" {
		flags |= jfOutcome
	}
	if e.ReplyDigest != 0 {
		flags |= jfReply
	}
	if e.IdempotencyKey != "" {
		flags |= jfIdempotency
	}
	b = append(b, flags)
	if flags2 != 0 {
		b = append(b, flags2)
	}
	b = binary.AppendUvarint(b, uint64(len(e.Payload)))
	b = append(b, e.Payload...)
	if flags&jfSender != 0 {
		b = appendString(b, e.Sender)
	}
	if flags&jfTag != 0 {
		b = binary.AppendUvarint(b, e.Tag)
	}
	if flags&jfTrace != 0 {
		b = append(b, e.TraceID[:]...)
	}
	if flags&jfEffects != 0 {
		b = binary.AppendUvarint(b, uint64(len(e.Effects)))
		b = append(b, e.Effects...)
	}
	if flags&jfOutcome != 0 {
		b = appendString(b, e.Outcome)
	}
	if flags&jfReply != 0 {
		b = binary.LittleEndian.AppendUint32(b, e.ReplyDigest)
	}
	if flags&jfIdempotency != 0 {
		b = appendString(b, e.IdempotencyKey)
		b = binary.AppendUvarint(b, uint64(len(e.Reply)))
		b = append(b, e.Reply...)
	}
	if flags2&jf2SenderSeq != 0 {
		b = binary.AppendUvarint(b, e.SenderSeq)
		if flags&jfIdempotency == 0 {
			b = binary.AppendUvarint(b, uint64(len(e.Reply)))
			b = append(b, e.Reply...)
		}
	}
	if flags2&jf2SendSeq != 0 {
		b = binary.AppendUvarint(b, e.SendSeq)
	}
	if flags2&jf2Sends != 0 {
		b = appendSends(b, e.Sends)
	}
	return binary.LittleEndian.AppendUint32(b, journalChecksum(key, e.Seq, b))
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// journalChecksum is the CRC-32C of the entity's key, seq and body. The key and seq,
// a few bytes, are folded in byte by byte (crcBytes): handed to crc32.Update, each
// piece was a heap allocation, four a checksum, and a record is checksummed five times
// on its way to three replicas.
func journalChecksum(key EntityKey, seq uint64, body []byte) uint32 {
	c := crcBytes(0, key.Type)
	c = crcBytes(c, "\x00")
	c = crcBytes(c, key.ID)
	for seq >= 0x80 { // seq's uvarint (binary.PutUvarint)
		c = crcByte(c, byte(seq)|0x80)
		seq >>= 7
	}
	c = crcByte(c, byte(seq))
	return crc32.Update(c, journalCRC, body)
}

// crcBytes is crc32.Update(c, journalCRC, []byte(s)), the table's bytewise algorithm
// (as hash/crc32's simpleUpdate).
func crcBytes(c uint32, s string) uint32 {
	c = ^c
	for i := 0; i < len(s); i++ {
		c = journalCRC[byte(c)^s[i]] ^ (c >> 8)
	}
	return ^c
}

// crcByte is crcBytes of one byte.
func crcByte(c uint32, b byte) uint32 { return ^(journalCRC[byte(^c)^b] ^ (^c >> 8)) }

// VerifyJournalRecord checks that rec is an intact record of key's journal: a known
// version, and a checksum that matches the entity, the Seq and the bytes. Stores call
// it before they write a record and after they read one. Errors: ErrCorruptRecord.
func VerifyJournalRecord(key EntityKey, rec JournalRecord) error {
	d := rec.Data
	if len(d) < 5 {
		return fmt.Errorf("%w: %s/%s #%d: %d bytes", ErrCorruptRecord, key.Type, key.ID, rec.Seq, len(d))
	}
	if d[0] != journalVersion && d[0] != journalVersion2 {
		return fmt.Errorf("%w: %s/%s #%d: version %d (this member reads up to %d)", ErrCorruptRecord, key.Type, key.ID, rec.Seq, d[0], journalVersion2)
	}
	body := d[:len(d)-4]
	if got, want := binary.LittleEndian.Uint32(d[len(d)-4:]), journalChecksum(key, rec.Seq, body); got != want {
		return fmt.Errorf("%w: %s/%s #%d: checksum %08x, want %08x", ErrCorruptRecord, key.Type, key.ID, rec.Seq, got, want)
	}
	return nil
}

// DecodeJournalEntry verifies rec (VerifyJournalRecord) and decodes it. The entry's
// byte fields alias rec.Data. Errors: ErrCorruptRecord.
func DecodeJournalEntry(key EntityKey, rec JournalRecord) (JournalEntry, error) {
	if err := VerifyJournalRecord(key, rec); err != nil {
		return JournalEntry{}, err
	}
	r := binread.New(rec.Data[1 : len(rec.Data)-4])
	e := JournalEntry{Seq: rec.Seq}
	e.Time = time.UnixMilli(r.Varint())
	e.Kind = MessageKind(r.Byte())
	flags := r.Byte()
	var flags2 byte
	if rec.Data[0] == journalVersion2 {
		flags2 = r.Byte()
	}
	e.Ask = flags&jfAsk != 0
	e.Payload = r.Bytes(maxJournalBytes)
	if flags&jfSender != 0 {
		e.Sender = string(r.Bytes(maxJournalString))
	}
	if flags&jfTag != 0 {
		e.Tag = r.Uvarint()
	}
	if flags&jfTrace != 0 {
		copy(e.TraceID[:], r.Fixed(16))
	}
	if flags&jfEffects != 0 {
		e.Effects = r.Bytes(maxJournalBytes)
	}
	if flags&jfOutcome != 0 {
		e.Outcome = string(r.Bytes(maxJournalString))
	}
	if flags&jfReply != 0 {
		e.ReplyDigest = binary.LittleEndian.Uint32(r.Fixed(4))
	}
	if flags&jfIdempotency != 0 {
		e.IdempotencyKey = string(r.Bytes(maxJournalString))
		if reply := r.Bytes(maxJournalBytes); len(reply) > 0 {
			e.Reply = reply
		}
	}
	if flags2&jf2SenderSeq != 0 {
		e.SenderSeq = r.Uvarint()
		if flags&jfIdempotency == 0 {
			if reply := r.Bytes(maxJournalBytes); len(reply) > 0 {
				e.Reply = reply
			}
		}
	}
	if flags2&jf2SendSeq != 0 {
		e.SendSeq = r.Uvarint()
	}
	if flags2&jf2Sends != 0 {
		e.Sends = readSends(r)
	}
	if err := r.Done(); err != nil {
		return JournalEntry{}, fmt.Errorf("%w: %s/%s #%d: %w", ErrCorruptRecord, key.Type, key.ID, rec.Seq, err)
	}
	return e, nil
}

// ReplyDigest is the digest of a reply that a journal record keeps: FNV-1a 32 of its
// bytes, or 0 for none (an empty reply is 1).
func ReplyDigest(reply []byte) uint32 {
	if reply == nil {
		return 0
	}
	h := fnv.New32a()
	h.Write(reply)
	if s := h.Sum32(); s != 0 {
		return s
	}
	return 1
}

// Base is an entity's state as sharding saves it in a store that keeps journals: the
// sequence number of the last journal record it holds (Seq; 0 for none), the
// idempotency keys the entity remembers (Keys, sharding's own encoding), the entity's
// snapshot (State), and where its history starts: the Seq of its journal's last
// KindBase record and that record's time (History, HistoryAt, Unix milliseconds; 0:
// none known). EncodeBase frames it; a store keeps the frame as it keeps any snapshot,
// and a decorator that looks into saved states (the host's delta records) reads
// through it with DecodeBase.
type Base struct {
	Seq       uint64
	Keys      []byte
	State     []byte
	History   uint64
	HistoryAt int64
	// Delivery is the entity's delivery state after record Seq (delivery.go, sharding's
	// own encoding): its sender sequence, its outbox, and the high-water marks of the
	// senders it heard from. nil: none.
	Delivery []byte
}

// The magics of a framed base: without History, and with it.
var (
	baseMagic        = [4]byte{0xff, 'S', 'J', 'B'}
	baseHistoryMagic = [4]byte{0xff, 'S', 'J', 'H'}
	// baseDeliveryMagic: with History, HistoryAt and Delivery, written only when
	// Delivery is not empty.
	baseDeliveryMagic = [4]byte{0xff, 'S', 'J', 'D'}
)

// EncodeBase frames b: a magic, Seq, History and HistoryAt when History is not 0,
// Keys (with its length), then State.
func EncodeBase(b Base) []byte {
	out := make([]byte, 0, len(b.State)+len(b.Keys)+len(b.Delivery)+48)
	if len(b.Delivery) > 0 {
		out = append(out, baseDeliveryMagic[:]...)
		out = binary.AppendUvarint(out, b.Seq)
		out = binary.AppendUvarint(out, b.History)
		out = binary.AppendUvarint(out, uint64(max(b.HistoryAt, 0)))
		out = binary.AppendUvarint(out, uint64(len(b.Delivery)))
		out = append(out, b.Delivery...)
	} else if b.History == 0 {
		out = append(out, baseMagic[:]...)
		out = binary.AppendUvarint(out, b.Seq)
	} else {
		out = append(out, baseHistoryMagic[:]...)
		out = binary.AppendUvarint(out, b.Seq)
		out = binary.AppendUvarint(out, b.History)
		out = binary.AppendUvarint(out, uint64(max(b.HistoryAt, 0)))
	}
	out = binary.AppendUvarint(out, uint64(len(b.Keys)))
	out = append(out, b.Keys...)
	return append(out, b.State...)
}

// DecodeBase reads a framed base; its slices alias data. A state saved without the
// framing (before the journal, or by a store without one) is the state after no record,
// with no keys. Errors: ErrCorruptRecord.
func DecodeBase(data []byte) (Base, error) {
	if len(data) < len(baseMagic) {
		return Base{State: data}, nil
	}
	magic := [4]byte(data[:4])
	if magic != baseMagic && magic != baseHistoryMagic && magic != baseDeliveryMagic {
		return Base{State: data}, nil
	}
	r := binread.New(data[4:])
	b := Base{Seq: r.Uvarint()}
	if magic == baseHistoryMagic || magic == baseDeliveryMagic {
		b.History = r.Uvarint()
		b.HistoryAt = int64(min(r.Uvarint(), math.MaxInt64))
	}
	if magic == baseDeliveryMagic {
		if d := r.Bytes(maxJournalBytes); len(d) > 0 {
			b.Delivery = d
		}
	}
	if keys := r.Bytes(maxJournalBytes); len(keys) > 0 {
		b.Keys = keys
	}
	if err := r.Err(); err != nil {
		return Base{}, fmt.Errorf("%w: a base whose framing does not decode: %w", ErrCorruptRecord, err)
	}
	b.State = r.B
	return b, nil
}

// CheckJournalAppend is the check every JournalStore makes of an append before it
// writes: a valid key, at least one record, consecutive sequence numbers from 1 or
// more, each record intact. Errors: ErrInvalidStateKey, ErrCorruptRecord.
func CheckJournalAppend(key EntityKey, recs []JournalRecord) error {
	if err := CheckStateKey(key.Type, key.Shard, key.ID, true); err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("%w: an append of no records", ErrInvalidStateKey)
	}
	for k, r := range recs {
		if r.Seq == 0 || (k > 0 && r.Seq != recs[k-1].Seq+1) {
			return fmt.Errorf("%w: records %d..%d are not consecutive from 1 or more", ErrInvalidStateKey, recs[0].Seq, r.Seq)
		}
		if err := VerifyJournalRecord(key, r); err != nil {
			return err
		}
	}
	return nil
}
