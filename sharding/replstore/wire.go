package replstore

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/fxamacker/cbor/v2"

	"github.com/shardhost/shardhost/sharding"
)

// This file holds the formats of the replicated state store (store.go):
// its node-to-node messages and its records on disk.

// Topics of the replicated state store's protocol. Every message is a request (one-way
// messages are dropped); request and reply bodies are CBOR maps with integer keys. Every
// reply type has Code at key 1 and Msg at key 2, so a reply of any topic decodes as a
// stateReply, which is how a busy replica answers whatever it was asked; and the
// replier's store ID at key 15 (ring.go: a reply from a data directory other
// than the one the ring admitted does not count as that replica's).
const (
	// topicStateWrite: stateWriteReq → stateReply. Apply records (fenced writes of
	// Save/Remember, a fenced write of no record from FenceShard, or unfenced repair
	// writes).
	topicStateWrite = "state/write"
	// topicStateChunk: stateChunkReq → stateReply. Stage a piece of a snapshot too
	// large for one message; a later state/write names the transfer.
	topicStateChunk = "state/chunk"
	// topicStateRead: stateReadReq → stateReadReply. A snapshot's version and bytes from
	// an offset, at most ChunkSize of them.
	topicStateRead = "state/read"
	// topicStateRemembered: stateRememberedReq → stateRememberedReply. A page of a
	// shard's remember/forget records (tombstones included), in ID order.
	topicStateRemembered = "state/remembered"
	// topicStateSummary: stateSummaryReq → stateSummaryReply. Anti-entropy, first step:
	// compare a shard's record-version digest, exchange the shard's epoch.
	topicStateSummary = "state/summary"
	// topicStateDiff: stateDiffReq → stateDiffReply. Anti-entropy, second step: which of
	// these record versions the replica lacks or holds older.
	topicStateDiff = "state/diff"
	// topicStateDeleteType: stateDeleteTypeReq → stateReply. Delete every record of an
	// entity type on this member (Store.DeleteType).
	topicStateDeleteType = "state/delete-type"
	// topicStateHandover: stateHandoverReq → stateHandoverReply. A handover round
	// (ring.go): does the replica see these members up, and has it synced
	// every shard it stores with their replica sets?
	topicStateHandover = "state/handover"
	// topicStateForget: stateForgetReq → stateForgetReply. An operator forgets a
	// retained member (Store.ForgetMember).
	topicStateForget = "state/forget"
	// topicStateJournal: stateJournalReq → stateJournalReply. A page of an entity's
	// journal from a sequence number: its intact records, the versions of its corrupt
	// copies, and its truncation floor. (Appends and truncations are state/write
	// requests of records of kinds stateKindJournal and stateKindFloor.)
	topicStateJournal = "state/journal"
	// topicStateWrites: stateWritesReq → stateWritesReply. Several writes in one
	// message, each applied as a state/write (its own fence, its own reply), their
	// disk transactions submitted together, so that one fsync takes them all: the
	// journal appends of many entities to one replica, coalesced by the sender
	// (coalesce.go).
	topicStateWrites = "state/writes"
)

// Reply codes: the outcome of a request, mapped back to errors by the requester
// (stateCodeError), so that errors.Is(err, sharding.ErrStaleEpoch) holds across members.
const (
	stateCodeOK       uint8 = iota
	stateCodeStale          // sharding.ErrStaleEpoch: the replica has a newer epoch for the shard
	stateCodeTooLarge       // sharding.ErrStateTooLarge
	stateCodeBad            // sharding.ErrMalformedMessage or sharding.ErrInvalidStateKey: a bad request
	stateCodeBusy           // sharding.ErrStoreUnavailable: the replica serves too many requests
	stateCodeFailure        // sharding.ErrStoreUnavailable: the replica's disk failed, or it is closed
	stateCodeChanged        // errStateChanged: a chunked read found a newer version
	stateCodeCorrupt        // sharding.ErrCorruptRecord: a journal record failed its checksum
)

