package sharding

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardhost/shardhost/abi"
)

// reminderRetry is how long a shard's home waits before it reads its due reminders
// again after a read, a delivery or a write failed.
const reminderRetry = time.Second

// reminderBatch bounds the firings under way per shard: a scan reads at most that many
// due reminders beyond those under way, and with more than reminderLowWater under way
// the shard is not read again until the firings under way are down to it (the firings
// under way are the earliest due, which each read would return again).
const (
	reminderBatch    = 1000
	reminderLowWater = reminderBatch / 4
)

// reminderScanGap is the least time between the starts of two scans of a shard: what
// falls due meanwhile waits for the next scan and fires with the others, so that a
// shard whose reminders fall due one by one is read at most about 100 times a second.
const reminderScanGap = 10 * time.Millisecond

// reminderStall is how long a shard whose firings are under way is not read again
// for what fell due meanwhile (they would be read again with it), unless they finish
// sooner: how late a slow entity's firing may make the shard's others.
const reminderStall = time.Second

// shardReminders is what a shard's home keeps of the shard's reminders: the next due
// time, one timer, and the firings under way. Nothing per reminder beyond the firings.
type shardReminders struct {
	// mu serialises the read-modify-writes of an entity's reminders from here (a set,
	// a cancel, a firing's advance): the store's records of an entity are rewritten
	// whole. One lock of reminderLocks per entity (lock), so that the write backs of
	// a shard's entities do not wait for one another's round trips to the store.
	mu [reminderLocks]sync.Mutex

	tmu      sync.Mutex // guards what follows
	timer    *time.Timer
	next     int64  // Unix ms the timer is set for (0: none)
	gen      uint64 // of the timer: an older timer's firing leaves next alone
	stopped  bool   // the shard left, or Sharding stops: no new timer
	inflight map[reminderFiring]bool
	// scanning: a scan of the shard runs; rescan: another was asked for meanwhile,
	// which the running one does when it is done (one scan at a time per shard).
	scanning, rescan bool
	// more: due reminders were left unread (reminderBatch); the firings under way
	// start the next scan when they are down to reminderLowWater, a refill, which reads
	// with firings under way.
	more, refill bool
	// waiting: a scan was deferred because firings were under way; the last of them
	// to finish starts it.
	waiting bool
	// lastScan is when the last scan started (Unix ms).
	lastScan int64
}

// reminderLocks is how many locks serialise the read-modify-writes of a shard's
// reminders (shardReminders.mu): entities share one by a hash of their ID.
const reminderLocks = 32

// lock returns the lock of the entity id's read-modify-writes.
func (rem *shardReminders) lock(id string) *sync.Mutex {
	return &rem.mu[maphash.String(reminderSeed, id)%reminderLocks]
}

// reminderSeed seeds the hash of lock.
var reminderSeed = maphash.MakeSeed()

// reminderFiring names one firing: deduplicated by the entity, the reminder's name and
// its due time.
type reminderFiring struct {
	id, name string
	due      int64
}

// reminderKeyPrefix begins a reminder firing's idempotency key: NUL cannot begin a
// caller's key (CheckIdempotencyKey).
const reminderKeyPrefix = "\x00reminder:"

// reminderIdempotencyKey is the idempotency key of a firing, so that an entity whose
// type journals handles a firing delivered twice (after a crash between the delivery
// and the store's advance) once: NUL, "reminder:", the due time, ":", the name.
func reminderIdempotencyKey(name string, due int64) string {
	var num [20]byte
	d := strconv.AppendInt(num[:0], due, 10)
	var b strings.Builder // one allocation
	b.Grow(len(reminderKeyPrefix) + len(d) + 1 + len(name))
	b.WriteString(reminderKeyPrefix)
	b.Write(d)
	b.WriteByte(':')
	b.WriteString(name)
	return b.String()
}

