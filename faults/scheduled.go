package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardhost/shardhost/sharding"
)

// The scheduled-message workload: a scheduler schedules "deliver S<n>" for the inboxes,
// due up to scheduleAhead later, through random members, while the faults happen; at the
// end of the run, once every fault is healed, the check waits for the messages to come
// and fails a run in which a message the cluster acknowledged never came (lost), came
// twice to its inbox's durable state (doubled), or one it answered not-delivered came
// at all. Scheduled messages are kept and fired as durable reminders are, so this is the
// reminders' workload too.

// The inboxes the scheduler sends to.
var inboxIDs = []string{"i0", "i1", "i2"}

// scheduleAhead bounds how far ahead a message is due.
const scheduleAhead = 1500 * time.Millisecond

// scheduledWait bounds the final check's wait for the messages acknowledged.
const scheduledWait = 60 * time.Second

// scheduledOutcome is what the cluster answered to one Schedule.
type scheduledOutcome int

const (
	scheduledAcked     scheduledOutcome = iota // kept: must come once
	scheduledRefused                           // not delivered: must never come
	scheduledAmbiguous                         // may come, at most once
)

// scheduler schedules messages until ctx ends, and records what each got.
type scheduler struct {
	c *Cluster
	r *rand.Rand
	n int

	mu   sync.Mutex
	sent map[string]scheduledOutcome // "inbox/ID S<n>" → its outcome
	ids  map[string]string           // "inbox/ID S<n>" → its scheduled message ID, if acknowledged
}

func (s *scheduler) run(ctx context.Context) {
	for ctx.Err() == nil {
		s.step(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(20+s.r.IntN(40)) * time.Millisecond):
		}
	}
}

func (s *scheduler) step(ctx context.Context) {
	targets := s.c.targets()
	if len(targets) == 0 {
		return
	}
	m := targets[s.r.IntN(len(targets))]
	id := inboxIDs[s.r.IntN(len(inboxIDs))]
	s.n++
	x := "S" + strconv.Itoa(s.n)
	due := time.Now().Add(time.Duration(s.r.Int64N(int64(scheduleAhead)))).UnixMilli()
	s.c.mu.Lock()
	sh, running := m.sh, m.state == stateRunning
	s.c.mu.Unlock()
	if !running {
		return
	}
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	sm, _, err := sh.Schedule(octx, typeInbox, id, due, []byte("deliver "+x), "")
	cancel()
	// In the members' log (-members-log, -failure-logs): a lost message's ID leads to
	// its history there (sharding's debug lines name scheduled messages by ID).
	s.c.log.Info("faults: scheduled", "inbox", id, "x", x, "via", m.slot, "due", due, "scheduled", sm.ID, "err", err)
	out := scheduledAcked
	switch {
	case err != nil && errors.Is(err, sharding.ErrNotDelivered):
		out = scheduledRefused
	case err != nil:
		out = scheduledAmbiguous
	}
	s.mu.Lock()
	s.sent[id+" "+x] = out
	if out == scheduledAcked {
		if s.ids == nil {
			s.ids = map[string]string{}
		}
		s.ids[id+" "+x] = sm.ID
	}
	s.mu.Unlock()
}

