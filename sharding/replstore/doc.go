// Package replstore is the built-in entity state store of docs/design.md, a
// sharding.StateStore and sharding.JournalStore: each shard's snapshots, remembered
// entity IDs and entity journals on the first K members of the shard's priority order,
// on disk (bbolt, fsynced before a replica acknowledges), a majority of K acknowledging
// a write and answering a read. Writes are fenced by the shard's allocation epoch; a
// ring of members keeps every acknowledged write readable while the members change;
// read repair and anti-entropy bring replicas up to date. Store says how.
//
// The files: store.go (the store: Save, Load, Remember, Remembered, FenceShard,
// DeleteType, DeleteEntity), journal.go (its journals: AppendJournal, ReadJournal, TruncateJournal),
// due.go (its reminders, a sharding.ReminderStore: SaveReminders, LoadReminders, and
// DueReminders from each replica's index of due times), advance.go (the write back of
// fired reminders, a sharding.ReminderAdvancer: AdvanceReminders, from the records the
// due reads kept), replicas.go (its requests to replicas and their majorities),
// coalesce.go (the journal and reminder writes to one replica sent together), serve.go
// (a replica's side of the protocol), wire.go (the protocol's messages and the records
// on disk), statecodec.go (the hand-written encoding of the messages of every journal
// append, the bytes CBOR gives them), disk.go (the bbolt file
// and its group commit; disk_read.go its reads, disk_write.go what a write changes),
// wal.go (the write-ahead log in front of it), repair.go (read repair and
// anti-entropy), ring.go (the ring a shard's replicas are ranked over, and its views), handover.go (the rounds that end a
// change of the ring), forget.go (an operator's ForgetMember), offline.go (the files of
// a stopped cluster).
//
// Host chooses the store, this one or package pgstore, and gives it to sharding as
// sharding.Config.States; package sharding never imports this one.
//
// # What an embedder uses
//
// Store, opened by New with a Config (DefaultConfig, or DefaultLocalConfig, a fast
// profile for one machine and tests), is the store; Store.Ring returns a Ring, a look
// at its ring of members (named by cluster.Member.Name where members have one, else by
// address), Store.AwaitHandover is the leave hook that holds a leaving member until
// the ring has let go of it, and Store.ForgetMember fails with ErrMemberNotGone for a
// member that is not gone. The offline files of a stopped cluster (FileName in each
// member's state directory) serve the shardhost command's state export and import:
// ExportDirs reads them, and DirImporter (NewDirImporter, with a MemberDir per member)
// writes them.
package replstore
