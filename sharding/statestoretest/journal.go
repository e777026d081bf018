package statestoretest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// The journal's contract (sharding.JournalStore): appends are fenced and durable,
// reads return the records in order from any handle, a record at a held Seq is
// replaced, truncation only rises and drops what lies below it, a corrupt record is
// refused, and many entities append at once.

func journalOf(t *testing.T, s sharding.StateStore) sharding.JournalStore {
	t.Helper()
	j, ok := sharding.StateStoreAs[sharding.JournalStore](s)
	if !ok {
		t.Fatalf("%T keeps no journals (sharding.JournalStore)", s)
	}
	return j
}

// Record returns record seq of key's journal, its payload text.
func Record(key sharding.EntityKey, seq uint64, text string) sharding.JournalRecord {
	e := sharding.JournalEntry{Seq: seq, Time: time.UnixMilli(1_700_000_000_000 + int64(seq)), Sender: "test", Ask: true,
		Payload: []byte(text), ReplyDigest: sharding.ReplyDigest([]byte(text))}
	return sharding.JournalRecord{Seq: seq, Data: e.Encode(key)}
}

func mustAppend(t *testing.T, s sharding.StateStore, key sharding.EntityKey, epoch uint64, recs ...sharding.JournalRecord) {
	t.Helper()
	if err := journalOf(t, s).AppendJournal(ctxOf(t), key, epoch, recs); err != nil {
		t.Fatalf("append %d records to %v at epoch %d: %v", len(recs), key, epoch, err)
	}
}

// mustJournal checks that s reads key's journal from from as the payloads want.
func mustJournal(t *testing.T, s sharding.StateStore, key sharding.EntityKey, from uint64, want ...string) {
	t.Helper()
	got, err := journalOf(t, s).ReadJournal(ctxOf(t), key, from, 0)
	if err != nil {
		t.Fatalf("read %v from %d: %v", key, from, err)
	}
	var texts []string
	for k, r := range got {
		e, err := sharding.DecodeJournalEntry(key, r)
		if err != nil {
			t.Fatalf("record %d of %v: %v", r.Seq, key, err)
		}
		if k > 0 && r.Seq != got[k-1].Seq+1 {
			t.Fatalf("read %v from %d: records %d then %d", key, from, got[k-1].Seq, r.Seq)
		}
		texts = append(texts, fmt.Sprintf("%d:%s", r.Seq, e.Payload))
	}
	if fmt.Sprint(texts) != fmt.Sprint(want) {
		t.Fatalf("read %v from %d: %v, want %v", key, from, texts, want)
	}
}

func journalAppendRead(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "counter", Shard: 2, ID: "j"}
	mustJournal(t, h[0], key, 1)
	mustAppend(t, h[0], key, 1, Record(key, 1, "a"))
	mustAppend(t, h[1], key, 1, Record(key, 2, "b"), Record(key, 3, "c"))
	for _, s := range h {
		mustJournal(t, s, key, 1, "1:a", "2:b", "3:c")
		mustJournal(t, s, key, 2, "2:b", "3:c")
		mustJournal(t, s, key, 4)
	}
	got, err := journalOf(t, h[1]).ReadJournal(ctx, key, 1, 2)
	if err != nil || len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 2 {
		t.Fatalf("read with limit 2: %v, %v", got, err)
	}
	// Another entity, shard or type has a journal of its own.
	mustJournal(t, h[0], sharding.EntityKey{Type: "counter", Shard: 2, ID: "other"}, 1)
	mustJournal(t, h[0], sharding.EntityKey{Type: "other", Shard: 2, ID: "j"}, 1)
	// The caller may reuse its buffers.
	rec := Record(key, 4, "d")
	mustAppend(t, h[0], key, 1, rec)
	for k := range rec.Data {
		rec.Data[k] = 0
	}
	mustJournal(t, h[1], key, 4, "4:d")
	// A record of every byte value and a larger one.
	big := bytes.Repeat([]byte{0, 1, 2, 254, 255}, 40_000)
	e := sharding.JournalEntry{Seq: 5, Time: time.UnixMilli(1), Payload: big, Effects: big[:1000], Outcome: "entity-error", TraceID: [16]byte{1, 2, 3}}
	mustAppend(t, h[1], key, 1, sharding.JournalRecord{Seq: 5, Data: e.Encode(key)})
	got, err = journalOf(t, h[0]).ReadJournal(ctx, key, 5, 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("read of the large record: %v, %v", got, err)
	}
	back, err := sharding.DecodeJournalEntry(key, got[0])
	if err != nil || !bytes.Equal(back.Payload, big) || !bytes.Equal(back.Effects, big[:1000]) || back.Outcome != "entity-error" || back.TraceID != e.TraceID {
		t.Fatalf("the large record came back changed: %v", err)
	}
}