// Record kinds: what a record under a shard holds.
const (
	// stateKindSnapshot: an entity's latest snapshot.
	stateKindSnapshot uint8 = 1
	// stateKindRemember: whether an entity is remembered (Remember true) or was
	// forgotten (false: a tombstone, kept so that a stale replica cannot revive it).
	stateKindRemember uint8 = 2
	// stateKindJournal: one record of an entity's journal, at JSeq: Data is its
	// encoding (sharding.JournalEntry), checked with sharding.VerifyJournalRecord by
	// every replica before it writes it and after it reads it. The newest version wins
	// per (ID, JSeq).
	stateKindJournal uint8 = 3
	// stateKindFloor: an entity's journal's truncation floor (Floor): its records below
	// it are gone, and a replica drops those it is sent. Floors only rise: the highest
	// wins, then the newest version (stateRecord.newer).
	stateKindFloor uint8 = 4
	// stateKindGone: an entity's deletion (Store.DeleteEntity), a tombstone at its
	// version: every record of the entity older than it (its snapshot, remember mark,
	// journal records and floor) is deleted when the tombstone is applied and dropped when
	// it arrives later (a repair from a replica that missed the delete), and readers
	// leave out what an answer older than another answer's tombstone holds. Records
	// written after it (newer versions) start the entity anew. Kept for good, as forget
	// marks are.
	stateKindGone uint8 = 5
)

// stateVersion orders the writes of one record: allocation epoch first, then the
// writer's sequence number (its hybrid clock: Unix nanoseconds, strictly increasing
// within a process). The newest version wins everywhere.
type stateVersion struct {
	Epoch uint64
	Seq   uint64
}

// less reports whether v is older than o.
func (v stateVersion) less(o stateVersion) bool {
	if v.Epoch != o.Epoch {
		return v.Epoch < o.Epoch
	}
	return v.Seq < o.Seq
}

// stateRecord is one record on the wire: a snapshot or a remember/forget mark, with
// its version. In digests (state/diff) and listings Data is absent.
type stateRecord struct {
	Kind     uint8  `cbor:"1,keyasint"`
	ID       string `cbor:"2,keyasint"`
	Epoch    uint64 `cbor:"3,keyasint"`
	Seq      uint64 `cbor:"4,keyasint"`
	Remember bool   `cbor:"5,keyasint,omitempty"`
	Data     []byte `cbor:"6,keyasint,omitempty"`
	// Xfer, when not 0, names the chunked transfer (state/chunk) that staged Data on the
	// receiving replica.
	Xfer uint64 `cbor:"7,keyasint,omitempty"`
	// JSeq is a journal record's sequence number (stateKindJournal; 0 for other kinds).
	JSeq uint64 `cbor:"8,keyasint,omitempty"`
	// Floor is a journal's truncation floor (stateKindFloor; 0 for other kinds).
	Floor uint64 `cbor:"9,keyasint,omitempty"`
	// Size is a snapshot's size in bytes, in an entity listing (stateEntitiesKind).
	Size uint64 `cbor:"10,keyasint,omitempty"`
	// Last is the Seq (the writer's clock, Unix nanoseconds) of the entity's newest
	// record, its snapshot or a journal record, in an entity listing: when it was last
	// written (sharding.StoredEntity.SavedAt).
	Last uint64 `cbor:"11,keyasint,omitempty"`
}

func (r *stateRecord) version() stateVersion { return stateVersion{r.Epoch, r.Seq} }

// listedSize bounds the bytes of the record in a listing (no data): its ID, and 32
// bytes of kind and version, 16 more for a journal record's JSeq or a floor.
func (r *stateRecord) listedSize() int {
	if r.Kind == stateKindJournal || r.Kind == stateKindFloor {
		return len(r.ID) + 48
	}
	return len(r.ID) + 32
}

// newer reports whether r supersedes o, a record of the same kind and key: a higher
// floor for floors, else a newer version.
func (r *stateRecord) newer(o *stateRecord) bool {
	if r.Kind == stateKindFloor && r.Floor != o.Floor {
		return r.Floor > o.Floor
	}
	return o.version().less(r.version())
}

// sameAs reports whether r and o are the same write of one record: the same version,
// and for floors the same floor.
func (r *stateRecord) sameAs(o *stateRecord) bool {
	return r.version() == o.version() && r.Floor == o.Floor
}

// stateWriteReq applies records to one shard. Fence: refuse (stateCodeStale) unless
// Epoch >= the replica's epoch for the shard; Save and Remember fence, repair writes do
// not (their records carry their own versions). Either way the replica's epoch for the
// shard becomes max(its epoch, Epoch), and each record is stored only if newer than the
// replica's. A fenced write may have no records (FenceShard: the epoch alone); an
// unfenced one may not.
type stateWriteReq struct {
	Type    string        `cbor:"1,keyasint"`
	Shard   int           `cbor:"2,keyasint"`
	Epoch   uint64        `cbor:"3,keyasint"`
	Fence   bool          `cbor:"4,keyasint,omitempty"`
	Records []stateRecord `cbor:"5,keyasint"`
}

