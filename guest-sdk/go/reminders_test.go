package shardhost

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestReminders(t *testing.T) {
	var fired []string
	p := &probe{receive: func(ctx *Context, msg []byte) ([]byte, error) {
		if ctx.Kind() == KindReminder {
			due, ok := ctx.ReminderDue()
			fired = append(fired, ctx.Sender()+":"+string(msg)+" late "+ctx.Now().Sub(due).String()+" "+strconv.FormatBool(ok))
			return nil, nil
		}
		if _, ok := ctx.ReminderDue(); ok {
			return nil, errors.New("a due time outside a reminder")
		}
		f := strings.Fields(string(msg))
		switch f[0] {
		case "once":
			return nil, ctx.SetReminder(f[1], ctx.Now().Add(time.Hour), 0, []byte("p-"+f[1]))
		case "every":
			return nil, ctx.SetReminder(f[1], ctx.Now().Add(time.Minute), time.Hour, nil)
		case "cancel":
			ok, err := ctx.CancelReminder(f[1])
			return []byte(strconv.FormatBool(ok)), err
		case "list":
			rs, err := ctx.Reminders()
			var out []string
			for _, r := range rs {
				out = append(out, r.Name+"@"+r.Due.Sub(HarnessEpoch).String()+"/"+r.Interval.String()+"/"+string(r.Payload))
			}
			return []byte(strings.Join(out, " ")), err
		case "short":
			return nil, ctx.SetReminder("s", ctx.Now(), 999*time.Millisecond, nil)
		case "long":
			return nil, ctx.SetReminder(strings.Repeat("n", MaxReminderName+1), ctx.Now(), 0, nil)
		case "big":
			return nil, ctx.SetReminder("b", ctx.Now(), 0, make([]byte, MaxReminderPayload+1))
		case "many":
			for i := 0; i < MaxReminders; i++ {
				if err := ctx.SetReminder("m"+strconv.Itoa(i), ctx.Now().Add(time.Hour), 0, nil); err != nil {
					return nil, err
				}
			}
			if err := ctx.SetReminder("m0", ctx.Now(), 0, nil); err != nil { // a replacement
				return nil, err
			}
			return nil, ctx.SetReminder("one too many", ctx.Now(), 0, nil)
		}
		return nil, nil
	}}
	h := newProbe(p)
	send(t, h, "once a", "")
	send(t, h, "every b", "")
	send(t, h, "list", "a@1h0m0s/0s/p-a b@1m0s/1h0m0s/")
	h.Advance(90 * time.Minute)
	if _, err := h.FireReminder("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.FireReminder("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.FireReminder("a"); !errors.Is(err, ErrNoReminder) {
		t.Fatalf("a one-shot fired again: %v", err)
	}
	want := []string{"a:p-a late 30m0s true", "b: late 1h29m0s true"}
	if strings.Join(fired, "|") != strings.Join(want, "|") {
		t.Fatalf("fired %q, want %q", fired, want)
	}
	// b moved on to its first due after the clock: 1m + 2h.
	send(t, h, "list", "b@2h1m0s/1h0m0s/")
	send(t, h, "cancel b", "true")
	send(t, h, "cancel b", "false")
	for _, bad := range []string{"short", "long", "big"} {
		_, err := h.Send([]byte(bad))
		var he *HostError
		if !errors.As(err, &he) || he.Code != CodeBadRequest {
			t.Fatalf("%s: %v, want CodeBadRequest", bad, err)
		}
	}
	_, err := h.Send([]byte("many"))
	var he *HostError
	if !errors.As(err, &he) || he.Code != CodeBadRequest || !strings.Contains(he.Text, "too many") {
		t.Fatalf("many: %v", err)
	}
	if n := len(h.Reminders()); n != MaxReminders {
		t.Fatalf("%d reminders, want %d", n, MaxReminders)
	}
}

func TestDecodeRemindersRefusesTruncatedLists(t *testing.T) {
	b := encodeReminders([]Reminder{{Name: "x", Due: time.UnixMilli(5), Payload: []byte("pay")}})
	if rs, err := decodeReminders(b); err != nil || len(rs) != 1 || rs[0].Name != "x" || string(rs[0].Payload) != "pay" || rs[0].Due.UnixMilli() != 5 {
		t.Fatalf("round trip: %+v %v", rs, err)
	}
	for n := 1; n < len(b); n++ {
		if _, err := decodeReminders(b[:n]); err == nil {
			t.Fatalf("%d of %d bytes decoded", n, len(b))
		}
	}
}

// A scheduled message reports its due time (ScheduledDue), so the entity learns how
// late it comes; ordinary messages, from outside or from an entity, and reminders have
// none.
func TestScheduledDue(t *testing.T) {
	var seen []string
	p := &probe{receive: func(ctx *Context, msg []byte) ([]byte, error) {
		due, ok := ctx.ScheduledDue()
		line := string(msg) + " " + strconv.FormatBool(ok)
		if ok {
			line += " late " + ctx.Now().Sub(due).String()
		}
		seen = append(seen, line)
		if string(msg) == "set" {
			return nil, ctx.SetReminder("r", ctx.Now(), 0, []byte("rem"))
		}
		return nil, nil
	}}
	h := newProbe(p)
	if _, err := h.SendScheduled([]byte("charge"), h.Now().Add(-90*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Send([]byte("plain")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.SendFrom("other/x", []byte("from")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Send([]byte("set")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.FireReminder("r"); err != nil {
		t.Fatal(err)
	}
	want := []string{"charge true late 1m30s", "plain false", "from false", "set false", "rem false"}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Fatalf("seen %q, want %q", seen, want)
	}
}