// parseReminderIdempotencyKey returns the name and due time of a reminder's firing from
// its idempotency key (reminderIdempotencyKey), or false for another key.
func parseReminderIdempotencyKey(key string) (name string, due int64, ok bool) {
	rest, ok := strings.CutPrefix(key, reminderKeyPrefix)
	if !ok {
		return "", 0, false
	}
	d, name, ok := strings.Cut(rest, ":")
	if !ok {
		return "", 0, false
	}
	due, err := strconv.ParseInt(d, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return name, due, true
}

func nowMillis() int64 { return time.Now().UnixMilli() }

// scheduleReminders sets the shard's timer to fire at at (Unix ms) unless it fires
// sooner already. at in the past fires at once.
func (r *shardRegion) scheduleReminders(sh *shard, at int64) {
	rem := sh.rem
	rem.tmu.Lock()
	defer rem.tmu.Unlock()
	if rem.stopped || (rem.next != 0 && rem.next <= at) {
		return
	}
	if rem.timer != nil {
		rem.timer.Stop()
	}
	rem.gen++
	rem.next = at
	gen := rem.gen
	wait := max(at, rem.lastScan+reminderScanGap.Milliseconds()) - nowMillis()
	rem.timer = time.AfterFunc(time.Duration(wait)*time.Millisecond, func() {
		rem.tmu.Lock()
		if rem.gen == gen {
			rem.next = 0
		}
		rem.tmu.Unlock()
		r.s.owner.Go(func() { r.scanReminders(sh) })
	})
}

// stopReminders stops the shard's timer for good (the shard left, or Sharding stops).
func (sh *shard) stopReminders() {
	if sh.rem == nil {
		return
	}
	sh.rem.tmu.Lock()
	defer sh.rem.tmu.Unlock()
	sh.rem.stopped = true
	if sh.rem.timer != nil {
		sh.rem.timer.Stop()
	}
}

// hostedEpoch returns the shard's epoch if it is still hosted here as sh.
func (r *shardRegion) hostedEpoch(sh *shard) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hostedLocked(sh.id) != sh {
		return 0, false
	}
	return sh.epoch, true
}

// scanReminders reads the shard's due reminders, fires each that is not firing yet, and
// sets the timer for the next. Run when the shard comes here, and by its timer.
func (r *shardRegion) scanReminders(sh *shard) {
	rem := sh.rem
	rem.tmu.Lock()
	if rem.scanning {
		rem.rescan = true
		rem.tmu.Unlock()
		return
	}
	rem.scanning = true
	rem.tmu.Unlock()
	for {
		r.scanRemindersOnce(sh)
		rem.tmu.Lock()
		if !rem.rescan {
			rem.scanning = false
			rem.tmu.Unlock()
			return
		}
		rem.rescan = false
		rem.tmu.Unlock()
	}
}