func journalFencing(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "counter", Shard: 5, ID: "jf"}
	mustAppend(t, h[0], key, 3, Record(key, 1, "a"), Record(key, 2, "b"))
	for i, s := range h {
		if err := journalOf(t, s).AppendJournal(ctx, key, 2, []sharding.JournalRecord{Record(key, 3, "stale")}); !errors.Is(err, sharding.ErrStaleEpoch) {
			t.Fatalf("handle %d: append at epoch 2 after 3: %v, want ErrStaleEpoch", i, err)
		}
		if err := journalOf(t, s).TruncateJournal(ctx, key, 2, 2); !errors.Is(err, sharding.ErrStaleEpoch) {
			t.Fatalf("handle %d: truncate at epoch 2 after 3: %v, want ErrStaleEpoch", i, err)
		}
	}
	mustJournal(t, h[1], key, 1, "1:a", "2:b")
	// An append fences the shard as a save does, and a save fences appends.
	if err := h[1].Save(ctx, sharding.EntityKey{Type: "counter", Shard: 5, ID: "other"}, 2, nil); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("save at epoch 2 after an append at 3: %v, want ErrStaleEpoch", err)
	}
	mustSave(t, h[1], key, 4, []byte("base"))
	if err := journalOf(t, h[0]).AppendJournal(ctx, key, 3, []sharding.JournalRecord{Record(key, 3, "stale")}); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("append at epoch 3 after a save at 4: %v, want ErrStaleEpoch", err)
	}
	// A new owner writes over a record it did not read (its former owner's
	// unacknowledged one): the newest epoch wins, on every handle.
	mustAppend(t, h[1], key, 4, Record(key, 2, "b at 4"), Record(key, 3, "c at 4"))
	for _, s := range h {
		mustJournal(t, s, key, 1, "1:a", "2:b at 4", "3:c at 4")
	}
	// A read at an older epoch than the shard's is stale.
	if _, err := journalOf(t, h[0]).ReadJournal(sharding.WithReadEpoch(ctx, 3), key, 1, 0); !errors.Is(err, sharding.ErrStaleEpoch) {
		t.Fatalf("read at epoch 3 of a shard at 4: %v, want ErrStaleEpoch", err)
	}
	if _, err := journalOf(t, h[0]).ReadJournal(sharding.WithReadEpoch(ctx, 4), key, 1, 0); err != nil {
		t.Fatalf("read at the shard's epoch: %v", err)
	}
}

func journalTruncate(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "counter", Shard: 1, ID: "jt"}
	for seq := uint64(1); seq <= 6; seq++ {
		mustAppend(t, h[int(seq)%len(h)], key, 1, Record(key, seq, fmt.Sprint("r", seq)))
	}
	if err := journalOf(t, h[0]).TruncateJournal(ctx, key, 1, 4); err != nil {
		t.Fatal(err)
	}
	for _, s := range h {
		mustJournal(t, s, key, 1, "4:r4", "5:r5", "6:r6")
	}
	// The truncation point only rises.
	if err := journalOf(t, h[1]).TruncateJournal(ctx, key, 1, 2); err != nil {
		t.Fatal(err)
	}
	mustJournal(t, h[0], key, 1, "4:r4", "5:r5", "6:r6")
	// A record below it is dropped: a base holds it.
	mustAppend(t, h[1], key, 1, Record(key, 3, "late"), Record(key, 4, "r4 again"))
	for _, s := range h {
		mustJournal(t, s, key, 1, "4:r4 again", "5:r5", "6:r6")
	}
	// Truncating past the end leaves an empty journal that goes on from there.
	if err := journalOf(t, h[0]).TruncateJournal(ctx, key, 1, 100); err != nil {
		t.Fatal(err)
	}
	mustJournal(t, h[1], key, 1)
	mustAppend(t, h[0], key, 1, Record(key, 100, "r100"))
	mustJournal(t, h[1], key, 1, "100:r100")
	// Truncating an entity with no journal is fine.
	if err := journalOf(t, h[1]).TruncateJournal(ctx, sharding.EntityKey{Type: "counter", Shard: 1, ID: "none"}, 1, 5); err != nil {
		t.Fatal(err)
	}
}

