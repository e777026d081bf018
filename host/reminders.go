package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/tetratelabs/wazero/api"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/sharding"
)

// Durable reminders (abi/SPEC.md, "v1: reminders"): the host functions, and the
// wasmEntity's side of them. A reminder lives in the state store with the entity's
// shard (sharding.Sharding.SetReminder); under the journal, a message's sets and
// cancels are held, as its tells are, and reach the store once its record is durable.

// errNoReminder: reminder_cancel of a name the entity has no reminder of.
var errNoReminder = errors.New("host: no reminder of that name")

// heldReminder is a reminder set (r) or cancel (cancel: r.Name) a gated message made,
// held until ReleaseEffects.
type heldReminder struct {
	r      sharding.Reminder
	cancel bool
}

// hostReminderSet is reminder_set(name, due_unix_ms, interval_ms, payload) -> code.
func hostReminderSet(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	name, ok := inst.text(mod, stack, uint32(stack[0]), uint32(stack[1]), "reminder name")
	if !ok {
		return
	}
	r := sharding.Reminder{Name: name, Due: int64(stack[2]), Interval: int64(stack[3])}
	switch n := uint32(stack[5]); {
	case !inst.messaging():
		inst.finish(stack, nil, fmt.Errorf("%w: reminder_set outside a message or on_activate", errNotAllowed))
		return
	case inst.svc == nil:
		inst.finish(stack, nil, errNoServices)
		return
	case n > abi.MaxReminderPayload:
		inst.finish(stack, nil, fmt.Errorf("%w: %w: a payload of %d bytes (at most %d)", ErrBadRequest, sharding.ErrInvalidReminder, n, abi.MaxReminderPayload))
		return
	default:
		r.Payload = append([]byte(nil), read(mod, uint32(stack[4]), n)...)
	}
	if err := sharding.CheckReminder(r); err != nil {
		inst.finish(stack, nil, err)
		return
	}
	cctx, cancel := inst.callCtx(0)
	defer cancel()
	inst.finish(stack, nil, inst.svc.setReminder(cctx, r))
}

// hostReminderCancel is reminder_cancel(name) -> code: 0, or CodeNotFound.
func hostReminderCancel(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	name, ok := inst.text(mod, stack, uint32(stack[0]), uint32(stack[1]), "reminder name")
	switch {
	case !ok:
		return
	case !inst.messaging():
		inst.finish(stack, nil, fmt.Errorf("%w: reminder_cancel outside a message or on_activate", errNotAllowed))
	case inst.svc == nil:
		inst.finish(stack, nil, errNoServices)
	default:
		cctx, cancel := inst.callCtx(0)
		defer cancel()
		found, err := inst.svc.cancelReminder(cctx, name)
		if err == nil && !found {
			err = fmt.Errorf("%w: %q", errNoReminder, name)
		}
		inst.finish(stack, nil, err)
	}
}

// hostReminderList is reminder_list() -> code; the result lists the reminders
// (encodeReminders).
func hostReminderList(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	switch {
	case !inst.messaging():
		inst.finish(stack, nil, fmt.Errorf("%w: reminder_list outside a message or on_activate", errNotAllowed))
	case inst.svc == nil:
		inst.finish(stack, nil, errNoServices)
	default:
		cctx, cancel := inst.callCtx(0)
		defer cancel()
		rs, err := inst.svc.listReminders(cctx)
		if err != nil {
			inst.finish(stack, nil, err)
			return
		}
		inst.finish(stack, encodeReminders(rs), nil)
	}
}

// hostReminderDue is reminder_due() -> i64: the due time of the current message if it
// is a reminder's (its Tag) or a scheduled message's (a KindMessage from outside, whose
// Tag only a scheduled delivery sets: sharding.Schedule), else 0.
func hostReminderDue(ctx context.Context, mod api.Module, stack []uint64) {
	inst := mustInstance(ctx)
	inst.charge()
	stack[0] = 0
	if inst.phase != phaseReceive {
		return
	}
	switch m := inst.msg; {
	case m.Kind == sharding.KindReminder, m.Kind == sharding.KindMessage && m.Sender == "":
		stack[0] = m.Tag
	}
}