// check waits until every acknowledged message came (at most scheduledWait), then
// returns the violations, and how many were scheduled and acknowledged. It reads the
// inboxes through the running members; if no read succeeded by then (no member runs,
// the cluster never came back), or the last read failed, it judges only what the last
// successful read shows (judgeScheduled).
func (s *scheduler) check(ctx context.Context) (failures []string, unknown string, scheduled, acked int) {
	s.mu.Lock()
	sent := make(map[string]scheduledOutcome, len(s.sent))
	for k, v := range s.sent {
		sent[k] = v
		if v == scheduledAcked {
			acked++
		}
	}
	s.mu.Unlock()
	var r inboxReads
	deadline := time.Now().Add(scheduledWait)
	for {
		got, err := s.readInboxes(ctx)
		r.note(got, err, time.Now())
		if err == nil && len(missingScheduled(sent, got)) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	failures, unknown = judgeScheduled(sent, r, func(k string) string { return s.whereIs(ctx, k) })
	return failures, unknown, len(sent), acked
}

// inboxReads is what the final check's reads of the inboxes gave: the deliveries the
// last successful one saw ("inbox S<n>" → count), when it was, and whether the last
// read of all succeeded (else its error).
type inboxReads struct {
	seen    map[string]int
	at      time.Time // of the last successful read; zero: none succeeded
	lastErr error     // of the last read (nil: it succeeded)
}

func (r *inboxReads) note(seen map[string]int, err error, now time.Time) {
	r.lastErr = err
	if err == nil {
		r.seen, r.at = seen, now
	}
}

// missingScheduled returns the acknowledged messages seen has not, sorted.
func missingScheduled(sent map[string]scheduledOutcome, seen map[string]int) []string {
	var out []string
	for k, v := range sent {
		if v == scheduledAcked && seen[k] == 0 {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// judgeScheduled returns the violations the reads show, and what they cannot tell
// (unknown). A message delivered twice, or delivered though answered not-delivered, or
// delivered though never scheduled, is a violation in any successful read: an inbox's
// durable counts only grow. An acknowledged message missing is lost only if the last
// read succeeded: a read that failed at the end (the cluster fell apart under load,
// every member downed, after the faults were healed) leaves the last successful read
// standing, which may be older than the message's delivery (faults seed 47 under a
// load average of 45: two messages delivered after the last read that succeeded,
// reported lost). where describes a lost message (whereIs).
func judgeScheduled(sent map[string]scheduledOutcome, r inboxReads, where func(string) string) (failures []string, unknown string) {
	if r.at.IsZero() {
		return nil, fmt.Sprintf("scheduled messages: the inboxes could not be read within %v: %v", scheduledWait, r.lastErr)
	}
	missing := missingScheduled(sent, r.seen)
	switch {
	case len(missing) > 0 && r.lastErr != nil:
		unknown = fmt.Sprintf("scheduled messages: %d acknowledged (%s) not in the last read of the inboxes that succeeded, at %s; they could not be read since: %v",
			len(missing), strings.Join(missing, ", "), r.at.UTC().Format("15:04:05.000"), r.lastErr)
	default:
		for _, k := range missing {
			failures = append(failures, fmt.Sprintf("scheduled message %s acknowledged, never delivered within %v (lost; %s)", k, scheduledWait, where(k)))
		}
	}
	for k, n := range r.seen {
		switch out, ok := sent[k]; {
		case n > 1:
			failures = append(failures, fmt.Sprintf("scheduled message %s delivered %d times (doubled)", k, n))
		case !ok:
			failures = append(failures, fmt.Sprintf("inbox delivery %s that no one scheduled", k))
		case out == scheduledRefused:
			failures = append(failures, fmt.Sprintf("scheduled message %s answered not-delivered, delivered all the same", k))
		}
	}
	slices.Sort(failures)
	return failures, unknown
}

// whereIs says whether the state store still holds the acknowledged scheduled message k
// ("inbox S<n>"), read through a running member: if it does, its shard's home never
// fired it (a scan or firing fault); if not, it was deleted or never kept (a store or
// read-modify-write fault).
func (s *scheduler) whereIs(ctx context.Context, k string) string {
	s.mu.Lock()
	sid := s.ids[k]
	s.mu.Unlock()
	inbox, _, _ := strings.Cut(k, " ")
	for _, m := range s.c.targets() {
		s.c.mu.Lock()
		sh, running := m.sh, m.state == stateRunning
		s.c.mu.Unlock()
		if !running {
			continue
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		waiting, err := sh.ScheduledOf(octx, typeInbox, inbox)
		cancel()
		if err != nil {
			continue
		}
		for _, sm := range waiting {
			if sm.ID == sid {
				return fmt.Sprintf("%s still in the state store, due %s: never fired", sid, time.UnixMilli(sm.Due).UTC().Format("15:04:05.000"))
			}
		}
		return fmt.Sprintf("%s no longer in the state store (%d others wait): deleted, or never kept", sid, len(waiting))
	}
	return sid + ": the state store could not be read"
}

// readInboxes asks every inbox for its deliveries ("inbox-ID X" → count).
func (s *scheduler) readInboxes(ctx context.Context) (map[string]int, error) {
	targets := s.c.targets()
	if len(targets) == 0 {
		return nil, errors.New("no member runs")
	}
	seen := map[string]int{}
	for i, id := range inboxIDs {
		m := targets[i%len(targets)]
		s.c.mu.Lock()
		sh, running := m.sh, m.state == stateRunning
		s.c.mu.Unlock()
		if !running {
			return nil, errors.New("member not running")
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		r, err := sh.Ask(octx, typeInbox, id, []byte("seen"))
		cancel()
		if err != nil {
			return nil, err
		}
		for _, kv := range strings.Fields(string(r.Payload)) {
			x, n, _ := strings.Cut(kv, "=")
			c, _ := strconv.Atoi(n)
			seen[id+" "+x] = c
		}
	}
	return seen, nil
}