func journalRefusals(t *testing.T, h []sharding.StateStore) {
	ctx := ctxOf(t)
	key := sharding.EntityKey{Type: "counter", Shard: 3, ID: "jr"}
	j := journalOf(t, h[0])
	good := Record(key, 1, "good")
	corrupt := Record(key, 1, "good")
	corrupt.Data[3] ^= 0x40
	misfiled := Record(sharding.EntityKey{Type: "counter", Shard: 3, ID: "other"}, 1, "good")
	for name, c := range map[string]struct {
		key  sharding.EntityKey
		recs []sharding.JournalRecord
		want error
	}{
		"corrupt":         {key, []sharding.JournalRecord{corrupt}, sharding.ErrCorruptRecord},
		"other entity's":  {key, []sharding.JournalRecord{misfiled}, sharding.ErrCorruptRecord},
		"under other seq": {key, []sharding.JournalRecord{{Seq: 2, Data: good.Data}}, sharding.ErrCorruptRecord},
		"none":            {key, nil, sharding.ErrInvalidStateKey},
		"seq 0":           {key, []sharding.JournalRecord{{Seq: 0, Data: good.Data}}, sharding.ErrInvalidStateKey},
		"a gap":           {key, []sharding.JournalRecord{good, Record(key, 3, "c")}, sharding.ErrInvalidStateKey},
		"empty ID":        {sharding.EntityKey{Type: "counter", Shard: 3}, []sharding.JournalRecord{good}, sharding.ErrInvalidStateKey},
	} {
		if err := j.AppendJournal(ctx, c.key, 1, c.recs); !errors.Is(err, c.want) {
			t.Fatalf("append of %s records: %v, want %v", name, err, c.want)
		}
	}
	mustJournal(t, h[1], key, 1)
	if _, err := j.ReadJournal(ctx, sharding.EntityKey{Type: "", Shard: 1, ID: "x"}, 1, 0); !errors.Is(err, sharding.ErrInvalidStateKey) {
		t.Fatalf("read with an empty type: %v, want ErrInvalidStateKey", err)
	}
}

// journalConcurrent: many entities append at once through every handle (the group
// commit's case); each journal ends with every record of its one writer, in order.
func journalConcurrent(t *testing.T, h []sharding.StateStore) {
	const writers, rounds = 24, 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := sharding.EntityKey{Type: "counter", Shard: w % 4, ID: fmt.Sprint("c", w)}
			s := journalOf(t, h[w%len(h)])
			for seq := uint64(1); seq <= rounds; seq++ {
				if err := s.AppendJournal(ctxOf(t), key, 1, []sharding.JournalRecord{Record(key, seq, fmt.Sprint(w, "/", seq))}); err != nil {
					errs <- fmt.Errorf("writer %d, record %d: %w", w, seq, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := 0; w < writers; w++ {
		key := sharding.EntityKey{Type: "counter", Shard: w % 4, ID: fmt.Sprint("c", w)}
		var want []string
		for seq := 1; seq <= rounds; seq++ {
			want = append(want, fmt.Sprintf("%d:%d/%d", seq, w, seq))
		}
		mustJournal(t, h[(w+1)%len(h)], key, 1, want...)
	}
}

// journalDeleteType: deleting a type deletes its journals too.
func journalDeleteType(t *testing.T, h []sharding.StateStore) {
	del, ok := sharding.StateStoreAs[sharding.TypeStateDeleter](h[0])
	if !ok {
		t.Skip("the store cannot delete a type's state")
	}
	gone := sharding.EntityKey{Type: "gone", Shard: 1, ID: "a"}
	kept := sharding.EntityKey{Type: "kept", Shard: 1, ID: "a"}
	mustAppend(t, h[0], gone, 2, Record(gone, 1, "x"))
	mustAppend(t, h[1], kept, 2, Record(kept, 1, "y"))
	if err := del.DeleteType(ctxOf(t), "gone"); err != nil {
		t.Fatal(err)
	}
	for _, s := range h {
		mustJournal(t, s, gone, 1)
		mustJournal(t, s, kept, 1, "1:y")
	}
	mustAppend(t, h[1], gone, 2, Record(gone, 1, "again"))
	mustJournal(t, h[0], gone, 1, "1:again")
}
