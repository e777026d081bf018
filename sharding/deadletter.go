// Dead letters: messages dropped (a full buffer or mailbox) or tells that failed after
// they left their sender, counted by type and reason (shardhost.dead_letters) and
// logged at a limited rate.

package sharding

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// deadLetter counts d as a dead letter (countDeadLetter) and fails it with err.
func (s *Sharding) deadLetter(d delivery, err error) {
	s.countDeadLetter(d.ctx, d.env, err)
	d.fail(err)
}

// countDeadLetter counts a dropped message, by type and reason, and logs it at warn
// (rate limited: see deadLetterLog).
func (s *Sharding) countDeadLetter(ctx context.Context, env envelope, err error) {
	s.deadLetters.Add(1)
	reason := deadLetterReason(err)
	s.tel.deadLetters.Add(context.Background(), 1, s.tel.typeAttr(env.EntityType, attrDeadLetterReason, reason))
	if suppressed, ok := s.deadLetterLog.Allow(env.EntityType+"\x00"+reason, s.cfg.Now()); ok {
		s.log.WarnContext(ctx, "dead letter", "entity", env.EntityType+"/"+env.EntityID, "reason", reason,
			"err", err, "suppressed", suppressed)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("dead letter", trace.WithAttributes(attrDeadLetterReason.String(reason)))
	}
}

// tellRoutingError reports whether err is a tell's failure to be delivered from this
// member, which Tell returns: an unknown type, an empty ID, a full buffer or mailbox
// here, a stopped region.
func tellRoutingError(err error) bool {
	return errors.Is(err, ErrUnknownEntityType) || errors.Is(err, ErrEmptyEntityID) ||
		errors.Is(err, ErrBufferFull) || errors.Is(err, ErrMailboxFull) || errors.Is(err, ErrStopped)
}

// tellFailed makes a tell that failed after it left its sender (the entity refused it,
// trapped, could not be activated, its shard had no home...) a dead letter with the
// failure's code as its reason. A dropped one (buffer or mailbox full, or refused by a
// paused entity) is counted where it was dropped, as is an expired one
// (entity.dropExpired).
func (s *Sharding) tellFailed(ctx context.Context, env envelope, err error) {
	if errors.Is(err, ErrBufferFull) || errors.Is(err, ErrMailboxFull) || errors.Is(err, ErrEntityPaused) || errors.Is(err, errExpired) {
		return
	}
	s.countDeadLetter(ctx, env, err)
}

// deadLetterReason names why a message was dropped (shardhost.dead_letter.reason).
func deadLetterReason(err error) string {
	switch {
	case errors.Is(err, ErrBufferFull):
		return "buffer-full"
	case errors.Is(err, ErrMailboxFull):
		return "mailbox-full"
	case errors.Is(err, errExpired):
		return "expired"
	}
	return ErrorCode(err)
}

// dropExpired drops d, whose deadline passed at now before its entity took it: a dead
// letter with reason "expired", failed with errExpired (an asker gave up already).
func (s *Sharding) dropExpired(d delivery, now time.Time) {
	s.deadLetter(d, fmt.Errorf("%w: %s/%s, %v after it", errExpired, d.env.EntityType, d.env.EntityID,
		now.Sub(d.deadline).Round(time.Millisecond)))
}
