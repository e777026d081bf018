package sharding

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shardhost/shardhost/abi"
)

// Scheduled messages (docs/sharding.md, "Scheduled messages"): a message from outside
// the cluster's entities, to be delivered to its entity at a due time. It is kept as a
// reminder of the entity whose name begins with ScheduledNamePrefix, so it is stored,
// moved and fired as reminders are (durable in the state store with the entity's shard,
// one timer per shard on its home); at its due time it is delivered as a KindMessage
// message with no sender and, as Tag, its due time, at least once, with an idempotency
// key of its own (a journaled entity handles it once), and then deleted. Its ID
// (ScheduledID) names its entity, so that it can be cancelled from any member without
// an index. An entity's own reminders (reminder_list, Reminders) never include them,
// and the two are counted apart (MaxRemindersPerEntity, MaxScheduledPerEntity).

// Limits of scheduled messages.
const (
	// MaxScheduledPayload is the largest payload of a scheduled message, in bytes
	// (64 KiB, as a reminder's).
	MaxScheduledPayload = MaxReminderPayload
	// MaxScheduledPerEntity is the most scheduled messages one entity may have
	// waiting.
	MaxScheduledPerEntity = 100
	// LateScheduledAfter is how late a scheduled message may be delivered before its
	// delivery is logged as late (at warning level, with its lateness).
	LateScheduledAfter = 5 * time.Second
)

// ScheduledNamePrefix begins the reminder names under which scheduled messages are
// kept: U+FFFE, which CheckReminder refuses in an entity's own reminder names, then
// "scheduled:".
const ScheduledNamePrefix = "\ufffescheduled:"

var (
	// ErrInvalidScheduled: a scheduled message with a negative due time, a payload
	// over MaxScheduledPayload, or a malformed scheduled message ID. Its code is
	// CodeBadRequest.
	ErrInvalidScheduled = errors.New("sharding: invalid scheduled message")
	// ErrTooManyScheduled: scheduling the message would give its entity more than
	// MaxScheduledPerEntity waiting. Its code is CodeBadRequest.
	ErrTooManyScheduled = errors.New("sharding: too many scheduled messages")
	// ErrScheduledNotFound: no scheduled message has that ID (it was delivered,
	// cancelled, or never was). Its code is CodeNotFound.
	ErrScheduledNotFound = errors.New("sharding: no such scheduled message")
)

// CodeNotFound is the code of a failure that names something that does not exist
// (ErrScheduledNotFound).
const CodeNotFound = "not-found"

// Message kinds of scheduled messages: they go to the entity's region, in its mailbox
// order, and never reach the entity itself (as kindPassivate).
const (
	// kindSchedule keeps a scheduled message (its payload a scheduleRequest) with the
	// entity's reminders; answered with the reply scheduleReply.
	kindSchedule MessageKind = 16
	// kindUnschedule deletes one (its payload the reminder name); answered with
	// "cancelled", or ErrScheduledNotFound.
	kindUnschedule MessageKind = 17
)

// scheduleRequest is the payload of a kindSchedule message.
type scheduleRequest struct {
	Name    string `cbor:"1,keyasint"`
	Due     int64  `cbor:"2,keyasint"`
	Payload []byte `cbor:"3,keyasint,omitempty"`
}

// The replies of a kindSchedule ask.
const (
	scheduledNew      = "scheduled" // kept anew
	scheduledReplaced = "replaced"  // an idempotency key's scheduled message was there already: unchanged
)

// ScheduledMessage is a message waiting for its due time (Sharding.Schedule).
type ScheduledMessage struct {
	// ID names it (ScheduledID): "sm-" and URL-safe base64, with its entity in it.
	ID                   string
	EntityType, EntityID string
	// Due is when it is to be delivered, in Unix milliseconds.
	Due     int64
	Payload []byte
}

// IsScheduledName reports whether a reminder name is a scheduled message's
// (ScheduledNamePrefix).
func IsScheduledName(name string) bool { return strings.HasPrefix(name, ScheduledNamePrefix) }

// scheduledIDPrefix begins every scheduled message ID.
const scheduledIDPrefix = "sm-"

// scheduledNonceLen is the length of the nonce in a scheduled message's ID, in bytes.
const scheduledNonceLen = 8