// scanRemindersOnce is one scan of scanReminders.
func (r *shardRegion) scanRemindersOnce(sh *shard) {
	epoch, ok := r.hostedEpoch(sh)
	if !ok {
		sh.stopReminders()
		return
	}
	rem := sh.rem
	rem.tmu.Lock()
	inflight := len(rem.inflight)
	var stall int64 // when to read all the same, firings under way or not
	deferred := true
	switch {
	case inflight > reminderLowWater:
		rem.more = true // read again once they are down to it
	case inflight > 0 && !rem.refill && nowMillis()-rem.lastScan < reminderStall.Milliseconds():
		// What the firings under way were read with would be read again: the shard is
		// read once they are done (or after reminderStall).
		rem.waiting = true
		stall = rem.lastScan + reminderStall.Milliseconds()
	default:
		deferred = false
		rem.lastScan = nowMillis()
	}
	rem.refill = false
	rem.tmu.Unlock()
	if deferred {
		if stall > 0 {
			r.scheduleReminders(sh, stall)
		}
		return
	}
	ctx, cancel := context.WithTimeout(r.s.owner.Context(), r.s.cfg.RequestTimeout)
	defer cancel()
	err := r.fenceShard(ctx, sh.id, epoch)
	var due []EntityReminder
	var next int64
	now := nowMillis()
	if err == nil {
		due, next, err = r.s.reminders.DueReminders(WithReadEpoch(ctx, epoch), r.settings.Name, sh.id, now, inflight+reminderBatch)
	}
	if errors.Is(err, ErrStaleEpoch) {
		r.s.log.Warn("the state store has a newer allocation of a shard hosted here", "type", r.settings.Name, "shard", sh.id, "err", err)
		r.dropStale(sh.id, epoch+1)
		if cur, ok := r.hostedEpoch(sh); ok && cur > epoch {
			// Not dropped: the coordinator hosted the shard here again at a newer
			// epoch while this scan read at the old one (the store's newer epoch may be
			// that one). Read again at it now: the timer that started this scan has
			// fired, and nothing else would read what fell due.
			rem.tmu.Lock()
			rem.rescan = true
			rem.tmu.Unlock()
		}
		return
	}
	if err != nil {
		if r.s.owner.Closed() {
			return
		}
		r.s.log.Warn("cannot read the due reminders of a shard", "type", r.settings.Name, "shard", sh.id, "err", err)
		r.scheduleReminders(sh, now+reminderRetry.Milliseconds())
		return
	}
	if next != 0 && next <= now {
		// More are due than were read: the firings under way read them as they finish.
		rem.tmu.Lock()
		rem.more = true
		rem.tmu.Unlock()
	}
	// One batch per entity (its due reminders in due order), of those not firing yet.
	var batches []firingBatch
	at := make(map[string]int, len(due))
	rem.tmu.Lock()
	for k, er := range due {
		f := reminderFiring{er.ID, er.Name, er.Due}
		if rem.stopped || rem.inflight[f] {
			continue
		}
		rem.inflight[f] = true
		i, ok := at[er.ID]
		if !ok {
			// Most entities have one reminder due in a scan: its batch is a slice of
			// due itself (capped, so that a second one copies it out).
			at[er.ID] = len(batches)
			batches = append(batches, firingBatch{r: r, sh: sh, id: er.ID, due: due[k : k+1 : k+1]})
			continue
		}
		batches[i].due = append(batches[i].due, er)
	}
	rem.tmu.Unlock()
	if !r.firer.enqueue(r.s, batches) {
		return
	}
	rem.tmu.Lock()
	if rem.more && len(rem.inflight) <= reminderLowWater {
		// The firings that were to read the rest finished already: read it now.
		rem.more, rem.rescan, rem.refill = false, true, true
	}
	rem.tmu.Unlock()
	if next > now {
		r.scheduleReminders(sh, next)
	}
}

// reminderWorkers is how many firings of one type a member has under way at most:
// the workers of the type's region (reminderFirer), each delivering one batch at a
// time.
const reminderWorkers = 128

// firingBatch is one entity's due reminders from one scan of its shard, earliest
// first.
type firingBatch struct {
	r   *shardRegion
	sh  *shard
	id  string
	due []EntityReminder
}

// reminderFirer delivers the due reminders of a type's shards hosted on a member (one
// per region, so that a type whose entities hang, each firing an ask held for the ask
// timeout, holds its own workers only: the other types' reminders fire beside it). A
// queue of batches, first in first out, and up to reminderWorkers goroutines of the
// member's owner that take them in turn: started as batches come, each returns once
// the queue is empty. A backlog is batches in the queue (each shard's at most
// reminderLowWater+reminderBatch), not goroutines.
type reminderFirer struct {
	mu      sync.Mutex
	queue   []firingBatch
	head    int // queue[head:] waits
	workers int // running
}

// enqueue queues the batches and starts workers for them, up to reminderWorkers. It
// reports false once s stops (the batches are dropped: the store keeps their
// reminders).
func (f *reminderFirer) enqueue(s *Sharding, bs []firingBatch) bool {
	if len(bs) == 0 {
		return true
	}
	f.mu.Lock()
	f.queue = append(f.queue, bs...)
	start := min(reminderWorkers-f.workers, len(f.queue)-f.head)
	f.workers += start
	f.mu.Unlock()
	for i := range start {
		if !s.owner.Go(func() { f.work(s) }) {
			f.mu.Lock()
			f.workers -= start - i
			f.queue, f.head = nil, 0
			f.mu.Unlock()
			return false
		}
	}
	return true
}

