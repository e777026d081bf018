package sharding

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// Under the journal, the messages that wait in an entity's mailbox are handled back to
// back and their records appended together: a stream of messages costs one append
// (one round of the state store's replication and one disk write) per batch rather than
// one per message. The journal's output gate holds for the batch as it does for one
// message: the replies, the tells and the timers of its messages leave only once every
// record of the batch is durable, in the order the messages were handled.
//
// A message (a tell or an ask) joins the batch only when nothing about it needs its
// record before the next message is handled: a KindMessage without idempotency key or
// sender sequence (whose marks a later message of the batch would read), handled
// without error, forward, termination or a passivation request. An ask's reply waits
// for the batch's append. Anything else first appends the batch, then
// goes its usual way, so records keep the order of the messages.

// maxBatch is the most messages whose records one append takes.
const maxBatch = 64

// batched is a message handled under the journal whose record waits for its batch's
// append.
type batched struct {
	ctx   context.Context
	d     delivery
	out   []byte
	entry JournalEntry
	sends []Send
	done  msgDone
	span  trace.Span
}

// batchable reports whether d may join the entity's batch (or be handled while one
// waits) as far as can be told before it runs. Owned by the drain goroutine.
func (e *entity) batchable(d *delivery) bool {
	return e.inst != nil && e.journaled && e.poison == nil && !d.start && d.env.Kind == KindMessage &&
		d.env.IdempotencyKey == "" && d.env.SenderSeq == 0 && !e.fenced.Load()
}

// nextSeq is the sequence number of the next journal record: after the durable ones
// and those waiting in the batch.
func (e *entity) nextSeq() uint64 { return e.seq + uint64(len(e.batch)) + 1 }

// joinBatch takes a message just handled without error into the batch, or appends the
// batch with it when no other message waits or the batch is full. It reports false,
// having changed nothing, when the message is alone (no batch, nothing behind it) or
// its record is not to be journaled (the entity says it left its state as it was); the
// caller then handles it as a single message.
func (e *entity) joinBatch(ctx context.Context, d delivery, out []byte, done msgDone, span trace.Span) bool {
	if len(e.batch) == 0 && !e.more {
		return false // alone: a single message's append, as before
	}
	var effects []byte
	je, _ := e.inst.(JournaledEntity)
	if je != nil {
		var journal bool
		if effects, journal = je.JournalEffects(); !journal {
			return false
		}
	}
	sends, err := e.takeSends()
	if err != nil {
		// The tells it held are taken: it fails as a single message whose append
		// failed would, after the batch before it.
		e.flushBatch(ctx)
		e.stop(ctx, false)
		err = wrapCause(ErrStateNotSaved, "", err)
		done.finish(err)
		d.fail(err)
		return true
	}
	if len(sends) > 0 {
		e.markOutbox(ctx) // before the record: a shard's next home finds the outbox
	}
	entry := JournalEntry{Seq: e.nextSeq(), Time: e.r.s.cfg.Now(), Kind: d.env.Kind, Sender: d.env.Sender, Tag: d.env.Tag,
		Ask: d.ask && d.env.Acked == 0, Payload: d.env.Payload, Effects: effects, ReplyDigest: ReplyDigest(out), Sends: sends}
	if e.sendSeqMoved {
		entry.SendSeq = e.sendSeq
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		entry.TraceID = sc.TraceID()
	}
	e.failures = 0
	if e.batch == nil {
		e.batch = make([]batched, 0, 8)
	}
	e.batch = append(e.batch, batched{ctx: ctx, d: d, out: out, entry: entry, sends: sends, done: done, span: span})
	if e.more && len(e.batch) < maxBatch {
		return true // the drain loop takes the next message
	}
	e.flushBatch(ctx)
	return true
}

// flushBatch appends the records of the batch in one append, then releases what its
// messages held back and answers them, in order. When the append fails, no message of
// the batch counts: the instance, which holds their changes, stops unsaved, and each
// fails with ErrStateNotSaved (a tell's dead letter), as a single message would. It
// returns the append's error.
func (e *entity) flushBatch(ctx context.Context) error {
	b := e.batch
	if len(b) == 0 {
		return nil
	}
	e.batch = b[:0]
	defer clear(b)
	entries := make([]JournalEntry, len(b))
	for k := range b {
		entries[k] = b[k].entry
	}
	if err := e.appendRecords(ctx, entries...); err != nil {
		e.stop(ctx, false)
		err = wrapCause(ErrStateNotSaved, "", err)
		for k := range b {
			b[k].done.finish(err)
			b[k].d.fail(err)
		}
		return err
	}
	for k := range b {
		e.addSends(b[k].sends)
	}
	if je, ok := e.inst.(JournaledEntity); ok {
		je.ReleaseEffects(ctx)
	}
	for k := range b {
		// It asked for no passivation (such a message stays out of a batch).
		e.finishJournaled(b[k].ctx, b[k].d, b[k].out, b[k].done, nil, b[k].span, false)
	}
	return nil
}