// stateReply answers state/write and state/chunk; Epoch is the replica's epoch for the
// shard after the request (state/write).
// stateHandoverReq asks whether the replica sees the members Live (sorted addresses)
// up and has synced with their replica sets.
type stateHandoverReq struct {
	Live []string `cbor:"1,keyasint"`
	// RingOnly: the asker wants the replica's ring alone (it cannot admit the live set
	// now); the replica runs no repair pass for it.
	RingOnly bool `cbor:"2,keyasint,omitempty"`
	// Key is the live set with each member's store ID (stateRingView.liveKey); the
	// replica compares it with its own (a peer that sends none: Live alone).
	Key string `cbor:"3,keyasint,omitempty"`
}

// stateHandoverReply: the members the replica sees up (Live) and ranks over (Admitted,
// of generation Gen), and whether its last complete repair pass had the live set asked
// about (Synced).
type stateHandoverReply struct {
	Code     uint8    `cbor:"1,keyasint"`
	Msg      string   `cbor:"2,keyasint,omitempty"`
	Live     []string `cbor:"3,keyasint"`
	Admitted []string `cbor:"4,keyasint"`
	Synced   bool     `cbor:"5,keyasint,omitempty"`
	Gen      uint64   `cbor:"6,keyasint,omitempty"` // the generation of Admitted
	// Key: the replica's live set with store IDs (stateRingView.liveKey); Stores[i]:
	// the store ID Admitted[i] was admitted with ("": not known).
	Key    string   `cbor:"7,keyasint,omitempty"`
	Stores []string `cbor:"8,keyasint,omitempty"`
	// Standing: whether the replica's ring is confirmed (absent: yes, as from members of
	// versions before it was sent), or not yet and on a new data directory (ringFresh:
	// one that had taken no part in a cluster when its store opened it) or on one that
	// had (ringUnconfirmed).
	Standing uint8  `cbor:"9,keyasint,omitempty"`
	Store    string `cbor:"15,keyasint,omitempty"`
}

// The standings of a replica's ring in a handover reply (stateHandoverReply.Standing).
const (
	ringConfirmed   uint8 = 0
	ringFresh       uint8 = 1
	ringUnconfirmed uint8 = 2
)

// stateForgetReq asks the replica to stop retaining the member at Addr.
type stateForgetReq struct {
	Addr string `cbor:"1,keyasint"`
}

// stateForgetReply: whether the replica retained the member (Retained), and its
// ring's generation after the request.
type stateForgetReply struct {
	Code     uint8  `cbor:"1,keyasint"`
	Msg      string `cbor:"2,keyasint,omitempty"`
	Retained bool   `cbor:"3,keyasint,omitempty"`
	Gen      uint64 `cbor:"4,keyasint,omitempty"`
	Store    string `cbor:"15,keyasint,omitempty"` // the replier's store ID (stateDisk.storeID)
}

// stateDeleteTypeReq deletes the records of Type, marking it deleted up to At.
type stateDeleteTypeReq struct {
	Type string `cbor:"1,keyasint"`
	At   uint64 `cbor:"2,keyasint"`
}

type stateReply struct {
	Code  uint8  `cbor:"1,keyasint"`
	Msg   string `cbor:"2,keyasint,omitempty"`
	Epoch uint64 `cbor:"3,keyasint,omitempty"`
	Store string `cbor:"15,keyasint,omitempty"` // the replier's store ID (stateDisk.storeID)
}

// stateChunkReq stages bytes [Offset, Offset+len(Data)) of a Total-byte snapshot under
// transfer Xfer (chosen at random by the sender). Chunks arrive in order.
type stateChunkReq struct {
	Xfer   uint64 `cbor:"1,keyasint"`
	Total  int    `cbor:"2,keyasint"`
	Offset int    `cbor:"3,keyasint"`
	Data   []byte `cbor:"4,keyasint"`
}