// take returns the next batch, if any; with none the calling worker ends (it is no
// longer counted).
func (f *reminderFirer) take() (firingBatch, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.head == len(f.queue) {
		f.workers--
		return firingBatch{}, false
	}
	b := f.queue[f.head]
	f.queue[f.head] = firingBatch{}
	f.head++
	if f.head == len(f.queue) {
		f.queue, f.head = f.queue[:0], 0
	} else if f.head >= 1024 && f.head*2 >= len(f.queue) {
		// Mostly taken: the waiting ones move to the front.
		n := copy(f.queue, f.queue[f.head:])
		clear(f.queue[n:])
		f.queue, f.head = f.queue[:n], 0
	}
	return b, true
}

// work is a worker: it fires the queued batches until none is left (or s stops: the
// rest fail at once, and the store keeps them).
func (f *reminderFirer) work(s *Sharding) {
	var wctx workerContext
	defer wctx.stop()
	for {
		b, ok := f.take()
		if !ok {
			return
		}
		b.r.fireBatch(wctx.get(s), b.sh, b.id, b.due)
	}
}

// workerContext is the context of a firing worker's store writes: one
// context.WithTimeout of Config.RequestTimeout for many writes (a timer and its
// allocations per firing were a tenth of a firing's CPU), made anew once less than
// half of it is left, so that each write has between half of RequestTimeout and all of
// it.
type workerContext struct {
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time
}

// get returns the worker's context, made anew if less than half of RequestTimeout is
// left of it.
func (w *workerContext) get(s *Sharding) context.Context {
	now := time.Now()
	if w.ctx == nil || w.deadline.Sub(now) < s.cfg.RequestTimeout/2 {
		w.stop()
		w.deadline = now.Add(s.cfg.RequestTimeout)
		// Not the member's context, as before: a write under way when the member stops
		// is not cut short.
		w.ctx, w.cancel = context.WithDeadline(context.Background(), w.deadline)
	}
	return w.ctx
}

// stop releases the worker's context.
func (w *workerContext) stop() {
	if w.cancel != nil {
		w.cancel()
		w.ctx, w.cancel = nil, nil
	}
}

// fireBatch delivers an entity's due reminders, in order, each as an ask of
// KindReminder (which activates the entity if needed), then moves those delivered on
// in the store in one write: an interval's next due after now, a one-shot's deletion;
// a reminder set anew meanwhile (another due) is left as it is. A delivery that failed
// before the entity handled it ends the batch, and the rest are tried again after
// reminderRetry; an entity's error answer counts as delivered.
//
// ctx bounds the store's write (a deadline of at most Config.RequestTimeout), not the
// deliveries (each ask keeps Config.AskTimeout).
func (r *shardRegion) fireBatch(ctx context.Context, sh *shard, id string, due []EntityReminder) {
	rem := sh.rem
	defer func() {
		rem.tmu.Lock()
		for _, er := range due {
			delete(rem.inflight, reminderFiring{er.ID, er.Name, er.Due})
		}
		again := rem.more && len(rem.inflight) <= reminderLowWater || rem.waiting && len(rem.inflight) == 0
		if again {
			rem.refill = rem.more
			rem.more, rem.waiting = false, false
		}
		rem.tmu.Unlock()
		if again {
			r.s.owner.Go(func() { r.scanReminders(sh) })
		}
	}()
	delivered := due
	for i, er := range due {
		if !r.deliverReminder(er) {
			if r.s.owner.Closed() {
				return
			}
			delivered = due[:i]
			r.scheduleReminders(sh, nowMillis()+reminderRetry.Milliseconds())
			break
		}
	}
	if len(delivered) == 0 {
		return
	}
	next, err := r.advanceReminders(ctx, sh, id, delivered)
	if r.s.log.Enabled(context.Background(), slog.LevelDebug) {
		r.s.log.Debug("reminders delivered", "type", r.settings.Name, "shard", sh.id, "id", id,
			"reminders", firingNames(r.settings.Name, delivered), "moved_on", err == nil)
	}
	if err != nil {
		if r.s.owner.Closed() {
			return
		}
		r.s.log.Warn("reminders delivered but not moved on; they may come again", "type", r.settings.Name, "id", id,
			"reminders", len(delivered), "err", err)
		r.scheduleReminders(sh, nowMillis()+reminderRetry.Milliseconds())
		return
	}
	if next > 0 {
		r.scheduleReminders(sh, next)
	}
}

