//! The Context: what an entity may ask of the host.

use crate::{Error, Flag, GCounter, GSet, LWWMap, LWWRegister, LogLevel, MessageKind, ORMultiMap, ORSet, PNCounter};
use crate::{Code, PNCounterMap, Reminder, MAX_RANDOM};
use std::fmt;
use std::time::Duration;
#[cfg(doc)] // names the docs link to
use crate::{Consistency, Entity, Harness, MAX_IDEMPOTENCY_KEY, MAX_TIMERS, MAX_TIMER_MESSAGE, MAX_TIMER_NAME};
#[cfg(doc)]
use crate::{MAX_REMINDERS, MAX_REMINDER_NAME, MAX_REMINDER_PAYLOAD, MIN_REMINDER_INTERVAL_MS};

/// The host a Context calls: on wasm32 the real one, through the ABI's imports
/// (`wasm.rs`); natively the fake host of a [`Harness`](crate::Harness) (`harness.rs`).
/// Both have the same methods, one per host function, so the Context is written once.
#[cfg(target_arch = "wasm32")]
pub(crate) type Host = crate::wasm::Host;
#[cfg(not(target_arch = "wasm32"))]
pub(crate) type Host = crate::harness::Fake;

/// What an entity may ask of the host during [`Entity::receive`] and the lifecycle hooks.
///
/// Methods that can fail return an [`Error`] whose [`code`](Error::code) is the host's
/// (see [`Code`]) and whose text is the host's explanation.
pub struct Context {
    entity_id: String,
    entity_type: String,
    /// The host; a Harness moves its fake host in for the duration of each call.
    pub(crate) host: Host,
}

/// Milliseconds of a timeout for the ABI: `None` or zero is 0 (the host's default), a
/// positive duration at least 1, at most `i32::MAX`.
pub(crate) fn timeout_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => 0,
        Some(d) if d.is_zero() => 0,
        Some(d) => d.as_millis().clamp(1, i32::MAX as u128) as i32,
    }
}

/// Milliseconds of a timer's delay or interval, rounded up, at most `i64::MAX`.
pub(crate) fn duration_ms(d: Duration) -> i64 {
    let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0);
    ms.min(i64::MAX as u128) as i64
}

impl Context {
    pub(crate) fn new(entity_type: String, entity_id: String, host: Host) -> Context {
        Context { entity_id, entity_type, host }
    }

    /// The entity's ID.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// The name of the entity's type.
    pub fn entity_type(&self) -> &str {
        &self.entity_type
    }

    /// Writes `msg` into the host's log and the entity's own log at `level` (read with
    /// `shardhost logs TYPE/ID`, exported through OpenTelemetry logs; the host cuts lines
    /// over 4 KiB). It never fails nor blocks: the host drops and counts lines beyond the
    /// entity's rate. The test harness keeps them in `Harness::logs`.
    pub fn log(&mut self, level: LogLevel, msg: &str) {
        self.host.log(level, msg)
    }

    /// Asks the host to passivate the entity once the current message is handled: the host
    /// saves its state (see [`Entity::snapshot`]) and releases its instance; messages that
    /// arrive meanwhile go to the next incarnation, which starts from that state. The reply
    /// to the current message is delivered as usual. Calling it again changes nothing.
    /// Only during [`Entity::receive`] (elsewhere the host traps).
    pub fn passivate(&mut self) {
        self.host.passivate()
    }

    /// The kind of the current message. Only during [`Entity::receive`] (elsewhere the
    /// host traps).
    pub fn kind(&self) -> MessageKind {
        self.host.message_kind()
    }

    /// The source of the current message: the sending entity as `TYPE/ID` (empty from
    /// outside the cluster's entities) for a message, the timer's name for a timer's
    /// message, the key for a changed value. Empty outside [`Entity::receive`].
    pub fn sender(&self) -> String {
        self.host.sender()
    }

    /// Sends `msg` to the entity `typ`/`id` without waiting for it; the receiver sees this
    /// entity as its sender. `Ok` once the host has routed the message (delivery further on
    /// is not confirmed). Errors: [`Code::BadRequest`] (empty ID, bad type, message over
    /// the cap), [`Code::Unavailable`], [`Code::NotAllowed`] (in `on_passivate`).
    pub fn tell(&mut self, typ: &str, id: &str, msg: &[u8]) -> Result<(), Error> {
        self.host.tell(typ, id, msg)
    }

