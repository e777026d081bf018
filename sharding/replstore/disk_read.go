// The replica file's reads, each in a bbolt read transaction beside the writer: one
// record, a journal page, a byte range of a state, pages of remembered entities and of
// entities, a shard's summary for anti-entropy, and the shards held.

package replstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/shardhost/shardhost/sharding"
	bolt "go.etcd.io/bbolt"
)

// record returns a record with its data (a copy).
func (d *stateDisk) record(prefix []byte, kind uint8, id string) (stateRecord, bool, error) {
	return d.recordOf(prefix, &stateRecord{Kind: kind, ID: id})
}

// recordOf returns the record named by ref (its kind, ID and JSeq) with its data (a
// copy).
func (d *stateDisk) recordOf(prefix []byte, ref *stateRecord) (stateRecord, bool, error) {
	var rec stateRecord
	var found bool
	err := d.view(func(eb, rb *bolt.Bucket) error {
		r, ok := decodeStateRecord(ref.Kind, ref.ID, ref.JSeq, rb.Get(ref.key(prefix)))
		if ok {
			found = true
			rec = r
			if r.Kind != stateKindFloor {
				rec.Data = append([]byte{}, r.Data...)
			}
		}
		return nil
	})
	return rec, found, err
}

// stateJournalPage is a page of an entity's journal on one replica (see
// stateJournalReply).
type stateJournalPage struct {
	records []stateRecord // intact, with their data (copies)
	corrupt []stateRecord // versions only
	floor   *stateRecord
	gone    *stateRecord // the entity's tombstone (stateKindGone), if any
	more    bool
	through uint64
	shard   uint64 // the replica's epoch of the shard
}

// journalPage reads key's journal from from (and its floor): its records in JSeq
// order, each checked with sharding.VerifyJournalRecord (a copy that fails goes to
// corrupt, without data), stopping before limit records (0: no limit) or budget bytes
// of data (at least one record).
func (d *stateDisk) journalPage(key sharding.EntityKey, from uint64, limit, budget int) (stateJournalPage, error) {
	prefix := stateShardPrefix(key.Type, key.Shard)
	var p stateJournalPage
	err := d.view(func(eb, rb *bolt.Bucket) error {
		p = stateJournalPage{}
		p.shard, _ = stateEpochOf(eb, prefix)
		start := max(from, 1)
		if fr, ok := decodeStateRecord(stateKindFloor, key.ID, 0, rb.Get(stateRecordKey(prefix, stateKindFloor, key.ID))); ok {
			p.floor = &fr
			start = max(start, fr.Floor)
		}
		if gr, ok := decodeStateRecord(stateKindGone, key.ID, 0, rb.Get(stateRecordKey(prefix, stateKindGone, key.ID))); ok {
			p.gone = &gr
		}
		jp := stateJournalPrefix(prefix, key.ID)
		n, size := 0, 0
		c := rb.Cursor()
		for k, v := c.Seek(stateJournalKey(prefix, key.ID, start)); k != nil && bytes.HasPrefix(k, jp); k, v = c.Next() {
			if len(k) != len(jp)+8 {
				continue
			}
			jseq := binary.BigEndian.Uint64(k[len(jp):])
			r, ok := decodeStateRecord(stateKindJournal, key.ID, jseq, v)
			if n > 0 && ((limit > 0 && n >= limit) || size+len(r.Data) > budget) {
				p.more = true
				return nil
			}
			n++
			p.through = jseq
			if !ok || verifyStateJournal(key.Type, key.Shard, &r) != nil {
				// A torn or corrupt copy: its version if it has one (a value that does not
				// decode has none: any copy elsewhere is newer).
				p.corrupt = append(p.corrupt, stateRecord{Kind: stateKindJournal, ID: key.ID, JSeq: jseq, Epoch: r.Epoch, Seq: r.Seq})
				continue
			}
			size += len(r.Data)
			r.Data = bytes.Clone(r.Data)
			p.records = append(p.records, r)
		}
		return nil
	})
	return p, err
}