// deliverReminder delivers one due reminder to its entity, and reports whether the
// entity handled it.
func (r *shardRegion) deliverReminder(er EntityReminder) bool {
	// Without a deadline of its own: the ask keeps Config.AskTimeout (AskMessage)
	// without the allocations of a context.WithTimeout per firing.
	ctx := r.s.owner.Context()
	m := Message{EntityType: r.settings.Name, EntityID: er.ID, Payload: er.Payload,
		Sender: er.Name, Kind: KindReminder, Tag: uint64(er.Due), IdempotencyKey: reminderIdempotencyKey(er.Name, er.Due)}
	if IsScheduledName(er.Name) {
		// A scheduled message: a message from outside, its due time as its Tag.
		m.Sender, m.Kind, m.IdempotencyKey = "", KindMessage, scheduledIdempotencyKey(er.Name)
	}
	at := nowMillis()
	_, err := r.s.AskMessage(ctx, m)
	if err != nil && !handledError(err) {
		if !r.s.owner.Closed() {
			r.s.log.Debug("reminder not delivered; retrying", "type", r.settings.Name, "id", er.ID, "reminder", er.Name, "err", err)
		}
		return false
	}
	late := max(at-er.Due, 0)
	r.recordLateness(IsScheduledName(er.Name), late)
	if IsScheduledName(er.Name) && late > LateScheduledAfter.Milliseconds() {
		r.s.log.Warn("scheduled message delivered late", "type", r.settings.Name, "id", er.ID,
			"scheduled", ScheduledID(r.settings.Name, er.ID, er.Name), "due", time.UnixMilli(er.Due).UTC(),
			"late", (time.Duration(late) * time.Millisecond).String())
	}
	return true
}

// lateFiringAfter is how late a firing is delivered before it counts as late
// (shardhost.reminders.late): LateScheduledAfter, for reminders too.
const lateFiringAfter = LateScheduledAfter

// recordLateness records a delivered firing's lateness (ms, from its due time to the
// start of its delivery) in shardhost.reminders.lateness, and counts it in
// shardhost.reminders.late past lateFiringAfter.
func (r *shardRegion) recordLateness(scheduled bool, late int64) {
	kind := "reminder"
	if scheduled {
		kind = "scheduled"
	}
	tel := r.s.tel
	attrs := tel.typeAttr(r.settings.Name, attrReminderKind, kind)
	tel.lateness.Record(context.Background(), float64(late)/1000, attrs)
	if late > lateFiringAfter.Milliseconds() {
		tel.late.Add(context.Background(), 1, attrs)
	}
}

// handledError reports whether a failed ask reached its entity's code, which answered
// with an error: the reminder was delivered.
func handledError(err error) bool {
	switch ErrorCode(err) {
	case CodeEntityError, CodeGuestTrap, CodeGuestDeadline, CodeReplyTooLarge:
		return true
	}
	return false
}

// nextDue is the first due of an interval reminder after now: due plus as many whole
// intervals as it takes (missed ones are skipped, not delivered one by one).
func nextDue(due, interval, now int64) int64 { return NextDue(due, interval, now) }

// NextDue returns the first due time (Unix ms) of an interval reminder after now (Unix
// ms), from its due time due and its interval (ms, > 0): due plus as many whole
// intervals as it takes to pass now, the missed ones skipped. For a ReminderAdvancer.
func NextDue(due, interval, now int64) int64 {
	if due > now {
		return due + interval
	}
	return due + ((now-due)/interval+1)*interval
}