    /// Sends `msg` to the entity `typ`/`id` and waits for its reply, at most `timeout`
    /// (`None`: the host's default) and never past the current message's deadline. The
    /// entity is blocked while it waits: its messages queue. Errors:
    /// [`Code::EntityError`] (the entity answered with an error: the text is its error),
    /// [`Code::Timeout`], [`Code::AskCycle`] (the ask would wait on an entity that is
    /// itself waiting for this one, or on this entity itself), [`Code::Unavailable`],
    /// [`Code::BadRequest`], [`Code::NotAllowed`].
    pub fn ask(&mut self, typ: &str, id: &str, msg: &[u8], timeout: Option<Duration>) -> Result<Vec<u8>, Error> {
        self.host.ask(&self.entity_type, &self.entity_id, typ, id, msg, timeout_ms(timeout))
    }

    /// [`tell`](Context::tell) with an idempotency key: the receiving entity handles the
    /// message once, however many times it is sent with `key`, and drops a repeat. It
    /// remembers the key for its type's idempotency retention (24 h by default); under the
    /// journal (the default durability) across crashes and moves, otherwise as long as its
    /// instance lives. Keys belong to the receiver: the same key sent to two entities is two
    /// messages. Use a key that a retry of the send computes again (from the current
    /// message, say), so that a message this entity handles again after a crash does not
    /// send twice. At most [`MAX_IDEMPOTENCY_KEY`] bytes; an empty key is none. Errors: those
    /// of `tell`, and [`Code::BadRequest`] for a longer key (nothing is sent).
    ///
    /// A module that calls it (or [`ask_with_key`](Context::ask_with_key)) imports the host
    /// functions `tell_key` and `ask_key` (abi/SPEC.md, "Idempotency keys"); a host without
    /// them refuses it at deploy.
    pub fn tell_with_key(&mut self, typ: &str, id: &str, msg: &[u8], key: &str) -> Result<(), Error> {
        self.host.tell_key(typ, id, msg, key)
    }

    /// [`ask`](Context::ask) with an idempotency key: the asked entity handles the message
    /// once and answers a repeat with the first reply (or, under the journal, the first
    /// error) without handling it again, so an ask that failed with [`Code::Timeout`] can be
    /// sent again safely with the same key. The key is as for
    /// [`tell_with_key`](Context::tell_with_key). Errors: those of `ask`, and
    /// [`Code::BadRequest`] for a key over [`MAX_IDEMPOTENCY_KEY`] bytes (nothing is sent).
    pub fn ask_with_key(&mut self, typ: &str, id: &str, msg: &[u8], key: &str, timeout: Option<Duration>) -> Result<Vec<u8>, Error> {
        self.host.ask_key(&self.entity_type, &self.entity_id, typ, id, msg, key, timeout_ms(timeout))
    }

    /// Passes the current message (of kind [`MessageKind::Message`]) on to `typ`/`id`
    /// unchanged, with its original sender and asker: that entity's reply or error answers
    /// the asker, and this entity's own reply is dropped. The forward happens when
    /// `receive` returns `Ok` (with `Err` the asker gets that error instead); calling it
    /// again replaces the target. Only during [`Entity::receive`].
    pub fn forward(&mut self, typ: &str, id: &str) -> Result<(), Error> {
        self.host.forward(typ, id)
    }

    /// Reads the distributed data `key` with the read consistency `cons` (a [`Consistency`]
    /// or the ABI's text, e.g. `"majority"`) and returns its value as JSON. Errors:
    /// [`Code::NotFound`], [`Code::Deleted`], [`Code::Timeout`] (the consistency was not
    /// reached in time), [`Code::BadRequest`]. The typed handles ([`Context::pn_counter`]
    /// and the others) are easier to use.
    pub fn ddata_get(&mut self, key: &str, cons: impl fmt::Display, timeout: Option<Duration>) -> Result<String, Error> {
        let cons = cons.to_string();
        self.host.ddata_get(key, &cons, timeout_ms(timeout))
    }