// stateReadReq asks for an entity's snapshot from byte Offset. With Offset > 0 the
// replica answers stateCodeChanged unless it still holds version (Epoch, Seq).
type stateReadReq struct {
	Type   string `cbor:"1,keyasint"`
	Shard  int    `cbor:"2,keyasint"`
	ID     string `cbor:"3,keyasint"`
	Offset int    `cbor:"4,keyasint,omitempty"`
	Epoch  uint64 `cbor:"5,keyasint,omitempty"`
	Seq    uint64 `cbor:"6,keyasint,omitempty"`
}

// stateReadReply: Found, the version and Size of the snapshot, its bytes from the
// requested offset (at most the replica's ChunkSize), and the replica's epoch of the
// shard (Shard: the newest it has seen, in a fence or a write).
type stateReadReply struct {
	Code  uint8  `cbor:"1,keyasint"`
	Msg   string `cbor:"2,keyasint,omitempty"`
	Found bool   `cbor:"3,keyasint,omitempty"`
	Epoch uint64 `cbor:"4,keyasint,omitempty"`
	Seq   uint64 `cbor:"5,keyasint,omitempty"`
	Size  int    `cbor:"6,keyasint,omitempty"`
	Data  []byte `cbor:"7,keyasint,omitempty"`
	Shard uint64 `cbor:"8,keyasint,omitempty"`
	// GoneEpoch and GoneSeq: the version of the entity's tombstone (stateKindGone), if
	// the replica has one: a snapshot not newer than it is gone.
	GoneEpoch uint64 `cbor:"9,keyasint,omitempty"`
	GoneSeq   uint64 `cbor:"10,keyasint,omitempty"`
	Store     string `cbor:"15,keyasint,omitempty"` // the replier's store ID (stateDisk.storeID)
}

// stateRememberedReq asks for the remember records of a shard whose IDs sort after
// After ("" for the first page).
type stateRememberedReq struct {
	Type  string `cbor:"1,keyasint"`
	Shard int    `cbor:"2,keyasint"`
	After string `cbor:"3,keyasint,omitempty"`
	// Entities, when set, asks for the shard's entities instead (StateLister): those
	// with a snapshot (a stateKindSnapshot record with its Size) or only journal
	// records (a stateKindJournal record, with its newest record's version), whose IDs
	// begin with Prefix, and those deleted with nothing written since (a stateKindGone
	// record: the tombstone, which cancels what an older replica lists).
	Entities bool   `cbor:"4,keyasint,omitempty"`
	Prefix   string `cbor:"5,keyasint,omitempty"`
	// Due, when set, asks for the shard's due index instead (due.go): its entries due
	// at or before Before (Unix ms), at most Limit of them, from the earliest.
	Due    bool  `cbor:"6,keyasint,omitempty"`
	Before int64 `cbor:"7,keyasint,omitempty"`
	Limit  int   `cbor:"8,keyasint,omitempty"`
}

// stateRememberedReply: a page of remember records in ID order; More: there are more.
type stateRememberedReply struct {
	Code    uint8         `cbor:"1,keyasint"`
	Msg     string        `cbor:"2,keyasint,omitempty"`
	Records []stateRecord `cbor:"3,keyasint,omitempty"`
	More    bool          `cbor:"4,keyasint,omitempty"`
	// Due, Next and Shard answer a due request: the entries, the due time of the
	// first entry not returned (0: none), and the replica's epoch of the shard.
	Due   []stateDueEntry `cbor:"5,keyasint,omitempty"`
	Next  int64           `cbor:"6,keyasint,omitempty"`
	Shard uint64          `cbor:"7,keyasint,omitempty"`
	Store string          `cbor:"15,keyasint,omitempty"` // the replier's store ID (stateDisk.storeID)
}

// stateWritesReq carries several write requests (none with chunked data: Xfer is 0).
type stateWritesReq struct {
	Writes []stateWriteReq `cbor:"1,keyasint"`
}

// stateWritesReply answers each write of a stateWritesReq, in order, as state/write
// would (Code, Msg, Epoch).
type stateWritesReply struct {
	Code    uint8        `cbor:"1,keyasint"`
	Msg     string       `cbor:"2,keyasint,omitempty"`
	Results []stateReply `cbor:"3,keyasint,omitempty"`
	Store   string       `cbor:"15,keyasint,omitempty"` // the replier's store ID (stateDisk.storeID)
}

// stateJournalReq asks for a page of an entity's journal: its records from From (at
// least the replica's floor), at most Limit of them (0: no limit) and about ChunkSize
// bytes (at least one record).
type stateJournalReq struct {
	Type  string `cbor:"1,keyasint"`
	Shard int    `cbor:"2,keyasint"`
	ID    string `cbor:"3,keyasint"`
	From  uint64 `cbor:"4,keyasint,omitempty"`
	Limit int    `cbor:"5,keyasint,omitempty"`
}