// advanceReminders moves an entity's fired reminders on in the store, in one write (the
// store's ReminderAdvancer, or a read and a write of the entity's set), within ctx
// (which has a deadline); it returns the earliest new due time among them (0: none).
func (r *shardRegion) advanceReminders(ctx context.Context, sh *shard, id string, fired []EntityReminder) (int64, error) {
	if adv, ok := r.s.reminders.(ReminderAdvancer); ok {
		epoch, err := r.fencedHere(ctx, sh)
		if err != nil {
			return 0, err
		}
		mu := sh.rem.lock(id)
		mu.Lock()
		defer mu.Unlock()
		return adv.AdvanceReminders(ctx, r.settings.Name, sh.id, epoch, fired, nowMillis())
	}
	var next int64
	err := r.updateRemindersIn(ctx, sh, id, func(rs []Reminder) ([]Reminder, error) {
		changed := false
		now := nowMillis()
		for _, er := range fired {
			i := slices.IndexFunc(rs, func(x Reminder) bool { return x.Name == er.Name })
			if i < 0 || rs[i].Due != er.Due {
				continue // cancelled or set anew meanwhile
			}
			changed = true
			if rs[i].Interval > 0 {
				rs[i].Due = nextDue(er.Due, rs[i].Interval, now)
				if next == 0 || rs[i].Due < next {
					next = rs[i].Due
				}
				continue
			}
			rs = slices.Delete(rs, i, i+1)
		}
		if !changed {
			return nil, errUnchanged
		}
		return rs, nil
	})
	if errors.Is(err, errUnchanged) {
		return 0, nil
	}
	return next, err
}

// errUnchanged: an update that has nothing to write.
var errUnchanged = errors.New("sharding: unchanged")

// updateReminders reads the entity's reminders, changes them with f and writes them
// back, fenced at the shard's epoch here, serialised with the shard's other updates
// from here, within Config.RequestTimeout. The shard must be hosted here as sh:
// ErrShardUnavailable otherwise.
func (r *shardRegion) updateReminders(ctx context.Context, sh *shard, id string, f func([]Reminder) ([]Reminder, error)) error {
	ctx, cancel := context.WithTimeout(ctx, r.s.cfg.RequestTimeout)
	defer cancel()
	return r.updateRemindersIn(ctx, sh, id, f)
}

// updateRemindersIn is updateReminders within ctx, which has a deadline.
func (r *shardRegion) updateRemindersIn(ctx context.Context, sh *shard, id string, f func([]Reminder) ([]Reminder, error)) error {
	epoch, err := r.fencedHere(ctx, sh)
	if err != nil {
		return err
	}
	mu := sh.rem.lock(id)
	mu.Lock()
	defer mu.Unlock()
	key := EntityKey{Type: r.settings.Name, Shard: sh.id, ID: id}
	rs, err := r.s.reminders.LoadReminders(WithReadEpoch(ctx, epoch), key)
	if err != nil {
		return err
	}
	rs, err = f(rs)
	if err != nil {
		return err
	}
	return r.s.reminders.SaveReminders(ctx, key, epoch, rs)
}

// fencedHere returns the epoch of the shard hosted here as sh, once its fence at that
// epoch is in the store (fenceShard). Errors: ErrShardUnavailable (not hosted here as
// sh), the fence's.
func (r *shardRegion) fencedHere(ctx context.Context, sh *shard) (uint64, error) {
	epoch, ok := r.hostedEpoch(sh)
	if !ok {
		return 0, fmt.Errorf("%w: %s/%d left this member", ErrShardUnavailable, r.settings.Name, sh.id)
	}
	if err := r.fenceShard(ctx, sh.id, epoch); err != nil {
		return 0, err
	}
	return epoch, nil
}

// homeShard returns the shard of typ/id if it is hosted here, or ErrShardUnavailable:
// an entity's reminders are changed on its home (by the entity, as it handles a
// message). Errors also: ErrUnknownEntityType (no region of the type here),
// ErrStoreUnavailable (no state store).
func (s *Sharding) homeShard(ctx context.Context, typ, id string) (*shardRegion, *shard, error) {
	if s.reminders == nil {
		return nil, nil, fmt.Errorf("%w: no state store keeps reminders", ErrStoreUnavailable)
	}
	if id == "" {
		return nil, nil, ErrEmptyEntityID
	}
	r, err := s.ensureRegion(ctx, typ)
	if err != nil {
		return nil, nil, err
	}
	shardID := abi.ShardID(id, r.settings.NumberOfShards)
	r.mu.Lock()
	sh := r.hostedLocked(shardID)
	r.mu.Unlock()
	if sh == nil {
		return nil, nil, fmt.Errorf("%w: %s/%s is not hosted on this member (reminders are set by their entity)", ErrShardUnavailable, typ, id)
	}
	return r, sh, nil
}