    /// Applies the operation `op` (text, e.g. `"incr 5"`, `"add x"`: abi/SPEC.md lists them)
    /// to the distributed data `key` of type `typ` (e.g. `"pncounter"`), created empty if
    /// absent, with the write consistency `cons`; returns the new local value as JSON.
    /// Errors: [`Code::Timeout`] (applied locally, but not acknowledged by enough replicas
    /// in time), [`Code::Deleted`], [`Code::TypeMismatch`], [`Code::BadRequest`] (bad type,
    /// operation or consistency).
    pub fn ddata_update(
        &mut self,
        key: &str,
        typ: &str,
        op: &str,
        cons: impl fmt::Display,
        timeout: Option<Duration>,
    ) -> Result<String, Error> {
        let cons = cons.to_string();
        self.host.ddata_update(key, typ, op, &cons, timeout_ms(timeout))
    }

    /// Deletes the distributed data `key` for good: it can never be used again. Errors:
    /// [`Code::Timeout`], [`Code::Deleted`], [`Code::BadRequest`].
    pub fn ddata_delete(&mut self, key: &str, cons: impl fmt::Display, timeout: Option<Duration>) -> Result<(), Error> {
        let cons = cons.to_string();
        self.host.ddata_delete(key, &cons, timeout_ms(timeout))
    }

    /// Has the host deliver the value of `key` as a message of kind
    /// [`MessageKind::Changed`] (the sender is the key, the message its value as JSON)
    /// whenever it changes, and once soon after subscribing if it exists. The subscription
    /// belongs to the entity: it is saved with its state and renewed at its next activation.
    pub fn subscribe(&mut self, key: &str) -> Result<(), Error> {
        self.host.subscribe(key)
    }

    /// Ends the subscription to `key` (`Ok` whether there was one or not).
    pub fn unsubscribe(&mut self, key: &str) -> Result<(), Error> {
        self.host.unsubscribe(key)
    }

    /// Starts the timer `name`: after `delay` the host delivers `msg` to this entity as a
    /// message of kind [`MessageKind::Timer`] with the timer's name as sender. Starting a
    /// name that is running replaces it. Timers are saved with the entity's state and
    /// re-armed by its next incarnation. Errors: [`Code::BadRequest`] (a name over
    /// [`MAX_TIMER_NAME`] bytes, a message over [`MAX_TIMER_MESSAGE`], more than
    /// [`MAX_TIMERS`] timers).
    pub fn start_timer(&mut self, name: &str, msg: &[u8], delay: Duration) -> Result<(), Error> {
        self.timer_start(name, msg, duration_ms(delay), 0)
    }

    /// Starts the timer `name` as [`start_timer`](Context::start_timer) does, and after its
    /// first message delivers it again every `interval` (fixed delay) until cancelled. An
    /// interval under a millisecond is one millisecond.
    pub fn start_repeating_timer(&mut self, name: &str, msg: &[u8], delay: Duration, interval: Duration) -> Result<(), Error> {
        self.timer_start(name, msg, duration_ms(delay), duration_ms(interval).max(1))
    }

    fn timer_start(&mut self, name: &str, msg: &[u8], delay_ms: i64, interval_ms: i64) -> Result<(), Error> {
        self.host.timer_start(name, msg, delay_ms, interval_ms)
    }

    /// Cancels the timer `name`: `true` if it was running. A message of the timer already
    /// queued is not delivered.
    pub fn cancel_timer(&mut self, name: &str) -> bool {
        self.host.timer_cancel(name)
    }

    /// Sets the durable reminder `name`: at `due_unix_ms` (Unix milliseconds; in the past:
    /// at once) the host delivers `payload` to this entity as a message of kind
    /// [`MessageKind::Reminder`] with the name as sender, even if the entity is passivated
    /// or its member died meanwhile; with `interval_ms` > 0 again every interval after
    /// (missed intervals are skipped). Setting a name that is set replaces it. Delivery is
    /// at least once, with the same due time ([`reminder_due`](Context::reminder_due)).
    /// Errors: [`Code::BadRequest`] (a name empty or over [`MAX_REMINDER_NAME`] bytes, an
    /// interval under [`MIN_REMINDER_INTERVAL_MS`], a payload over
    /// [`MAX_REMINDER_PAYLOAD`], more than [`MAX_REMINDERS`]), [`Code::Unavailable`].
    pub fn set_reminder(&mut self, name: &str, due_unix_ms: i64, interval_ms: i64, payload: &[u8]) -> Result<(), Error> {
        self.host.reminder_set(name, due_unix_ms, interval_ms, payload)
    }