// encodeReminders is the reminder list encoding of reminder_list (abi/SPEC.md): for each
// reminder, by name, little-endian: u32 name length, the name, i64 due (Unix ms), i64
// interval (ms), u32 payload length, the payload.
func encodeReminders(rs []sharding.Reminder) []byte {
	var b []byte
	for _, r := range rs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Name)))
		b = append(b, r.Name...)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Due))
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Interval))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Payload)))
		b = append(b, r.Payload...)
	}
	return b
}

// setReminder sets a reminder of the entity: at once, or, under the journal, once the
// message's record is durable (ReleaseEffects). A held set is checked against the
// entity's count now (ErrTooManyReminders).
func (e *wasmEntity) setReminder(ctx context.Context, r sharding.Reminder) error {
	if !e.gated {
		return e.n.sharding.SetReminder(ctx, e.typ, e.id, r)
	}
	rs, err := e.listReminders(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(rs, func(x sharding.Reminder) bool { return x.Name == r.Name }) && len(rs) >= sharding.MaxRemindersPerEntity {
		return fmt.Errorf("%w: %s has %d (at most %d per entity)", sharding.ErrTooManyReminders, e.name(), len(rs), sharding.MaxRemindersPerEntity)
	}
	e.heldReminders = append(e.heldReminders, heldReminder{r: r})
	return nil
}

// cancelReminder cancels a reminder of the entity, at once or, under the journal, once
// the message's record is durable; it reports whether the entity had it (counting the
// message's held changes).
func (e *wasmEntity) cancelReminder(ctx context.Context, name string) (bool, error) {
	if !e.gated {
		return e.n.sharding.CancelReminder(ctx, e.typ, e.id, name)
	}
	rs, err := e.listReminders(ctx)
	if err != nil {
		return false, err
	}
	if !slices.ContainsFunc(rs, func(x sharding.Reminder) bool { return x.Name == name }) {
		return false, nil
	}
	e.heldReminders = append(e.heldReminders, heldReminder{r: sharding.Reminder{Name: name}, cancel: true})
	return true, nil
}

// listReminders returns the entity's reminders, by name, with the message's held
// changes applied.
func (e *wasmEntity) listReminders(ctx context.Context) ([]sharding.Reminder, error) {
	rs, err := e.n.sharding.Reminders(ctx, e.typ, e.id)
	if err != nil {
		return nil, err
	}
	for _, h := range e.heldReminders {
		i := slices.IndexFunc(rs, func(x sharding.Reminder) bool { return x.Name == h.r.Name })
		switch {
		case h.cancel && i >= 0:
			rs = slices.Delete(rs, i, i+1)
		case !h.cancel && i >= 0:
			rs[i] = h.r
		case !h.cancel:
			rs = append(rs, h.r)
		}
	}
	slices.SortFunc(rs, func(a, b sharding.Reminder) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return rs, nil
}

// releaseReminders applies the reminder changes a durable message held, in order. A
// change that fails now is logged: the message counted, and its change is lost (as a
// held tell that cannot be routed becomes a dead letter).
func (e *wasmEntity) releaseReminders(ctx context.Context) {
	for k, h := range e.heldReminders {
		var err error
		if h.cancel {
			_, err = e.n.sharding.CancelReminder(ctx, e.typ, e.id, h.r.Name)
		} else {
			err = e.n.sharding.SetReminder(ctx, e.typ, e.id, h.r)
		}
		if err != nil {
			e.n.log.Warn("a durable message's reminder change failed", "entity", e.name(), "reminder", h.r.Name, "cancel", h.cancel, "err", err)
		}
		e.heldReminders[k] = heldReminder{}
	}
	e.heldReminders = e.heldReminders[:0]
}

// EntityReminders is the reply of GET /v1/entities/{type}/{id}/reminders: the entity
// ("TYPE/ID") and its durable reminders, by name (payloads in base64).
type EntityReminders struct {
	Entity    string              `json:"entity"`
	Reminders []sharding.Reminder `json:"reminders"`
}

// apiReminders is GET /v1/entities/{type}/{id}/reminders, read from the state store on
// any member (the entity is not activated).
func (n *Node) apiReminders(w http.ResponseWriter, r *http.Request) {
	typ, id, ok := n.entityPath(w, r)
	if !ok {
		return
	}
	rs, err := n.sharding.Reminders(r.Context(), typ, id)
	if err != nil {
		writeError(w, r, err, 0)
		return
	}
	if rs == nil {
		rs = []sharding.Reminder{}
	}
	writeJSON(w, http.StatusOK, EntityReminders{Entity: typ + "/" + id, Reminders: rs})
}