// SetReminder sets the reminder of the entity typ/id named r.Name, replacing one of that
// name: at r.Due (Unix ms; in the past: at once) the entity gets r.Payload as a
// KindReminder message, and with r.Interval (ms) > 0 again every interval after. The
// entity's shard must be hosted on this member (the entity sets its reminders as it
// handles a message). It returns once the state store holds the reminder. Errors:
// ErrInvalidReminder, ErrTooManyReminders (over MaxRemindersPerEntity), ErrEmptyEntityID,
// ErrUnknownEntityType, ErrShardUnavailable (not hosted here), the store's
// (ErrStaleEpoch, ErrStoreUnavailable); on an error nothing changed.
func (s *Sharding) SetReminder(ctx context.Context, typ, id string, rem Reminder) error {
	if err := CheckReminder(rem); err != nil {
		return err
	}
	r, sh, err := s.homeShard(ctx, typ, id)
	if err != nil {
		return err
	}
	rem.Payload = slices.Clone(rem.Payload)
	err = r.updateReminders(ctx, sh, id, func(rs []Reminder) ([]Reminder, error) {
		if i := slices.IndexFunc(rs, func(x Reminder) bool { return x.Name == rem.Name }); i >= 0 {
			rs[i] = rem
			return rs, nil
		}
		if own := ownReminders(rs); own >= MaxRemindersPerEntity {
			return nil, fmt.Errorf("%w: %s/%s has %d (at most %d per entity)", ErrTooManyReminders, typ, id, own, MaxRemindersPerEntity)
		}
		return append(rs, rem), nil
	})
	if err != nil {
		return err
	}
	r.scheduleReminders(sh, rem.Due)
	return nil
}

// CancelReminder deletes the reminder of the entity typ/id named name, and reports
// whether there was one. A firing under way may still be delivered. Errors: those of
// SetReminder.
func (s *Sharding) CancelReminder(ctx context.Context, typ, id, name string) (bool, error) {
	if IsScheduledName(name) {
		return false, nil // a scheduled message's: not the entity's (CancelScheduled)
	}
	r, sh, err := s.homeShard(ctx, typ, id)
	if err != nil {
		return false, err
	}
	found := false
	err = r.updateReminders(ctx, sh, id, func(rs []Reminder) ([]Reminder, error) {
		i := slices.IndexFunc(rs, func(x Reminder) bool { return x.Name == name })
		if i < 0 {
			return nil, errUnchanged
		}
		found = true
		return slices.Delete(rs, i, i+1), nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return found, err
}

// Reminders returns the reminders of the entity typ/id, sorted by name, from the state
// store, on any member: its own, not the scheduled messages waiting for it
// (ScheduledOf). Errors: ErrEmptyEntityID, ErrUnknownEntityType, ErrStoreUnavailable,
// ErrInvalidStateKey.
func (s *Sharding) Reminders(ctx context.Context, typ, id string) ([]Reminder, error) {
	rs, err := s.allReminders(ctx, typ, id)
	if err != nil {
		return nil, err
	}
	rs = slices.DeleteFunc(rs, func(r Reminder) bool { return IsScheduledName(r.Name) })
	if len(rs) == 0 {
		return nil, nil
	}
	return rs, nil
}

// ownReminders counts the entity's own reminders among rs (not its scheduled
// messages).
func ownReminders(rs []Reminder) int {
	n := 0
	for _, r := range rs {
		if !IsScheduledName(r.Name) {
			n++
		}
	}
	return n
}

// remindersOf is RemindersOf, or nil without a store.
func remindersOf(s StateStore) ReminderStore {
	if s == nil {
		return nil
	}
	return RemindersOf(s)
}

// firingNames names delivered firings for a debug log: a scheduled message by its ID
// (ScheduledID), a reminder by its name, each with its due time (Unix ms).
func firingNames(typ string, due []EntityReminder) []string {
	out := make([]string, 0, len(due))
	for _, er := range due {
		name := er.Name
		if IsScheduledName(name) {
			name = ScheduledID(typ, er.ID, name)
		}
		out = append(out, name+"@"+strconv.FormatInt(er.Due, 10))
	}
	return out
}