// read returns a snapshot's version and size and a copy of at most max bytes of it
// from off (none if off is past its end), and the shard's epoch (0 if none).
func (d *stateDisk) read(prefix []byte, id string, off, maxBytes int) (ver stateVersion, size int, data []byte, found bool, shardEpoch uint64, err error) {
	ver, size, data, found, shardEpoch, _, err = d.readGone(prefix, id, off, maxBytes)
	return
}

// readGone is read, with the version of the entity's tombstone (stateKindGone; zero if
// none).
func (d *stateDisk) readGone(prefix []byte, id string, off, maxBytes int) (ver stateVersion, size int, data []byte, found bool, shardEpoch uint64, gone stateVersion, err error) {
	err = d.view(func(eb, rb *bolt.Bucket) error {
		shardEpoch, _ = stateEpochOf(eb, prefix)
		gone, _, _, _ = decodeStateValue(rb.Get(stateRecordKey(prefix, stateKindGone, id)))
		v, _, all, ok := decodeStateValue(rb.Get(stateRecordKey(prefix, stateKindSnapshot, id)))
		if !ok {
			return nil
		}
		ver, size, found = v, len(all), true
		if off <= len(all) {
			data = append([]byte{}, all[off:off+min(maxBytes, len(all)-off)]...)
		}
		return nil
	})
	return
}

// rememberedPage returns the remember marks of a shard whose IDs sort after after, in
// ID order, stopping before limit records or budget bytes (at least one record);
// more: some are left.
func (d *stateDisk) rememberedPage(prefix []byte, after string, budget, limit int) (recs []stateRecord, more bool, err error) {
	kp := append(bytes.Clone(prefix), stateKindRemember)
	start := append(bytes.Clone(kp), after...)
	err = d.view(func(eb, rb *bolt.Bucket) error {
		recs, more = nil, false
		size := 0
		c := rb.Cursor()
		for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, kp); k, v = c.Next() {
			id := string(k[len(kp):])
			if id == after {
				continue
			}
			ver, remember, _, ok := decodeStateValue(v)
			if !ok {
				continue
			}
			if len(recs) > 0 && (len(recs) >= limit || size+len(id)+32 > budget) {
				more = true
				return nil
			}
			recs = append(recs, stateRecord{Kind: stateKindRemember, ID: id, Epoch: ver.Epoch, Seq: ver.Seq, Remember: remember})
			size += len(id) + 32
		}
		return nil
	})
	return recs, more, err
}