// ScheduledID returns the ID of the scheduled message of the entity typ/id kept under
// the reminder name name: "sm-", then the URL-safe base64 (no padding) of the type's
// length (uvarint), the type, the entity ID's length (uvarint), the entity ID, and the
// name's nonce (8 bytes).
func ScheduledID(typ, id, name string) string {
	nonce, _ := hex.DecodeString(strings.TrimPrefix(name, ScheduledNamePrefix))
	b := binary.AppendUvarint(nil, uint64(len(typ)))
	b = append(b, typ...)
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	b = append(b, nonce...)
	return scheduledIDPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ParseScheduledID returns the entity and the reminder name of a scheduled message ID
// (ScheduledID). Errors: ErrInvalidScheduled, for an ID ScheduledID would not give.
func ParseScheduledID(sid string) (typ, id, name string, err error) {
	bad := func(why string) (string, string, string, error) {
		return "", "", "", fmt.Errorf("%w: the ID %.80q is malformed (%s)", ErrInvalidScheduled, sid, why)
	}
	rest, ok := strings.CutPrefix(sid, scheduledIDPrefix)
	if !ok {
		return bad("it does not begin with " + scheduledIDPrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return bad("not base64")
	}
	field := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n == 0 || n > uint64(len(b)-k) {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, utf8.ValidString(s)
	}
	if typ, ok = field(); !ok {
		return bad("no entity type")
	}
	if id, ok = field(); !ok {
		return bad("no entity ID")
	}
	if len(b) != scheduledNonceLen {
		return bad("no nonce")
	}
	return typ, id, ScheduledNamePrefix + hex.EncodeToString(b), nil
}

// scheduledName is the reminder name of a new scheduled message: from the hash of its
// idempotency key if it has one (scheduling it again with the key names the same
// message), else random.
func scheduledName(key string) string {
	nonce := make([]byte, scheduledNonceLen)
	if key != "" {
		h := sha256.Sum256([]byte("scheduled\x00" + key))
		copy(nonce, h[:])
	} else {
		rand.Read(nonce)
	}
	return ScheduledNamePrefix + hex.EncodeToString(nonce)
}

// scheduledIdempotencyKey is the idempotency key a scheduled message is delivered with:
// NUL, "scheduled:", its name's nonce. A delivery repeated after a crash (between the
// delivery and the deletion) is handled once by an entity whose type journals.
func scheduledIdempotencyKey(name string) string {
	return "\x00scheduled:" + strings.TrimPrefix(name, ScheduledNamePrefix)
}

// checkScheduled refuses what Schedule refuses before it sends anything.
func checkScheduled(due int64, payload []byte) error {
	switch {
	case due < 0:
		return fmt.Errorf("%w: negative due time %d", ErrInvalidScheduled, due)
	case len(payload) > MaxScheduledPayload:
		return fmt.Errorf("%w: a payload of %d bytes (at most %d)", ErrInvalidScheduled, len(payload), MaxScheduledPayload)
	}
	return nil
}

// Schedule keeps payload to be delivered to the entity typ/id at due (Unix ms; at or
// before now: at once), on whatever member hosts its shard then, and returns the
// scheduled message (its ID, to cancel it by). The message is sent to the shard's home,
// which keeps it in the state store with the entity's reminders (the entity is not
// activated); Schedule returns once the store holds it. With an idempotency key, the
// message's ID comes from the key: scheduling again with the same key, while it waits,
// changes nothing and returns the same ID (replaced true). Errors: ErrInvalidScheduled
// (a negative due, a payload over MaxScheduledPayload), ErrInvalidIdempotencyKey,
// ErrTooManyScheduled (over MaxScheduledPerEntity), ErrEmptyEntityID,
// ErrStoreUnavailable (no state store), and those of AskMessage (ErrUnknownEntityType,
// ErrNotDelivered, ErrOutcomeUnknown, ...); on an error other than ErrOutcomeUnknown
// nothing changed.
func (s *Sharding) Schedule(ctx context.Context, typ, id string, due int64, payload []byte, key string) (sm ScheduledMessage, replaced bool, err error) {
	if err := checkScheduled(due, payload); err != nil {
		return ScheduledMessage{}, false, err
	}
	if key != "" {
		if err := CheckIdempotencyKey(key); err != nil {
			return ScheduledMessage{}, false, err
		}
	}
	if s.reminders == nil {
		return ScheduledMessage{}, false, fmt.Errorf("%w: no state store keeps scheduled messages", ErrStoreUnavailable)
	}
	name := scheduledName(key)
	req := scheduleRequest{Name: name, Due: due, Payload: payload}
	r, err := s.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Kind: kindSchedule, Payload: encode(req)})
	if err != nil {
		return ScheduledMessage{}, false, err
	}
	sm = ScheduledMessage{ID: ScheduledID(typ, id, name), EntityType: typ, EntityID: id, Due: due, Payload: payload}
	return sm, string(r.Payload) == scheduledReplaced, nil
}