// stateJournalReply: a page of the entity's journal in JSeq order: Records, the intact
// copies (Kind stateKindJournal, with their versions and data), and Corrupt, the copies
// that failed sharding.VerifyJournalRecord (their versions, no data: the reader repairs
// them from another replica); Floor, the journal's floor record if it has one; More:
// the page stops at JSeq Through, and more records follow; Shard: the replica's epoch
// of the shard.
type stateJournalReply struct {
	Code    uint8         `cbor:"1,keyasint"`
	Msg     string        `cbor:"2,keyasint,omitempty"`
	Records []stateRecord `cbor:"3,keyasint,omitempty"`
	Corrupt []stateRecord `cbor:"4,keyasint,omitempty"`
	Floor   *stateRecord  `cbor:"5,keyasint,omitempty"`
	More    bool          `cbor:"6,keyasint,omitempty"`
	Through uint64        `cbor:"7,keyasint,omitempty"`
	Shard   uint64        `cbor:"8,keyasint,omitempty"`
	// Gone: the entity's tombstone (stateKindGone, a version), if the replica has one:
	// records and a floor not newer than it are gone.
	Gone  *stateRecord `cbor:"9,keyasint,omitempty"`
	Store string       `cbor:"15,keyasint,omitempty"` // the replier's store ID (stateDisk.storeID)
}

// stateSummaryReq: the sender holds Count records of the shard whose versions hash to
// Hash (see stateDisk.summary), and has seen Epoch for it.
type stateSummaryReq struct {
	Type  string `cbor:"1,keyasint"`
	Shard int    `cbor:"2,keyasint"`
	Epoch uint64 `cbor:"3,keyasint"`
	Count int    `cbor:"4,keyasint"`
	Hash  []byte `cbor:"5,keyasint"`
}

// stateSummaryReply: Same: the replica holds exactly the same record versions; Epoch:
// its epoch for the shard (after taking the sender's).
type stateSummaryReply struct {
	Code  uint8  `cbor:"1,keyasint"`
	Msg   string `cbor:"2,keyasint,omitempty"`
	Epoch uint64 `cbor:"3,keyasint,omitempty"`
	Same  bool   `cbor:"4,keyasint,omitempty"`
	Store string `cbor:"15,keyasint,omitempty"` // the replier's store ID (stateDisk.storeID)
}

// stateDiffReq lists record versions (no data) the sender holds for the shard.
type stateDiffReq struct {
	Type    string        `cbor:"1,keyasint"`
	Shard   int           `cbor:"2,keyasint"`
	Records []stateRecord `cbor:"3,keyasint"`
}

// stateDiffReply: the indexes, in the request's Records, of the records the replica
// lacks or holds an older version of.
type stateDiffReply struct {
	Code  uint8  `cbor:"1,keyasint"`
	Msg   string `cbor:"2,keyasint,omitempty"`
	Need  []int  `cbor:"3,keyasint,omitempty"`
	Store string `cbor:"15,keyasint,omitempty"` // the replier's store ID (stateDisk.storeID)
}

var (
	stateEncMode = func() cbor.EncMode {
		em, err := cbor.CoreDetEncOptions().EncMode()
		if err != nil {
			panic(err)
		}
		return em
	}()
	// stateDecMode bounds what a peer's message can make the decoder allocate beyond
	// its own size: nesting, array lengths (a diff or a listing holds at most
	// stateMaxListLen records) and map sizes.
	stateDecMode = func() cbor.DecMode {
		dm, err := cbor.DecOptions{
			MaxNestedLevels:  6,
			MaxArrayElements: stateMaxListLen,
			MaxMapPairs:      16,
			DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		}.DecMode()
		if err != nil {
			panic(err)
		}
		return dm
	}()
)

// stateMaxListLen caps the records of one message (a write, a diff, a listing page).
const stateMaxListLen = 1 << 16

// encodeState encodes a message or record (statecodec.go's fast path for those of
// every journal append, the same bytes).
func encodeState(v any) []byte {
	if b, ok := encodeStateFast(v); ok {
		return b
	}
	b, err := stateEncMode.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("replstore: encoding %T: %v", v, err)) // only our own types get here
	}
	return b
}

