// Package sharding is cluster sharding as Akka describes it: every member runs a shard
// region per entity type, which routes each message to the region that hosts the
// message's shard (at most one hop); a shard coordinator on the oldest member decides
// where shards live with a pluggable allocation strategy; regions cache shard homes and
// buffer messages while a home is being resolved. Entities are created on demand by an
// EntityFactory (the host's wasm instances) and get their messages one at a time, in
// order per sender.
//
// Design: docs/design.md ("Cluster sharding"), after Akka Cluster Sharding ("How it
// works", scenarios 1 and 2).
//
// # What an embedder uses
//
// Sharding, with New, Config and DefaultConfig, is the entry point: Tell and Ask (and
// TellMessage and AskMessage for a Message with its sender, MessageKind and tag),
// StartType and StopType, Passivate (answered PassivateDone or PassivateInactive),
// LocalState and ClusterShardingState (a RegionState per member, a ShardState per
// shard). A type's TypeSettings name its allocation (AllocationLeastShard,
// AllocationPriority), its checkpoint policy (CheckpointJournal, the default,
// CheckpointPassivation, CheckpointEveryMessage or "every:N"), the journal records
// kept behind a base (DefaultHistory; HistoryAll keeps every one, KeepsAllHistory
// says so), whom MaxActive passivates (PassivationLRU,
// the default, PassivationLFU or PassivationWTinyLFU), and a state TTL (StateTTL, at
// least MinStateTTL) after which an idle entity's state is deleted.
//
// The embedder supplies an EntityFactory that makes Entity values (optionally
// EntityLifecycle, EntityStopHook, EntityStateSaved and JournaledEntity), a TypeResolver of
// TypeSettings, the Membership and Messenger of package cluster, and DData, the
// distributed data the coordinator keeps its allocations in. An entity learns of the
// message it handles from MessageInfoFrom (a MessageInfo: its sender, and whether it is
// KindMessage, KindTimer, KindChanged, KindReminder or KindHTTP; a journal's KindBase records are
// never messages), answers with a Reply, and passes a message on
// by returning a ForwardTo. ShardAllocationStrategy, with LeastShardAllocationStrategy
// and PriorityAllocationStrategy (and ErrNoRegion, its error for no region at all), is
// the pluggable allocation.
//
// StateStore is the pluggable entity state store, keyed by EntityKey: MemoryStateStore
// (NewMemoryStateStore) is its in-memory twin, package replstore the built-in one,
// package pgstore the PostgreSQL one, and statestoretest the contract every store
// passes. BatchStateStore (with StateSave), ShardFencer, ExternalStateStore,
// TypeStateDeleter and EntityStateDeleter (one entity's delete, fenced) are what a
// store may also do, and StateStoreAs finds them through
// decorators. A load carries the reader's epoch (WithReadEpoch, ReadEpoch). A store
// refuses what CheckStateKey refuses (longer than MaxStateTypeLen or MaxStateIDLen,
// ErrInvalidStateKey), and fails with ErrStaleEpoch, ErrNoState, ErrStateTooLarge and
// ErrStoreUnavailable. StoredShard with its StoredSnapshot and StoredJournal values is what the
// shardhost command's state export and import move between stores, and StateDigest
// sums their content; DeltaIDPrefix marks the host's delta records among the snapshots.
//
// A JournalStore also keeps each entity's journal: JournalRecord values, each the
// encoding of a JournalEntry (Encode, DecodeJournalEntry), which a store checks with
// CheckJournalAppend before it writes and VerifyJournalRecord after it reads
// (ErrCorruptRecord); ReplyDigest is the digest of a reply a record keeps. A saved
// state is a Base: EncodeBase frames it with the last record it holds and the
// idempotency keys it remembers, DecodeBase reads it. Revert (to a record) and Fork (a new entity from another's state at a
// record) travel in time on the journal, failing with ErrNotInHistory or
// ErrEntityExists; MessageKind's String names a record's kind. Idempotency keys
// (Message.IdempotencyKey, at most MaxIdempotencyKeyLen bytes, CheckIdempotencyKey,
// ErrInvalidIdempotencyKey) make a retry get the first reply, for a type's
// IdempotencyRetention (DefaultIdempotencyRetention). A message no one waits for that
// keeps failing pauses its entity after the type's MaxRetries (DefaultMaxRetries)
// attempts: asks to it fail with ErrEntityPaused (CodeEntityPaused) until Resume
// (ResumeDone, ResumeNotPaused) or Skip (SkipDone); an operator pauses one on no
// message with Pause (PauseDone, PauseAlready), ended the same way; a factory that rests failing
// entities is an EntityForgiver, told when one resumes.
// Sends between entities are effectively once under a type's Delivery
// (DeliveryEffectivelyOnce, the default, or DeliveryAtMostOnce; docs/delivery.md): an
// entity's numbered sends (Message.SenderSeq, JournalEntry.SendSeq) and its tells'
// outbox (Send values in JournalEntry.Sends, taken from an OutboxEntity) are journaled
// with its message, an ask made with WithSender's context takes the next number, and a
// receiver keeps its senders' marks (JournalEntry.SenderSeq, Base.Delivery), answering
// a repeat under its mark whose reply it no longer keeps with ErrRepeatForgotten; an
// outbox holds at most so many sends (ErrOutboxFull).
//
// ListEntities lists entities without activating any (a ListQuery, validated by
// Validate, failing with ErrInvalidListQuery; pages of at most MaxListLimit rows,
// DefaultListLimit by default, an EntityPage of EntityRow values whose Status is
// StatusActive, StatusPassivated or StatusPaused), from the members' live tables and a
// store that is a StateLister (a StateListing of StoredEntity values); DescribeEntity
// tells one (an EntityDescription). An entity that is an EntityInspector reports its
// EntityFacts (module version, memory, timers) to them. Counters gives each region's
// running TypeCounters (messages handled and failed, their latencies in LatencyBounds
// buckets, active entities and shards), which a caller samples to chart them.
//
// The errors of messages keep their meaning across members: ErrUnknownEntityType,
// ErrEmptyEntityID, ErrBufferFull, ErrMailboxFull, ErrShardUnavailable,
// ErrStateNotSaved, ErrStateNotLoaded, ErrRoutingLoop, ErrAskTimeout, ErrStopped and
// ErrNoMajority (ErrMalformedMessage marks a malformed message from a member, in
// package replstore's protocol too). A failed ask says whether its message may have
// been handled: ErrNotDelivered (it never reached its entity: sending it again is
// safe) or ErrOutcomeUnknown (it may have been handled: retry only with an idempotency
// key). ErrorCode gives an error's code (a CodedError has its own): CodeEntityError,
// CodeGuestTrap, CodeGuestDeadline, CodeReplyTooLarge, CodeUnknownType, CodeBadRequest,
// CodeOverloaded, CodeNotDelivered, CodeOutcomeUnknown, CodeUnavailable,
// CodeStateNotSaved, CodeStateNotLoaded, CodeActivationError, CodeBackoff or
// CodeInternal; a RemoteError carries it from another member, and errors.Is matches it
// to the sentinel of its code.
//
// Durable reminders (docs/sharding.md, "Reminders"): Sharding.SetReminder,
// CancelReminder and Reminders keep an entity's Reminder values (CheckReminder;
// MaxReminderName, MaxReminderPayload, MaxRemindersPerEntity, MinReminderInterval;
// ErrInvalidReminder, ErrTooManyReminders) in the state store with its shard: a
// ReminderStore keeps them itself (CheckReminderSet checks what it is given), and RemindersOf keeps them through any other store's
// records (ReminderIDPrefix, IsReminderID, under PlatformIDPrefix; RecordReminders, EncodeReminderRecord,
// DecodeReminderRecord and ReminderRecordDues for a store that indexes those records
// itself). A due reminder comes to its entity as a
// KindReminder message, EntityReminder lists a shard's due ones; a ReminderAdvancer
// moves fired ones on itself (NextDue: an interval's next due time).
//
// Scheduled messages (docs/sharding.md, "Scheduled messages"): Sharding.Schedule keeps
// a message from outside for a later time with the entity's reminders (under
// ScheduledNamePrefix; IsScheduledName), CancelScheduled deletes one by its ID
// (ScheduledID, ParseScheduledID), ScheduledOf and ScheduledOfType list ScheduledMessage
// values. Limits: MaxScheduledPayload, MaxScheduledPerEntity; a delivery later than
// LateScheduledAfter is logged. Errors: ErrInvalidScheduled, ErrTooManyScheduled, and
// ErrScheduledNotFound, whose code is CodeNotFound.
//
// Everything else is unexported: the coordinator, the regions' routing and buffers,
// the state store's instrumentation, the wire messages between members (the envelope
// of a message, its reply, the coordinator's and the handoff's messages). Only
// RegionState and ShardState, an answer to inspection, travel between members as well.
package sharding