// CancelScheduled deletes the scheduled message of ID sid before it is delivered; a
// delivery under way may still arrive. Errors: ErrInvalidScheduled (a malformed ID),
// ErrScheduledNotFound (none waits with that ID), ErrStoreUnavailable, and those of
// AskMessage; on an error nothing changed.
func (s *Sharding) CancelScheduled(ctx context.Context, sid string) (ScheduledMessage, error) {
	typ, id, name, err := ParseScheduledID(sid)
	if err != nil {
		return ScheduledMessage{}, err
	}
	if s.reminders == nil {
		return ScheduledMessage{}, fmt.Errorf("%w: no state store keeps scheduled messages", ErrStoreUnavailable)
	}
	r, err := s.AskMessage(ctx, Message{EntityType: typ, EntityID: id, Kind: kindUnschedule, Payload: []byte(name)})
	if err != nil {
		return ScheduledMessage{}, err
	}
	var req scheduleRequest
	if err := decode(r.Payload, &req); err != nil {
		return ScheduledMessage{}, err
	}
	return ScheduledMessage{ID: sid, EntityType: typ, EntityID: id, Due: req.Due, Payload: req.Payload}, nil
}

// ScheduledOf returns the scheduled messages waiting for the entity typ/id, earliest
// first, read from the state store on any member (the entity is not activated).
// Errors: those of Reminders.
func (s *Sharding) ScheduledOf(ctx context.Context, typ, id string) ([]ScheduledMessage, error) {
	rs, err := s.allReminders(ctx, typ, id)
	if err != nil {
		return nil, err
	}
	var out []ScheduledMessage
	for _, r := range rs {
		if IsScheduledName(r.Name) {
			out = append(out, ScheduledMessage{ID: ScheduledID(typ, id, r.Name), EntityType: typ, EntityID: id, Due: r.Due, Payload: r.Payload})
		}
	}
	sortScheduled(out)
	return out, nil
}

// ScheduledOfType returns the scheduled messages waiting for the entities of typ,
// earliest first, at most limit (> 0) of them, and whether there were more; it reads
// every shard of the type from the state store, on any member: a cost that grows with
// the type's reminders. Errors: ErrUnknownEntityType, ErrStoreUnavailable, the store's.
func (s *Sharding) ScheduledOfType(ctx context.Context, typ string, limit int) (out []ScheduledMessage, more bool, err error) {
	if s.reminders == nil {
		return nil, false, fmt.Errorf("%w: no state store keeps scheduled messages", ErrStoreUnavailable)
	}
	r, err := s.ensureRegion(ctx, typ)
	if err != nil {
		return nil, false, err
	}
	for shard := 0; shard < r.settings.NumberOfShards; shard++ {
		due, _, err := s.reminders.DueReminders(ctx, typ, shard, math.MaxInt64, math.MaxInt32)
		if err != nil {
			return nil, false, err
		}
		for _, er := range due {
			if IsScheduledName(er.Name) {
				out = append(out, ScheduledMessage{ID: ScheduledID(typ, er.ID, er.Name), EntityType: typ, EntityID: er.ID, Due: er.Due, Payload: er.Payload})
			}
		}
	}
	sortScheduled(out)
	if limit > 0 && len(out) > limit {
		return out[:limit:limit], true, nil
	}
	return out, false, nil
}