// decodeState decodes a message or record into v, a pointer to its zero value
// (statecodec.go's fast path for those of every journal append: their records' data
// then alias b). Errors: sharding.ErrMalformedMessage.
func decodeState(b []byte, v any) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: %T: empty body", sharding.ErrMalformedMessage, v)
	}
	if decodeStateFast(b, v) {
		return nil
	}
	if err := stateDecMode.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %T: %v", sharding.ErrMalformedMessage, v, err)
	}
	return nil
}

// On disk (bbolt, file state.db), three buckets:
//
//	epochs:  shard prefix → epoch (8 bytes, big-endian)
//	records: shard prefix | kind (1 byte) | entity ID → value (snapshots, remember
//	         marks, journal floors)
//	         shard prefix | 3 | uvarint(len(entity ID)) | entity ID | JSeq (8 bytes,
//	         big-endian) → value (journal records)
//	ring:    "ring" → stateRingRecord (CBOR): the ring of ring.go;
//	         "store" → the file's store ID (16 hex digits, stateDisk.storeID);
//	         "wal" → the number of the last write-ahead log entry it holds (wal.go)
//
// shard prefix = uvarint(len(type)) | type | shard (8 bytes, big-endian), so that one
// shard's records are contiguous and no type's prefix is another's. value =
// format (1 byte, 1) | epoch (8) | seq (8) | flags (1; bit 0: remembered) | data; a
// journal record's data is its encoding, a floor's the floor (8 bytes, big-endian).
// An entity's journal records are contiguous and in JSeq order (its ID is
// length-prefixed, so no ID's range holds another's): a read from a JSeq is a cursor's
// seek and walk, and a truncation deletes a range.
// Every shard with records has an epochs entry, so the epochs bucket lists the shards
// a member stores.
var (
	stateBucketEpochs  = []byte("epochs")
	stateBucketRecords = []byte("records")
	stateBucketRing    = []byte("ring")
	// stateBucketDue is the due index of the reminder records (due.go).
	stateBucketDue  = []byte("due")
	stateRingKey    = []byte("ring")
	stateStoreIDKey = []byte("store") // in the ring bucket: the file's store ID (stateDisk.storeID)
	// stateNewKey, in the ring bucket, is present while the file has answered no
	// member's request (stateDisk.created).
	stateNewKey = []byte("new")
	// stateWALKey, in the ring bucket: the number of the last write-ahead log entry
	// the file holds (8 bytes, big-endian; wal.go).
	stateWALKey = []byte("wal")
)

// stateRingRecord is the ring as this member last saw it (ring.go): the
// admitted members, the ring's generation, and this member's own address then (a
// member restarted at another address does not restore it). Stores[i] is the store ID
// Admitted[i] was admitted with ("" or absent: not known; records written before
// rings kept store IDs have none). Joining are the members up that the ring had not
// admitted yet (absent in records written before rings kept them).
type stateRingRecord struct {
	Gen      uint64   `cbor:"1,keyasint"`
	Self     string   `cbor:"2,keyasint"`
	Admitted []string `cbor:"3,keyasint"`
	Stores   []string `cbor:"4,keyasint,omitempty"`
	Joining  []string `cbor:"5,keyasint,omitempty"`
	// Unconfirmed: the ring was started from a view, not from a saved ring nor as the
	// first member of a new cluster, and no member with a confirmed ring has been met
	// since (stateRing.unconfirmed).
	Unconfirmed bool `cbor:"6,keyasint,omitempty"`
}

const (
	stateValueFormat = 1
	stateValueHeader = 1 + 8 + 8 + 1
)

func stateShardPrefix(typ string, shard int) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+len(typ)+8)
	b = binary.AppendUvarint(b, uint64(len(typ)))
	b = append(b, typ...)
	return binary.BigEndian.AppendUint64(b, uint64(shard))
}

// parseStateShardPrefix reads a whole epochs key back.
func parseStateShardPrefix(k []byte) (typ string, shard int, ok bool) {
	n, w := binary.Uvarint(k)
	if w <= 0 || n == 0 || n > sharding.MaxStateTypeLen || uint64(len(k)-w) != n+8 {
		return "", 0, false
	}
	typ = string(k[w : w+int(n)])
	s := binary.BigEndian.Uint64(k[w+int(n):])
	if s > math.MaxInt {
		return "", 0, false
	}
	return typ, int(s), true
}