// entitiesPage returns the entities of a shard whose IDs begin with idPrefix and sort
// after after, in ID order, stopping before limit records or budget bytes (at least
// one): a stateKindSnapshot record with its Size for an entity with a snapshot, a
// stateKindJournal record (its first record's version) for one with journal records
// only, a stateKindGone record (the tombstone's version) for one deleted with nothing
// written since. The platform's own records (sharding.PlatformIDPrefix: deltas,
// reminders' records, outbox marks) are not entities. more: some are left.
func (d *stateDisk) entitiesPage(prefix []byte, after, idPrefix string, budget, limit int) (recs []stateRecord, more bool, err error) {
	err = d.view(func(eb, rb *bolt.Bucket) error {
		recs, more = nil, false
		wanted := func(id string) bool {
			return id > after && strings.HasPrefix(id, idPrefix) && !strings.HasPrefix(id, sharding.PlatformIDPrefix)
		}
		c := rb.Cursor()
		// Snapshots, in ID order: at most limit+1 of them.
		var snaps []stateRecord
		kp := append(bytes.Clone(prefix), stateKindSnapshot)
		for k, v := c.Seek(append(bytes.Clone(kp), max(after, idPrefix)...)); k != nil && bytes.HasPrefix(k, kp) && len(snaps) <= limit; k, v = c.Next() {
			id := string(k[len(kp):])
			if !strings.HasPrefix(id, idPrefix) && id > idPrefix {
				break // past the prefix's range
			}
			if !wanted(id) {
				continue
			}
			ver, _, data, ok := decodeStateValue(v)
			if !ok {
				continue
			}
			snaps = append(snaps, stateRecord{Kind: stateKindSnapshot, ID: id, Epoch: ver.Epoch, Seq: ver.Seq, Size: uint64(len(data)), Last: ver.Seq})
		}
		// Journals, keyed by ID length first: every ID once (a seek past its records),
		// with its first record's version, then sorted. (A replica holds no record of an
		// entity older than its tombstone, so any one record's version tells whether the
		// journal is older or newer than another replica's tombstone.)
		var journals []stateRecord
		jp := append(bytes.Clone(prefix), stateKindJournal)
		for k, v := c.Seek(jp); k != nil && bytes.HasPrefix(k, jp); {
			_, id, _, ok := splitStateRecordKey(prefix, k)
			if !ok {
				k, v = c.Next()
				continue
			}
			past := binary.AppendUvarint(bytes.Clone(jp), uint64(len(id)))
			past = append(append(past, id...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
			if !wanted(id) {
				k, v = c.Seek(past)
				continue
			}
			ver, _, _, _ := decodeStateValue(v)
			// Its last record (the highest JSeq, the newest written): the one before
			// the next entity's first.
			var lv []byte
			if k, v = c.Seek(past); k == nil {
				_, lv = c.Last()
			} else {
				_, lv = c.Prev()
				k, v = c.Next()
			}
			last, _, _, _ := decodeStateValue(lv)
			journals = append(journals, stateRecord{Kind: stateKindJournal, ID: id, Epoch: ver.Epoch, Seq: ver.Seq, Last: max(ver.Seq, last.Seq)})
		}
		slices.SortFunc(journals, func(a, b stateRecord) int { return strings.Compare(a.ID, b.ID) })
		// Tombstones of entities with nothing written since: at most limit+1 of them.
		var gones []stateRecord
		gp := append(bytes.Clone(prefix), stateKindGone)
		for k, v := c.Seek(append(bytes.Clone(gp), max(after, idPrefix)...)); k != nil && bytes.HasPrefix(k, gp) && len(gones) <= limit; k, v = c.Next() {
			id := string(k[len(gp):])
			if !strings.HasPrefix(id, idPrefix) && id > idPrefix {
				break
			}
			if !wanted(id) || rb.Get(stateRecordKey(prefix, stateKindSnapshot, id)) != nil {
				continue
			}
			if jk, _ := rb.Cursor().Seek(stateJournalPrefix(prefix, id)); jk != nil && bytes.HasPrefix(jk, stateJournalPrefix(prefix, id)) &&
				len(jk) == len(stateJournalPrefix(prefix, id))+8 {
				continue
			}
			if ver, _, _, ok := decodeStateValue(v); ok {
				gones = append(gones, stateRecord{Kind: stateKindGone, ID: id, Epoch: ver.Epoch, Seq: ver.Seq})
			}
		}
		all := make([]stateRecord, 0, len(snaps)+len(journals)+len(gones))
		all = append(append(append(all, snaps...), journals...), gones...)
		// By ID, a snapshot before a journal of the same entity (which it stands for).
		slices.SortStableFunc(all, func(a, b stateRecord) int { return strings.Compare(a.ID, b.ID) })
		size := 0
		for i := range all {
			r := all[i]
			if i > 0 && all[i-1].ID == r.ID {
				continue
			}
			if i+1 < len(all) && all[i+1].ID == r.ID {
				r.Last = max(r.Last, all[i+1].Last) // a snapshot's entity's journal
			}
			if len(recs) > 0 && (len(recs) >= limit || size+r.listedSize() > budget) {
				more = true
				return nil
			}
			recs = append(recs, r)
			size += r.listedSize()
		}
		return nil
	})
	return recs, more, err
}

// stateSummary digests a shard's records on one member: its epoch, its record count,
// and a SHA-256 over (kind, ID, epoch, seq, and a journal record's JSeq or a floor's
// floor) of each record in key order, which two members holding the same versions
// compute alike. entries lists the versions.
type stateSummary struct {
	epoch   uint64
	count   int
	hash    []byte
	entries []stateRecord
}

// summary digests a shard's records, listing their versions if withEntries.
func (d *stateDisk) summary(prefix []byte, withEntries bool) (stateSummary, error) {
	var sum stateSummary
	err := d.view(func(eb, rb *bolt.Bucket) error {
		sum = stateSummary{}
		sum.epoch, _ = stateEpochOf(eb, prefix)
		h := sha256.New()
		var buf []byte
		c := rb.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			kind, id, jseq, ok := splitStateRecordKey(prefix, k)
			if !ok {
				continue
			}
			r, ok := decodeStateRecord(kind, id, jseq, v)
			if !ok {
				continue
			}
			buf = append(buf[:0], kind)
			buf = binary.AppendUvarint(buf, uint64(len(id)))
			buf = append(buf, id...)
			buf = binary.BigEndian.AppendUint64(buf, r.Epoch)
			buf = binary.BigEndian.AppendUint64(buf, r.Seq)
			switch kind { // journals' records only: others digest as before journals
			case stateKindJournal:
				buf = binary.BigEndian.AppendUint64(buf, jseq)
			case stateKindFloor:
				buf = binary.BigEndian.AppendUint64(buf, r.Floor)
			}
			h.Write(buf)
			sum.count++
			if withEntries {
				sum.entries = append(sum.entries, stateRecord{Kind: kind, ID: id, Epoch: r.Epoch, Seq: r.Seq, JSeq: jseq, Floor: r.Floor})
			}
		}
		sum.hash = h.Sum(nil)
		return nil
	})
	return sum, err
}

// needs returns the indexes of the records this member lacks or holds older: a journal
// record below its entity's floor here is not needed, nor a record older than its
// entity's tombstone here (stateKindGone), and a journal record whose copy here is
// corrupt is.
func (d *stateDisk) needs(typ string, shard int, recs []stateRecord) ([]int, error) {
	prefix := stateShardPrefix(typ, shard)
	var need []int
	err := d.view(func(eb, rb *bolt.Bucket) error {
		need = nil
		for i := range recs {
			r := &recs[i]
			if r.Kind != stateKindGone {
				if g, _, _, ok := decodeStateValue(rb.Get(stateRecordKey(prefix, stateKindGone, r.ID))); ok && r.version().less(g) {
					continue // older than the entity's tombstone: deleted here
				}
			}
			if r.Kind == stateKindJournal {
				if fr, ok := decodeStateRecord(stateKindFloor, r.ID, 0, rb.Get(stateRecordKey(prefix, stateKindFloor, r.ID))); ok && r.JSeq < fr.Floor {
					continue
				}
			}
			o, ok := decodeStateRecord(r.Kind, r.ID, r.JSeq, rb.Get(r.key(prefix)))
			if !ok || r.newer(&o) || (r.Kind == stateKindJournal && verifyStateJournal(typ, shard, &o) != nil) {
				need = append(need, i)
			}
		}
		return nil
	})
	return need, err
}

// shards lists the shards this member stores (those with an epoch entry).
func (d *stateDisk) shards() ([]stateShardRef, error) {
	var out []stateShardRef
	err := d.view(func(eb, rb *bolt.Bucket) error {
		out = nil
		return eb.ForEach(func(k, v []byte) error {
			if typ, shard, ok := parseStateShardPrefix(k); ok {
				out = append(out, stateShardRef{typ, shard})
			}
			return nil
		})
	})
	return out, err
}