func sortScheduled(ms []ScheduledMessage) {
	slices.SortFunc(ms, func(a, b ScheduledMessage) int {
		switch {
		case a.Due != b.Due:
			return int(min(max(a.Due-b.Due, -1), 1))
		case a.EntityID != b.EntityID:
			return strings.Compare(a.EntityID, b.EntityID)
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// allReminders is the entity's reminder record as the store has it: its own reminders
// and its scheduled messages.
func (s *Sharding) allReminders(ctx context.Context, typ, id string) ([]Reminder, error) {
	if s.reminders == nil {
		return nil, fmt.Errorf("%w: no state store keeps reminders", ErrStoreUnavailable)
	}
	if id == "" {
		return nil, ErrEmptyEntityID
	}
	r, err := s.ensureRegion(ctx, typ)
	if err != nil {
		return nil, err
	}
	shardID := abi.ShardID(id, r.settings.NumberOfShards)
	return s.reminders.LoadReminders(ctx, EntityKey{Type: typ, Shard: shardID, ID: id})
}

// scheduleControl handles a kindSchedule or kindUnschedule message on the entity's
// home, in its mailbox's order, without activating it: it changes the entity's
// reminder record in the store and answers.
func (e *entity) scheduleControl(ctx context.Context, d delivery) (Reply, error) {
	r := e.r
	if r.s.reminders == nil {
		return Reply{}, fmt.Errorf("%w: no state store keeps scheduled messages", ErrStoreUnavailable)
	}
	r.mu.Lock()
	sh := r.hostedLocked(e.shard)
	r.mu.Unlock()
	if sh == nil {
		return Reply{}, fmt.Errorf("%w: %s left this member", ErrShardUnavailable, e.name())
	}
	ctx = context.WithoutCancel(ctx)
	if d.env.Kind == kindUnschedule {
		name := string(d.env.Payload)
		var gone Reminder
		err := r.updateReminders(ctx, sh, e.id, func(rs []Reminder) ([]Reminder, error) {
			i := slices.IndexFunc(rs, func(x Reminder) bool { return x.Name == name })
			if !IsScheduledName(name) || i < 0 {
				return nil, fmt.Errorf("%w: %s (%s has none of that ID: delivered, cancelled, or never scheduled)",
					ErrScheduledNotFound, ScheduledID(r.settings.Name, e.id, name), e.name())
			}
			gone = rs[i]
			return slices.Delete(rs, i, i+1), nil
		})
		if err != nil {
			return Reply{}, err
		}
		return Reply{Payload: encode(scheduleRequest{Name: gone.Name, Due: gone.Due, Payload: gone.Payload}), Node: r.s.self}, nil
	}
	var req scheduleRequest
	if err := decode(d.env.Payload, &req); err != nil {
		return Reply{}, err
	}
	if !IsScheduledName(req.Name) {
		return Reply{}, fmt.Errorf("%w: the name %.40q", ErrInvalidScheduled, req.Name)
	}
	if err := checkScheduled(req.Due, req.Payload); err != nil {
		return Reply{}, err
	}
	out := scheduledNew
	err := r.updateReminders(ctx, sh, e.id, func(rs []Reminder) ([]Reminder, error) {
		if slices.ContainsFunc(rs, func(x Reminder) bool { return x.Name == req.Name }) {
			out = scheduledReplaced // the same idempotency key: kept as it was
			return nil, errUnchanged
		}
		n := 0
		for _, x := range rs {
			if IsScheduledName(x.Name) {
				n++
			}
		}
		if n >= MaxScheduledPerEntity {
			return nil, fmt.Errorf("%w: %s has %d waiting (at most %d per entity)", ErrTooManyScheduled, e.name(), n, MaxScheduledPerEntity)
		}
		return append(rs, Reminder{Name: req.Name, Due: req.Due, Payload: req.Payload}), nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		return Reply{}, err
	}
	if r.s.log.Enabled(ctx, slog.LevelDebug) {
		r.s.log.Debug("scheduled message kept", "type", r.settings.Name, "id", e.id, "shard", sh.id,
			"scheduled", ScheduledID(r.settings.Name, e.id, req.Name), "due", req.Due, "outcome", out)
	}
	if out == scheduledNew {
		r.scheduleReminders(sh, req.Due)
	}
	return Reply{Payload: []byte(out), Node: r.s.self}, nil
}

// isScheduleControl reports whether k is a scheduled message's control kind, which
// never reaches the entity.
func isScheduleControl(k MessageKind) bool { return k == kindSchedule || k == kindUnschedule }