func stateRecordKey(prefix []byte, kind uint8, id string) []byte {
	return appendStateRecordKey(make([]byte, 0, len(prefix)+1+len(id)), prefix, kind, id)
}

// appendStateRecordKey appends stateRecordKey(prefix, kind, id) to dst.
func appendStateRecordKey(dst, prefix []byte, kind uint8, id string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, kind)
	return append(dst, id...)
}

// splitStateRecordKey returns the kind and ID of a records key under prefix (and a
// journal record's JSeq).
func splitStateRecordKey(prefix, k []byte) (kind uint8, id string, jseq uint64, ok bool) {
	if len(k) <= len(prefix) || string(k[:len(prefix)]) != string(prefix) {
		return 0, "", 0, false
	}
	kind, rest := k[len(prefix)], k[len(prefix)+1:]
	if kind != stateKindJournal {
		return kind, string(rest), 0, true
	}
	n, w := binary.Uvarint(rest)
	if w <= 0 || uint64(len(rest)-w) != n+8 {
		return 0, "", 0, false
	}
	return kind, string(rest[w : w+int(n)]), binary.BigEndian.Uint64(rest[w+int(n):]), true
}

// stateJournalPrefix is the common prefix of the keys of an entity's journal records.
func stateJournalPrefix(prefix []byte, id string) []byte {
	k := make([]byte, 0, len(prefix)+1+binary.MaxVarintLen64+len(id)+8)
	k = append(k, prefix...)
	k = append(k, stateKindJournal)
	k = binary.AppendUvarint(k, uint64(len(id)))
	return append(k, id...)
}

// stateJournalKey is the key of an entity's journal record jseq.
func stateJournalKey(prefix []byte, id string, jseq uint64) []byte {
	return binary.BigEndian.AppendUint64(stateJournalPrefix(prefix, id), jseq)
}

// key returns the record's key under the shard prefix.
func (r *stateRecord) key(prefix []byte) []byte {
	if r.Kind == stateKindJournal {
		return stateJournalKey(prefix, r.ID, r.JSeq)
	}
	return stateRecordKey(prefix, r.Kind, r.ID)
}

// appendKey appends the record's key under the shard prefix to dst.
func (r *stateRecord) appendKey(dst, prefix []byte) []byte {
	if r.Kind != stateKindJournal {
		return appendStateRecordKey(dst, prefix, r.Kind, r.ID)
	}
	dst = append(dst, prefix...)
	dst = append(dst, stateKindJournal)
	dst = binary.AppendUvarint(dst, uint64(len(r.ID)))
	dst = append(dst, r.ID...)
	return binary.BigEndian.AppendUint64(dst, r.JSeq)
}

func encodeStateValue(r *stateRecord) []byte {
	v := make([]byte, stateValueHeader, stateValueHeader+max(len(r.Data), 8))
	v[0] = stateValueFormat
	binary.BigEndian.PutUint64(v[1:], r.Epoch)
	binary.BigEndian.PutUint64(v[9:], r.Seq)
	if r.Remember {
		v[17] = 1
	}
	if r.Kind == stateKindFloor {
		return binary.BigEndian.AppendUint64(v, r.Floor)
	}
	return append(v, r.Data...)
}

// decodeStateRecord reads the value v of the record of kind, id (and jseq) back; Data
// aliases v. ok is false for a value that does not decode.
func decodeStateRecord(kind uint8, id string, jseq uint64, v []byte) (stateRecord, bool) {
	ver, remember, data, ok := decodeStateValue(v)
	if !ok {
		return stateRecord{}, false
	}
	r := stateRecord{Kind: kind, ID: id, Epoch: ver.Epoch, Seq: ver.Seq, Remember: remember, Data: data, JSeq: jseq}
	if kind == stateKindFloor {
		if len(data) != 8 {
			return stateRecord{}, false
		}
		r.Floor, r.Data = binary.BigEndian.Uint64(data), nil
	}
	return r, true
}

// decodeStateValue reads a records value; data aliases v.
func decodeStateValue(v []byte) (ver stateVersion, remember bool, data []byte, ok bool) {
	if len(v) < stateValueHeader || v[0] != stateValueFormat {
		return stateVersion{}, false, nil, false
	}
	ver = stateVersion{binary.BigEndian.Uint64(v[1:]), binary.BigEndian.Uint64(v[9:])}
	return ver, v[17]&1 != 0, v[stateValueHeader:], true
}