    /// Deletes the reminder `name`: `Ok(true)` if the entity had it, `Ok(false)` if not.
    pub fn cancel_reminder(&mut self, name: &str) -> Result<bool, Error> {
        match self.host.reminder_cancel(name) {
            Ok(()) => Ok(true),
            Err(e) if e.code() == Code::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The entity's reminders, by name.
    pub fn reminders(&mut self) -> Result<Vec<Reminder>, Error> {
        let b = self.host.reminder_list()?;
        crate::reminders::decode(&b).ok_or_else(|| Error::with_code(Code::Error, "shardhost: malformed reminder list from the host"))
    }

    /// The due time (Unix milliseconds) of the current message if it is a reminder's;
    /// compare it with [`now_wall`](Context::now_wall) to learn how late it comes.
    pub fn reminder_due(&self) -> Option<i64> {
        if self.kind() != MessageKind::Reminder {
            return None;
        }
        Some(self.host.reminder_due())
    }

    /// The due time (Unix milliseconds) of the current message if it is a scheduled
    /// message: one from outside the cluster's entities (an empty sender) sent with a
    /// delivery time (`shardhost tell --at`/`--in`, `POST /v1/tell` with `deliver_at`).
    /// Compare it with [`now_wall`](Context::now_wall) to learn how late it comes: after
    /// an outage it is delivered at once, with its original due time.
    pub fn scheduled_due(&self) -> Option<i64> {
        if self.kind() != MessageKind::Message || !self.sender().is_empty() {
            return None;
        }
        match self.host.reminder_due() {
            0 => None,
            due => Some(due),
        }
    }

    /// The host's wall clock: nanoseconds since 1970-01-01 UTC.
    pub fn now_wall(&mut self) -> i64 {
        self.host.now(0)
    }

    /// The host's monotonic clock in nanoseconds: only differences mean anything, and it
    /// does not go back within an incarnation.
    pub fn now_monotonic(&mut self) -> i64 {
        self.host.now(1)
    }

    /// Fills `buf` with random bytes from the host (cryptographically strong on a real
    /// host; seeded in a [`Harness`]). The WASI random source, by contrast, is
    /// deterministic.
    pub fn random(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(MAX_RANDOM) {
            self.host.random(chunk);
        }
    }

    /// Adds an event with that name (cut at 256 bytes) to the trace span of the current
    /// message.
    pub fn trace_event(&mut self, name: &str) {
        self.host.trace_event(name)
    }

    /// The grow-only counter `key` (`gcounter`).
    pub fn g_counter(&mut self, key: &str) -> GCounter<'_> {
        GCounter::new(self, key)
    }

    /// The counter `key` that goes up and down (`pncounter`).
    pub fn pn_counter(&mut self, key: &str) -> PNCounter<'_> {
        PNCounter::new(self, key)
    }

    /// The grow-only set of strings `key` (`gset`).
    pub fn g_set(&mut self, key: &str) -> GSet<'_> {
        GSet::new(self, key)
    }

    /// The observed-remove set of strings `key` (`orset`).
    pub fn or_set(&mut self, key: &str) -> ORSet<'_> {
        ORSet::new(self, key)
    }

    /// The last-writer-wins map of strings `key` (`lwwmap`).
    pub fn lww_map(&mut self, key: &str) -> LWWMap<'_> {
        LWWMap::new(self, key)
    }

    /// The map of counters `key` (`pncountermap`).
    pub fn pn_counter_map(&mut self, key: &str) -> PNCounterMap<'_> {
        PNCounterMap::new(self, key)
    }

    /// The map of sets of strings `key` (`ormultimap`).
    pub fn or_multi_map(&mut self, key: &str) -> ORMultiMap<'_> {
        ORMultiMap::new(self, key)
    }

    /// The last-writer-wins register of a string `key` (`lwwregister`).
    pub fn lww_register(&mut self, key: &str) -> LWWRegister<'_> {
        LWWRegister::new(self, key)
    }

    /// The flag `key`, which can only be switched on (`flag`).
    pub fn flag(&mut self, key: &str) -> Flag<'_> {
        Flag::new(self, key)
    }
}
