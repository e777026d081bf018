//! The Rust guest SDK for shardhost entities: with it an entity is a type that implements
//! [`Entity`] and one call of the [`entity!`] macro.
//!
//! ```
//! use shardhost::{Context, Entity, Error};
//!
//! struct Counter { n: i64 }
//!
//! impl Entity for Counter {
//!     fn receive(&mut self, _ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
//!         match msg {
//!             b"inc" => self.n += 1,
//!             b"get" => {}
//!             _ => return Err(Error::new(format!("unknown message {:?}", String::from_utf8_lossy(msg)))),
//!         }
//!         Ok(self.n.to_string().into_bytes())
//!     }
//! }
//!
//! // The exports of the ABI (in a wasm32 build): each instance creates its entity with this.
//! shardhost::entity!(Counter, |_id: &str| Counter { n: 0 });
//!
//! // Natively, the entity is tested without a host:
//! let mut h = shardhost::Harness::new("counter", "c1", |_id: &str| Counter { n: 0 });
//! assert_eq!(h.send(b"inc").unwrap(), b"1");
//! assert_eq!(h.send(b"dec").unwrap_err().message(), "unknown message \"dec\"");
//! ```
//!
//! Entities talk to each other ([`Context::tell`], [`Context::ask`], [`Context::forward`]),
//! share distributed data ([`Context::pn_counter`], [`Context::or_set`], ... and
//! [`Context::ddata_update`]), keep timers ([`Context::start_timer`]) and may use lifecycle
//! hooks ([`Entity::on_activate`], [`Entity::on_passivate`]):
//!
//! ```
//! use shardhost::{Consistency, Context, Entity, Error, Harness, MessageKind};
//! use std::time::Duration;
//!
//! /// Counts visits in the cluster-wide counter "visits" and reminds itself after a minute.
//! struct Visits;
//!
//! impl Entity for Visits {
//!     fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
//!         if ctx.kind() == MessageKind::Timer {
//!             ctx.tell("audit", "main", b"reminded")?;
//!             return Ok(Vec::new());
//!         }
//!         let n = ctx.pn_counter("visits").incr(1, Consistency::Majority)?;
//!         ctx.start_timer("remind", msg, Duration::from_secs(60))?;
//!         Ok(n.to_string().into_bytes())
//!     }
//! }
//!
//! let mut h = Harness::new("visits", "v1", |_id: &str| Visits);
//! assert_eq!(h.send(b"hi").unwrap(), b"1");
//! assert_eq!(h.send(b"hi").unwrap(), b"2");
//! assert_eq!(h.ddata_value("visits").unwrap(), "2");
//! h.fire_timer("remind").unwrap();
//! assert_eq!(h.tells()[0].to_string(), "audit/main reminded");
//! ```
//!
//! Build the crate as a `cdylib` for `wasm32-unknown-unknown` with `panic=abort` and a
//! 64 KiB stack (see README.md). The SDK implements ABI version 1 (`abi/SPEC.md` in the
//! shardhost repository), has no dependencies and builds with Rust 1.63. Entity code is
//! tested natively, without a host, with [`Harness`].
//!
//! A panic in an entity becomes a wasm trap: the host fails that message and discards the
//! instance. Before the trap, the SDK writes the panic message to the host's log at error
//! level and to WASI stderr, which the host attaches to the error it returns.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The host ABI version this SDK implements (its modules export `shardhost_abi_v1`).
pub const ABI_VERSION: u32 = 1;

/// The largest guest-level snapshot a host accepts, in bytes (4 MiB): a larger one fails
/// the snapshot (see [`Entity::snapshot`]).
pub const MAX_SNAPSHOT_SIZE: usize = 4 << 20;

/// The largest message or reply a host accepts by default, in bytes (1 MiB).
pub const MAX_MESSAGE_SIZE: usize = 1 << 20;

/// The longest timer name, in bytes.
pub const MAX_TIMER_NAME: usize = 256;

/// The largest timer message, in bytes (64 KiB).
pub const MAX_TIMER_MESSAGE: usize = 64 << 10;

/// The most timers one entity may have running.
pub const MAX_TIMERS: usize = 1000;

/// The default number of host function calls one message (or hook) may make; the call
/// past it traps.
pub const DEFAULT_CALL_BUDGET: u32 = 10_000;

/// The most bytes one `random` host call fills; [`Context::random`] splits larger buffers.
const MAX_RANDOM: usize = 64 << 10;

/// The level of a log line; the values are Go's log/slog levels, as in the ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i32)]
pub enum LogLevel {
    Debug = -4,
    Info = 0,
    Warn = 4,
    Error = 8,
}

impl LogLevel {
    /// The level's name in capitals: "DEBUG", "INFO", "WARN" or "ERROR".
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "DEBUG",
            LogLevel::Info => "INFO",
            LogLevel::Warn => "WARN",
            LogLevel::Error => "ERROR",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What kind of error an [`Error`] is: the ABI v1 codes other than OK (abi/SPEC.md,
/// "v1: codes"). An error an entity makes itself with [`Error::new`] is [`Code::Error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i32)]
pub enum Code {
    /// 1: failed; the text says why.
    Error = 1,
    /// 2: the ddata key does not exist.
    NotFound = 2,
    /// 3: the ddata key was deleted.
    Deleted = 3,
    /// 4: the ask or the consistency level was not answered in time.
    Timeout = 4,
    /// 5: the ask would deadlock: it asks this entity itself, or an entity that is asking
    /// it, directly or through others.
    AskCycle = 5,
    /// 6: the entity or replica cannot be reached now.
    Unavailable = 6,
    /// 7: bad arguments: empty ID, bad type name, operation or consistency, oversize
    /// message, too many timers.
    BadRequest = 7,
    /// 8: the function is not valid here (for example `tell` in `on_passivate`).
    NotAllowed = 8,
    /// 9: the asked entity answered with an error; the text is its error.
    EntityError = 9,
    /// 10: the ddata key holds another type.
    TypeMismatch = 10,
}

impl Code {
    /// The code's number in the ABI.
    pub fn number(self) -> i32 {
        self as i32
    }

    /// The code of an ABI number; `None` for 0 (OK). A number this SDK does not know is
    /// [`Code::Error`].
    pub fn from_number(n: i32) -> Option<Code> {
        Some(match n {
            0 => return None,
            2 => Code::NotFound,
            3 => Code::Deleted,
            4 => Code::Timeout,
            5 => Code::AskCycle,
            6 => Code::Unavailable,
            7 => Code::BadRequest,
            8 => Code::NotAllowed,
            9 => Code::EntityError,
            10 => Code::TypeMismatch,
            _ => Code::Error,
        })
    }

    /// The code's name as in abi/SPEC.md, e.g. "AskCycle".
    pub fn name(self) -> &'static str {
        match self {
            Code::Error => "Error",
            Code::NotFound => "NotFound",
            Code::Deleted => "Deleted",
            Code::Timeout => "Timeout",
            Code::AskCycle => "AskCycle",
            Code::Unavailable => "Unavailable",
            Code::BadRequest => "BadRequest",
            Code::NotAllowed => "NotAllowed",
            Code::EntityError => "EntityError",
            Code::TypeMismatch => "TypeMismatch",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An error: an entity's refusal of a message, or a host function's failure.
///
/// Returned from [`Entity::receive`], its text is delivered to the asker as an error
/// (status Error in the ABI); the entity keeps its state and goes on. Returned by a
/// [`Context`] method, its [`code`](Error::code) says what failed and its text is the
/// host's explanation (for [`Code::EntityError`], the asked entity's error text).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Error {
    code: Code,
    message: String,
}

impl Error {
    /// Returns an error with the given text and the code [`Code::Error`].
    pub fn new(message: impl Into<String>) -> Error {
        Error { code: Code::Error, message: message.into() }
    }

    /// Returns an error with the given code and text.
    pub fn with_code(code: Code, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }

    /// The error's text.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error's code: [`Code::Error`] for an error made with [`Error::new`].
    pub fn code(&self) -> Code {
        self.code
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.code == Code::Error {
            write!(f, "Error({:?})", self.message)
        } else {
            write!(f, "Error({}, {:?})", self.code, self.message)
        }
    }
}

impl std::error::Error for Error {}

impl From<&str> for Error {
    fn from(s: &str) -> Error {
        Error::new(s)
    }
}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error::new(s)
    }
}

// Conversions from the standard library's errors that entity code meets most, so that `?`
// works on parsing and decoding.
macro_rules! from_std_error {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::new(e.to_string())
            }
        }
    )*};
}

from_std_error!(
    fmt::Error,
    std::num::ParseIntError,
    std::num::ParseFloatError,
    std::str::ParseBoolError,
    std::str::Utf8Error,
    std::string::FromUtf8Error
);

/// The kind of the message an entity is handling ([`Context::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i32)]
pub enum MessageKind {
    /// 0: a message from an entity (the [sender](Context::sender) is its `TYPE/ID`) or
    /// from outside the cluster's entities (the sender is empty).
    Message = 0,
    /// 1: a timer's message; the sender is the timer's name.
    Timer = 1,
    /// 2: the new value (JSON) of a subscribed distributed data key; the sender is the key.
    Changed = 2,
}

impl MessageKind {
    /// The kind of an ABI number; a number this SDK does not know is `Message`.
    pub fn from_number(n: i32) -> MessageKind {
        match n {
            1 => MessageKind::Timer,
            2 => MessageKind::Changed,
            _ => MessageKind::Message,
        }
    }

    /// The kind's number in the ABI.
    pub fn number(self) -> i32 {
        self as i32
    }
}

/// How many replicas a distributed data read or write involves (Akka's ReadConsistency and
/// WriteConsistency). It renders as the ABI's consistency string (`Display`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Consistency {
    /// `local`: this member's replica only.
    #[default]
    Local,
    /// `majority`: a majority of the replicas.
    Majority,
    /// `majority+K`: a majority and K more (at most all).
    MajorityPlus(u32),
    /// `all`: every replica.
    All,
    /// `N`: N replicas.
    N(u32),
}

impl fmt::Display for Consistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Consistency::Local => f.write_str("local"),
            Consistency::Majority => f.write_str("majority"),
            Consistency::MajorityPlus(k) => write!(f, "majority+{}", k),
            Consistency::All => f.write_str("all"),
            Consistency::N(n) => write!(f, "{}", n),
        }
    }
}

/// The code of one entity. The host calls `receive` for each message, one at a time and in
/// order; `Ok` bytes are the reply to the asker (ignored for a tell), and an `Err` is
/// delivered to the asker as an error. An entity keeps its state in its own fields: one
/// wasm instance hosts exactly one entity.
///
/// The host saves an entity's state on passivation, handoff and shutdown, and after
/// messages as its type's checkpoint policy says; the next incarnation starts from it. By
/// default the host copies the instance's memory (a *transparent* snapshot), which only the
/// same module can take up. An entity that implements [`snapshot`](Entity::snapshot) and
/// [`restore`](Entity::restore) gives its state as bytes of its own encoding instead
/// (*guest-level*), and that state survives a redeploy of the type with new code:
///
/// ```
/// use shardhost::{Context, Entity, Error, Harness};
///
/// struct Total { sum: i64 }
///
/// impl Entity for Total {
///     fn receive(&mut self, _ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
///         self.sum += std::str::from_utf8(msg)?.parse::<i64>()?;
///         Ok(self.sum.to_string().into_bytes())
///     }
///
///     fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
///         Some(Ok(self.sum.to_le_bytes().to_vec()))
///     }
///
///     fn restore(&mut self, state: &[u8]) -> Result<(), Error> {
///         let b: [u8; 8] = state.try_into().map_err(|_| Error::new("bad state"))?;
///         self.sum = i64::from_le_bytes(b);
///         Ok(())
///     }
/// }
///
/// let mut h = Harness::new("total", "t1", |_id: &str| Total { sum: 0 });
/// h.send(b"40").unwrap();
/// let state = h.snapshot().unwrap().unwrap();
///
/// // The next incarnation, perhaps of newer code, takes the state up before any message.
/// let mut next = Harness::new("total", "t1", |_id: &str| Total { sum: 0 });
/// next.restore(&state).unwrap();
/// assert_eq!(next.send(b"2").unwrap(), b"42");
/// ```
pub trait Entity {
    /// Handles one message: `Ok` is the reply, `Err` reaches the asker as an error (the
    /// entity keeps its state and goes on). [`Context::kind`] says whether it is a message,
    /// a timer's message or a changed distributed data value; [`Context::sender`] where it
    /// came from.
    fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error>;

    /// Returns the entity's state in its own encoding, for a guest-level snapshot. The
    /// host calls it between messages, whenever it saves the state.
    ///
    /// - `None` (the default): no guest-level state; the host takes a transparent snapshot
    ///   of the instance's memory instead, which only this same module can take up.
    /// - `Some(Ok(bytes))`: the state, at most [`MAX_SNAPSHOT_SIZE`] (4 MiB) bytes; a larger
    ///   one fails the snapshot. An incarnation of this or of newer code gets the bytes in
    ///   [`restore`](Entity::restore), so keep the encoding readable across versions
    ///   (a version byte first helps).
    /// - `Some(Err(e))`: the snapshot fails with `e`'s text; the host keeps the state it
    ///   saved before, if any.
    ///
    /// An entity that returns `Some` must implement `restore` as well.
    fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
        None
    }

    /// Takes up `state`, which an earlier incarnation's [`snapshot`](Entity::snapshot)
    /// returned (perhaps from older code), in an entity the factory has just created. The
    /// host calls it once, before the first message. An `Err` fails the activation with
    /// its text; the host keeps the state for a later attempt, so refuse state you cannot
    /// read rather than start afresh.
    ///
    /// The default refuses: the entity keeps no guest-level state.
    fn restore(&mut self, state: &[u8]) -> Result<(), Error> {
        Err(Error::new(format!(
            "shardhost: this entity does not restore guest-level state ({} bytes given): it does not implement Entity::restore",
            state.len()
        )))
    }

    /// Called once per incarnation, after any [`restore`](Entity::restore) and before the
    /// first message (the host's `shardhost_on_activate`). Timers and subscriptions saved
    /// with the state are running again by then. An `Err` fails the activation with its
    /// text; the next message tries again with a new instance. The default does nothing.
    ///
    /// [`Context::kind`], [`Context::sender`], [`Context::forward`] and
    /// [`Context::passivate`] are for messages only; the rest of the context may be used.
    fn on_activate(&mut self, ctx: &mut Context) -> Result<(), Error> {
        let _ = ctx;
        Ok(())
    }

    /// Called once before the host saves the state of an entity it stops for passivation,
    /// handoff or shutdown (not after a trap, nor on a crash); the host's
    /// `shardhost_on_passivate`. Distributed data, timers, logs and the clocks may be used;
    /// `tell`, `ask` and `forward` fail with [`Code::NotAllowed`]. The default does nothing.
    fn on_passivate(&mut self, ctx: &mut Context) {
        let _ = ctx;
    }
}

impl<E: Entity + ?Sized> Entity for Box<E> {
    fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
        (**self).receive(ctx, msg)
    }

    fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
        (**self).snapshot()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), Error> {
        (**self).restore(state)
    }

    fn on_activate(&mut self, ctx: &mut Context) -> Result<(), Error> {
        (**self).on_activate(ctx)
    }

    fn on_passivate(&mut self, ctx: &mut Context) {
        (**self).on_passivate(ctx)
    }
}

/// What an entity may ask of the host during [`Entity::receive`] and the lifecycle hooks.
///
/// Methods that can fail return an [`Error`] whose [`code`](Error::code) is the host's
/// (see [`Code`]) and whose text is the host's explanation.
pub struct Context {
    entity_id: String,
    entity_type: String,
    /// The current message's kind and sender, read from the host when first asked for
    /// (each read is a host call, counted against the message's budget).
    #[cfg(target_arch = "wasm32")]
    kind: std::cell::Cell<Option<MessageKind>>,
    #[cfg(target_arch = "wasm32")]
    sender: std::cell::RefCell<Option<String>>,
    /// The fake host of a [`Harness`], moved in for the duration of each call.
    #[cfg(not(target_arch = "wasm32"))]
    fake: Fake,
}

/// Milliseconds of a timeout for the ABI: `None` or zero is 0 (the host's default), a
/// positive duration at least 1, at most `i32::MAX`.
fn timeout_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => 0,
        Some(d) if d.is_zero() => 0,
        Some(d) => d.as_millis().clamp(1, i32::MAX as u128) as i32,
    }
}

/// Milliseconds of a timer's delay or interval, rounded up, at most `i64::MAX`.
fn duration_ms(d: Duration) -> i64 {
    let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0);
    ms.min(i64::MAX as u128) as i64
}

impl Context {
    /// The entity's ID.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// The name of the entity's type.
    pub fn entity_type(&self) -> &str {
        &self.entity_type
    }

    /// Writes `msg` into the host's log at `level` (the host cuts lines over 4 KiB).
    pub fn log(&mut self, level: LogLevel, msg: &str) {
        #[cfg(target_arch = "wasm32")]
        wasm::log(level, msg);
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.fake.call();
            self.fake.logs.push(format!("{} {}", level.name(), msg));
        }
    }

    /// Asks the host to passivate the entity once the current message is handled: the host
    /// saves its state (see [`Entity::snapshot`]) and releases its instance; messages that
    /// arrive meanwhile go to the next incarnation, which starts from that state. The reply
    /// to the current message is delivered as usual. Calling it again changes nothing.
    /// Only during [`Entity::receive`] (elsewhere the host traps).
    pub fn passivate(&mut self) {
        #[cfg(target_arch = "wasm32")]
        wasm::passivate();
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.fake.call();
            self.fake.only_in_receive("passivate");
            self.fake.passivate = true;
        }
    }

    /// The kind of the current message. Only during [`Entity::receive`] (elsewhere the
    /// host traps).
    pub fn kind(&self) -> MessageKind {
        #[cfg(target_arch = "wasm32")]
        {
            if let Some(k) = self.kind.get() {
                return k;
            }
            let k = wasm::message_kind();
            self.kind.set(Some(k));
            k
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            if !self.fake.kind_read.replace(true) {
                self.fake.call();
            }
            self.fake.only_in_receive("message_kind");
            self.fake.kind
        }
    }

    /// The source of the current message: the sending entity as `TYPE/ID` (empty from
    /// outside the cluster's entities) for a message, the timer's name for a timer's
    /// message, the key for a changed value. Empty outside [`Entity::receive`].
    pub fn sender(&self) -> String {
        #[cfg(target_arch = "wasm32")]
        {
            let mut s = self.sender.borrow_mut();
            if s.is_none() {
                *s = Some(wasm::sender());
            }
            s.clone().unwrap_or_default()
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            if !self.fake.sender_read.replace(true) {
                self.fake.call();
            }
            self.fake.sender.clone()
        }
    }

    /// Sends `msg` to the entity `typ`/`id` without waiting for it; the receiver sees this
    /// entity as its sender. `Ok` once the host has routed the message (delivery further on
    /// is not confirmed). Errors: [`Code::BadRequest`] (empty ID, bad type, message over
    /// the cap), [`Code::Unavailable`], [`Code::NotAllowed`] (in `on_passivate`).
    pub fn tell(&mut self, typ: &str, id: &str, msg: &[u8]) -> Result<(), Error> {
        #[cfg(target_arch = "wasm32")]
        return wasm::tell(typ, id, msg);
        #[cfg(not(target_arch = "wasm32"))]
        return self.fake.tell(typ, id, msg);
    }

    /// Sends `msg` to the entity `typ`/`id` and waits for its reply, at most `timeout`
    /// (`None`: the host's default) and never past the current message's deadline. The
    /// entity is blocked while it waits: its messages queue. Errors:
    /// [`Code::EntityError`] (the entity answered with an error: the text is its error),
    /// [`Code::Timeout`], [`Code::AskCycle`] (the ask would wait on an entity that is
    /// itself waiting for this one, or on this entity itself), [`Code::Unavailable`],
    /// [`Code::BadRequest`], [`Code::NotAllowed`].
    pub fn ask(&mut self, typ: &str, id: &str, msg: &[u8], timeout: Option<Duration>) -> Result<Vec<u8>, Error> {
        #[cfg(target_arch = "wasm32")]
        return wasm::ask(typ, id, msg, timeout_ms(timeout));
        #[cfg(not(target_arch = "wasm32"))]
        return self.fake.ask(&self.entity_type, &self.entity_id, typ, id, msg, timeout_ms(timeout));
    }

    /// Passes the current message (of kind [`MessageKind::Message`]) on to `typ`/`id`
    /// unchanged, with its original sender and asker: that entity's reply or error answers
    /// the asker, and this entity's own reply is dropped. The forward happens when
    /// `receive` returns `Ok` (with `Err` the asker gets that error instead); calling it
    /// again replaces the target. Only during [`Entity::receive`].
    pub fn forward(&mut self, typ: &str, id: &str) -> Result<(), Error> {
        #[cfg(target_arch = "wasm32")]
        return wasm::forward(typ, id);
        #[cfg(not(target_arch = "wasm32"))]
        return self.fake.forward(typ, id);
    }

    /// Reads the distributed data `key` with the read consistency `cons` (a [`Consistency`]
    /// or the ABI's text, e.g. `"majority"`) and returns its value as JSON. Errors:
    /// [`Code::NotFound`], [`Code::Deleted`], [`Code::Timeout`] (the consistency was not
    /// reached in time), [`Code::BadRequest`]. The typed handles ([`Context::pn_counter`]
    /// and the others) are easier to use.
    pub fn ddata_get(&mut self, key: &str, cons: impl fmt::Display, timeout: Option<Duration>) -> Result<String, Error> {
        let cons = cons.to_string();
        #[cfg(target_arch = "wasm32")]
        return wasm::ddata_get(key, &cons, timeout_ms(timeout));
        #[cfg(not(target_arch = "wasm32"))]
        return self.fake.ddata_get(key, &cons, timeout_ms(timeout));
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
        #[cfg(target_arch = "wasm32")]
        return wasm::ddata_update(key, typ, op, &cons, timeout_ms(timeout));
        #[cfg(not(target_arch = "wasm32"))]
        return self.fake.ddata_update(key, typ, op, &cons, timeout_ms(timeout));
    }

    /// Deletes the distributed data `key` for good: it can never be used again. Errors:
    /// [`Code::Timeout`], [`Code::Deleted`], [`Code::BadRequest`].
    pub fn ddata_delete(&mut self, key: &str, cons: impl fmt::Display, timeout: Option<Duration>) -> Result<(), Error> {
        let cons = cons.to_string();
        #[cfg(target_arch = "wasm32")]
        return wasm::ddata_delete(key, &cons, timeout_ms(timeout));
        #[cfg(not(target_arch = "wasm32"))]
        return self.fake.ddata_delete(key, &cons, timeout_ms(timeout));
    }

    /// Has the host deliver the value of `key` as a message of kind
    /// [`MessageKind::Changed`] (the sender is the key, the message its value as JSON)
    /// whenever it changes, and once soon after subscribing if it exists. The subscription
    /// belongs to the entity: it is saved with its state and renewed at its next activation.
    pub fn subscribe(&mut self, key: &str) -> Result<(), Error> {
        #[cfg(target_arch = "wasm32")]
        return wasm::subscribe(key);
        #[cfg(not(target_arch = "wasm32"))]
        return self.fake.subscribe(key);
    }

    /// Ends the subscription to `key` (`Ok` whether there was one or not).
    pub fn unsubscribe(&mut self, key: &str) -> Result<(), Error> {
        #[cfg(target_arch = "wasm32")]
        return wasm::unsubscribe(key);
        #[cfg(not(target_arch = "wasm32"))]
        return self.fake.unsubscribe(key);
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
        #[cfg(target_arch = "wasm32")]
        return wasm::timer_start(name, msg, delay_ms, interval_ms);
        #[cfg(not(target_arch = "wasm32"))]
        return self.fake.timer_start(name, msg, delay_ms, interval_ms);
    }

    /// Cancels the timer `name`: `true` if it was running. A message of the timer already
    /// queued is not delivered.
    pub fn cancel_timer(&mut self, name: &str) -> bool {
        #[cfg(target_arch = "wasm32")]
        return wasm::timer_cancel(name);
        #[cfg(not(target_arch = "wasm32"))]
        return self.fake.timer_cancel(name);
    }

    /// The host's wall clock: nanoseconds since 1970-01-01 UTC.
    pub fn now_wall(&mut self) -> i64 {
        #[cfg(target_arch = "wasm32")]
        return wasm::now(0);
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.fake.call();
            self.fake.wall
        }
    }

    /// The host's monotonic clock in nanoseconds: only differences mean anything, and it
    /// does not go back within an incarnation.
    pub fn now_monotonic(&mut self) -> i64 {
        #[cfg(target_arch = "wasm32")]
        return wasm::now(1);
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.fake.call();
            self.fake.mono
        }
    }

    /// Fills `buf` with random bytes from the host (cryptographically strong on a real
    /// host; seeded in a [`Harness`]). The WASI random source, by contrast, is
    /// deterministic.
    pub fn random(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(MAX_RANDOM) {
            #[cfg(target_arch = "wasm32")]
            wasm::random(chunk);
            #[cfg(not(target_arch = "wasm32"))]
            self.fake.random(chunk);
        }
    }

    /// Adds an event with that name (cut at 256 bytes) to the trace span of the current
    /// message.
    pub fn trace_event(&mut self, name: &str) {
        #[cfg(target_arch = "wasm32")]
        wasm::trace_event(name);
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.fake.call();
            let mut end = name.len().min(256);
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            self.fake.traces.push(name[..end].to_string());
        }
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

// Typed handles on distributed data. Each holds the context and the key; its operations
// build the ABI's operation text, call ddata_update or ddata_get and read the JSON value.
macro_rules! ddata_handle {
    ($(#[$m:meta])* $name:ident, $typ:literal) => {
        $(#[$m])*
        ///
        /// Reads treat a key that does not exist ([`Code::NotFound`]) as the empty value.
        /// Every operation uses the host's default timeout unless
        /// [`timeout`](Self::timeout) sets one.
        pub struct $name<'a> {
            ctx: &'a mut Context,
            key: String,
            timeout: Option<Duration>,
        }

        impl<'a> $name<'a> {
            /// The data type's name in the ABI.
            pub const TYPE: &'static str = $typ;

            fn new(ctx: &'a mut Context, key: &str) -> Self {
                $name { ctx, key: key.to_string(), timeout: None }
            }

            /// Sets the timeout of this handle's reads and writes (at most the current
            /// message's deadline).
            pub fn timeout(mut self, timeout: Duration) -> Self {
                self.timeout = Some(timeout);
                self
            }

            /// The key.
            pub fn key(&self) -> &str {
                &self.key
            }

            /// Deletes the key for good (see [`Context::ddata_delete`]).
            pub fn delete(&mut self, cons: Consistency) -> Result<(), Error> {
                self.ctx.ddata_delete(&self.key, cons, self.timeout)
            }

            fn update(&mut self, op: &str, cons: Consistency) -> Result<Json, Error> {
                let v = self.ctx.ddata_update(&self.key, $typ, op, cons, self.timeout)?;
                Json::parse(&v)
            }

            /// The value as JSON, `None` if the key does not exist.
            fn read(&mut self, cons: Consistency) -> Result<Option<Json>, Error> {
                match self.ctx.ddata_get(&self.key, cons, self.timeout) {
                    Ok(v) => Json::parse(&v).map(Some),
                    Err(e) if e.code() == Code::NotFound => Ok(None),
                    Err(e) => Err(e),
                }
            }

            fn want<T>(&self, v: Option<T>, what: &str, json: &Json) -> Result<T, Error> {
                v.ok_or_else(|| {
                    Error::with_code(
                        Code::TypeMismatch,
                        format!("shardhost: ddata key {:?} ({}): want {}, got {}", self.key, $typ, what, json),
                    )
                })
            }
        }
    };
}

/// A map key in an operation is one word: not empty, without spaces.
fn map_key(key: &str) -> Result<&str, Error> {
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Err(Error::with_code(Code::BadRequest, format!("shardhost: map key {:?}: want one word", key)));
    }
    Ok(key)
}

ddata_handle!(
    /// A grow-only counter (`gcounter`), from [`Context::g_counter`].
    GCounter,
    "gcounter"
);

impl GCounter<'_> {
    /// Adds `n` and returns the new value.
    pub fn incr(&mut self, n: u64, cons: Consistency) -> Result<i64, Error> {
        let v = self.update(&format!("incr {}", n), cons)?;
        self.want(v.as_i64(), "a number", &v)
    }

    /// The value (0 if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<i64, Error> {
        match self.read(cons)? {
            None => Ok(0),
            Some(v) => self.want(v.as_i64(), "a number", &v),
        }
    }
}

ddata_handle!(
    /// A counter that goes up and down (`pncounter`), from [`Context::pn_counter`].
    PNCounter,
    "pncounter"
);

impl PNCounter<'_> {
    /// Adds `n` and returns the new value.
    pub fn incr(&mut self, n: u64, cons: Consistency) -> Result<i64, Error> {
        let v = self.update(&format!("incr {}", n), cons)?;
        self.want(v.as_i64(), "a number", &v)
    }

    /// Subtracts `n` and returns the new value.
    pub fn decr(&mut self, n: u64, cons: Consistency) -> Result<i64, Error> {
        let v = self.update(&format!("decr {}", n), cons)?;
        self.want(v.as_i64(), "a number", &v)
    }

    /// The value (0 if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<i64, Error> {
        match self.read(cons)? {
            None => Ok(0),
            Some(v) => self.want(v.as_i64(), "a number", &v),
        }
    }
}

ddata_handle!(
    /// A grow-only set of strings (`gset`), from [`Context::g_set`]. The host trims an
    /// element's surrounding whitespace; an empty element is a bad request.
    GSet,
    "gset"
);

impl GSet<'_> {
    /// Adds `elem` and returns the new elements, sorted.
    pub fn add(&mut self, elem: &str, cons: Consistency) -> Result<Vec<String>, Error> {
        let v = self.update(&format!("add {}", elem), cons)?;
        self.want(v.as_string_array(), "an array of strings", &v)
    }

    /// The elements, sorted (none if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<Vec<String>, Error> {
        match self.read(cons)? {
            None => Ok(Vec::new()),
            Some(v) => self.want(v.as_string_array(), "an array of strings", &v),
        }
    }
}

ddata_handle!(
    /// An observed-remove set of strings (`orset`), from [`Context::or_set`]. The host
    /// trims an element's surrounding whitespace; an empty element is a bad request.
    ORSet,
    "orset"
);

impl ORSet<'_> {
    /// Adds `elem` and returns the new elements, sorted.
    pub fn add(&mut self, elem: &str, cons: Consistency) -> Result<Vec<String>, Error> {
        let v = self.update(&format!("add {}", elem), cons)?;
        self.want(v.as_string_array(), "an array of strings", &v)
    }

    /// Removes `elem` and returns the new elements, sorted.
    pub fn remove(&mut self, elem: &str, cons: Consistency) -> Result<Vec<String>, Error> {
        let v = self.update(&format!("remove {}", elem), cons)?;
        self.want(v.as_string_array(), "an array of strings", &v)
    }

    /// Removes every element.
    pub fn clear(&mut self, cons: Consistency) -> Result<(), Error> {
        self.update("clear", cons).map(|_| ())
    }

    /// The elements, sorted (none if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<Vec<String>, Error> {
        match self.read(cons)? {
            None => Ok(Vec::new()),
            Some(v) => self.want(v.as_string_array(), "an array of strings", &v),
        }
    }
}

ddata_handle!(
    /// A last-writer-wins map from words to strings (`lwwmap`), from [`Context::lww_map`].
    /// A map key is one word (no spaces); a value is the rest of the operation's text.
    LWWMap,
    "lwwmap"
);

impl LWWMap<'_> {
    /// Sets `k` to `v` and returns the new map.
    pub fn put(&mut self, k: &str, v: &str, cons: Consistency) -> Result<BTreeMap<String, String>, Error> {
        let v = self.update(&format!("put {} {}", map_key(k)?, v), cons)?;
        self.want(v.as_string_map(), "an object of strings", &v)
    }

    /// Removes `k` and returns the new map.
    pub fn remove(&mut self, k: &str, cons: Consistency) -> Result<BTreeMap<String, String>, Error> {
        let v = self.update(&format!("remove {}", map_key(k)?), cons)?;
        self.want(v.as_string_map(), "an object of strings", &v)
    }

    /// The map (empty if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<BTreeMap<String, String>, Error> {
        match self.read(cons)? {
            None => Ok(BTreeMap::new()),
            Some(v) => self.want(v.as_string_map(), "an object of strings", &v),
        }
    }
}

ddata_handle!(
    /// A map from words to counters (`pncountermap`), from [`Context::pn_counter_map`].
    PNCounterMap,
    "pncountermap"
);

impl PNCounterMap<'_> {
    /// Adds `n` to the counter `k` and returns the new map.
    pub fn incr(&mut self, k: &str, n: u64, cons: Consistency) -> Result<BTreeMap<String, i64>, Error> {
        let v = self.update(&format!("incr {} {}", map_key(k)?, n), cons)?;
        self.want(v.as_number_map(), "an object of numbers", &v)
    }

    /// Subtracts `n` from the counter `k` and returns the new map.
    pub fn decr(&mut self, k: &str, n: u64, cons: Consistency) -> Result<BTreeMap<String, i64>, Error> {
        let v = self.update(&format!("decr {} {}", map_key(k)?, n), cons)?;
        self.want(v.as_number_map(), "an object of numbers", &v)
    }

    /// Removes the counter `k` and returns the new map.
    pub fn remove(&mut self, k: &str, cons: Consistency) -> Result<BTreeMap<String, i64>, Error> {
        let v = self.update(&format!("remove {}", map_key(k)?), cons)?;
        self.want(v.as_number_map(), "an object of numbers", &v)
    }

    /// The map (empty if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<BTreeMap<String, i64>, Error> {
        match self.read(cons)? {
            None => Ok(BTreeMap::new()),
            Some(v) => self.want(v.as_number_map(), "an object of numbers", &v),
        }
    }
}

ddata_handle!(
    /// A map from words to sets of strings (`ormultimap`), from [`Context::or_multi_map`].
    ORMultiMap,
    "ormultimap"
);

impl ORMultiMap<'_> {
    /// Adds `v` to the set of `k` and returns the new map.
    pub fn add(&mut self, k: &str, v: &str, cons: Consistency) -> Result<BTreeMap<String, Vec<String>>, Error> {
        let v = self.update(&format!("add {} {}", map_key(k)?, v), cons)?;
        self.want(v.as_set_map(), "an object of arrays of strings", &v)
    }

    /// Removes `v` from the set of `k` and returns the new map.
    pub fn remove(&mut self, k: &str, v: &str, cons: Consistency) -> Result<BTreeMap<String, Vec<String>>, Error> {
        let v = self.update(&format!("remove {} {}", map_key(k)?, v), cons)?;
        self.want(v.as_set_map(), "an object of arrays of strings", &v)
    }

    /// Removes `k` and its set, and returns the new map.
    pub fn delete_key(&mut self, k: &str, cons: Consistency) -> Result<BTreeMap<String, Vec<String>>, Error> {
        let v = self.update(&format!("delete {}", map_key(k)?), cons)?;
        self.want(v.as_set_map(), "an object of arrays of strings", &v)
    }

    /// The map (empty if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<BTreeMap<String, Vec<String>>, Error> {
        match self.read(cons)? {
            None => Ok(BTreeMap::new()),
            Some(v) => self.want(v.as_set_map(), "an object of arrays of strings", &v),
        }
    }
}

ddata_handle!(
    /// A last-writer-wins register holding a string (`lwwregister`), from
    /// [`Context::lww_register`].
    LWWRegister,
    "lwwregister"
);

impl LWWRegister<'_> {
    /// Sets the value and returns the new one.
    pub fn set(&mut self, value: &str, cons: Consistency) -> Result<Option<String>, Error> {
        let v = self.update(&format!("set {}", value), cons)?;
        self.want(v.as_optional_string(), "a string or null", &v)
    }

    /// The value: `None` if it was never set (or the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<Option<String>, Error> {
        match self.read(cons)? {
            None => Ok(None),
            Some(v) => self.want(v.as_optional_string(), "a string or null", &v),
        }
    }
}

ddata_handle!(
    /// A flag that can only be switched on (`flag`), from [`Context::flag`].
    Flag,
    "flag"
);

impl Flag<'_> {
    /// Switches the flag on (it stays on) and returns the new value, `true`.
    pub fn enable(&mut self, cons: Consistency) -> Result<bool, Error> {
        let v = self.update("enable", cons)?;
        self.want(v.as_bool(), "a boolean", &v)
    }

    /// Whether the flag is on (`false` if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<bool, Error> {
        match self.read(cons)? {
            None => Ok(false),
            Some(v) => self.want(v.as_bool(), "a boolean", &v),
        }
    }
}

/// A JSON value, as distributed data values come: enough JSON to read and write them
/// without a dependency. A number keeps its text (counters may exceed 64 bits); `Display`
/// writes compact JSON.
///
/// ```
/// use shardhost::Json;
///
/// let v = Json::parse(r#"{"b": ["x", "y"], "a": 12}"#).unwrap();
/// assert_eq!(v.get("a").and_then(Json::as_i64), Some(12));
/// assert_eq!(v.get("b").and_then(Json::as_string_array), Some(vec!["x".to_string(), "y".to_string()]));
/// assert_eq!(v.to_string(), r#"{"a":12,"b":["x","y"]}"#);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Json {
    Null,
    Bool(bool),
    /// A number as its JSON text.
    Number(String),
    String(String),
    Array(Vec<Json>),
    /// An object; its keys sorted (a repeated key keeps the last value).
    Object(BTreeMap<String, Json>),
}

impl Json {
    /// Parses one JSON value (surrounding whitespace allowed).
    pub fn parse(text: &str) -> Result<Json, Error> {
        let mut p = JsonParser { b: text.as_bytes(), i: 0 };
        let v = p.value(0)?;
        p.ws();
        if p.i != p.b.len() {
            return Err(p.err("trailing characters"));
        }
        Ok(v)
    }

    /// A number from an integer.
    pub fn from_i64(n: i64) -> Json {
        Json::Number(n.to_string())
    }

    /// The integer of a number that is one and fits in an i64.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Json::Number(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// The text of a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value of a boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The elements of an array.
    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The entries of an object.
    pub fn as_object(&self) -> Option<&BTreeMap<String, Json>> {
        match self {
            Json::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The value of `key` in an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.as_object()?.get(key)
    }

    /// The strings of an array of strings (a set's value).
    pub fn as_string_array(&self) -> Option<Vec<String>> {
        self.as_array()?.iter().map(|v| v.as_str().map(String::from)).collect()
    }

    /// A string, or `None` for null, as a register's value (`None` for other values).
    pub fn as_optional_string(&self) -> Option<Option<String>> {
        match self {
            Json::Null => Some(None),
            Json::String(s) => Some(Some(s.clone())),
            _ => None,
        }
    }

    fn as_map<T>(&self, f: impl Fn(&Json) -> Option<T>) -> Option<BTreeMap<String, T>> {
        self.as_object()?.iter().map(|(k, v)| f(v).map(|v| (k.clone(), v))).collect()
    }

    /// An object of strings (an lwwmap's value).
    pub fn as_string_map(&self) -> Option<BTreeMap<String, String>> {
        self.as_map(|v| v.as_str().map(String::from))
    }

    /// An object of integers (a pncountermap's value).
    pub fn as_number_map(&self) -> Option<BTreeMap<String, i64>> {
        self.as_map(Json::as_i64)
    }

    /// An object of arrays of strings (an ormultimap's value).
    pub fn as_set_map(&self) -> Option<BTreeMap<String, Vec<String>>> {
        self.as_map(Json::as_string_array)
    }

    /// An array of strings.
    pub fn string_array<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Json {
        Json::Array(items.into_iter().map(|s| Json::String(s.as_ref().to_string())).collect())
    }
}

fn write_json_string(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
            c => write!(f, "{}", c)?,
        }
    }
    f.write_str("\"")
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{}", b),
            Json::Number(n) => f.write_str(n),
            Json::String(s) => write_json_string(f, s),
            Json::Array(a) => {
                f.write_str("[")?;
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{}", v)?;
                }
                f.write_str("]")
            }
            Json::Object(o) => {
                f.write_str("{")?;
                for (i, (k, v)) in o.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write_json_string(f, k)?;
                    write!(f, ":{}", v)?;
                }
                f.write_str("}")
            }
        }
    }
}

struct JsonParser<'a> {
    b: &'a [u8],
    i: usize,
}

impl JsonParser<'_> {
    fn err(&self, what: &str) -> Error {
        Error::new(format!("shardhost: bad JSON at byte {}: {}", self.i, what))
    }

    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn literal(&mut self, word: &str, v: Json) -> Result<Json, Error> {
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err("unknown literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, Error> {
        if depth > 128 {
            return Err(self.err("nested too deeply"));
        }
        self.ws();
        match self.b.get(self.i) {
            None => Err(self.err("unexpected end")),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'"') => self.string().map(Json::String),
            Some(b'[') => {
                self.i += 1;
                let mut a = Vec::new();
                if self.eat(b']') {
                    return Ok(Json::Array(a));
                }
                loop {
                    a.push(self.value(depth + 1)?);
                    if self.eat(b']') {
                        return Ok(Json::Array(a));
                    }
                    if !self.eat(b',') {
                        return Err(self.err("want , or ]"));
                    }
                }
            }
            Some(b'{') => {
                self.i += 1;
                let mut o = BTreeMap::new();
                if self.eat(b'}') {
                    return Ok(Json::Object(o));
                }
                loop {
                    self.ws();
                    if self.b.get(self.i) != Some(&b'"') {
                        return Err(self.err("want a key"));
                    }
                    let k = self.string()?;
                    if !self.eat(b':') {
                        return Err(self.err("want :"));
                    }
                    let v = self.value(depth + 1)?;
                    o.insert(k, v);
                    if self.eat(b'}') {
                        return Ok(Json::Object(o));
                    }
                    if !self.eat(b',') {
                        return Err(self.err("want , or }"));
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.i < self.b.len() && self.b[self.i].is_ascii_digit() {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<Json, Error> {
        let start = self.i;
        if self.b[self.i] == b'-' {
            self.i += 1;
        }
        let int_start = self.i;
        let n = self.digits();
        if n == 0 || (n > 1 && self.b[int_start] == b'0') {
            return Err(self.err("bad number"));
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.err("bad number"));
            }
        }
        if matches!(self.b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("bad number"));
            }
        }
        // Only ASCII was consumed, so this is a char boundary.
        Ok(Json::Number(String::from_utf8_lossy(&self.b[start..self.i]).into_owned()))
    }

    fn hex4(&mut self) -> Result<u32, Error> {
        let h = self.b.get(self.i..self.i + 4).ok_or_else(|| self.err("short \\u escape"))?;
        let s = std::str::from_utf8(h).map_err(|_| self.err("bad \\u escape"))?;
        let v = u32::from_str_radix(s, 16).map_err(|_| self.err("bad \\u escape"))?;
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, Error> {
        self.i += 1; // the opening quote
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = *self.b.get(self.i).ok_or_else(|| self.err("unterminated string"))?;
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = *self.b.get(self.i).ok_or_else(|| self.err("unterminated string"))?;
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xD800..0xDC00).contains(&cp) && self.b[self.i..].starts_with(b"\\u") {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                } else {
                                    self.i = save;
                                }
                            }
                            char::from_u32(cp).unwrap_or('\u{fffd}')
                        }
                        _ => return Err(self.err("bad escape")),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                c if c < 0x20 => return Err(self.err("control character in string")),
                c => out.push(c),
            }
        }
        // The input was a &str and escapes add whole characters: valid UTF-8.
        String::from_utf8(out).map_err(|_| self.err("bad UTF-8"))
    }
}

/// Returns the shard of an entity: the 64-bit FNV-1a hash of the entity ID's UTF-8 bytes
/// modulo `number_of_shards`, exactly as every host computes it (abi/SPEC.md).
///
/// # Panics
/// If `number_of_shards` is 0.
pub fn shard_id(entity_id: &str, number_of_shards: u32) -> u32 {
    assert!(number_of_shards > 0, "shardhost: number of shards must be positive");
    (fnv1a_64(entity_id.as_bytes()) % u64::from(number_of_shards)) as u32
}

fn fnv1a_64(b: &[u8]) -> u64 {
    let mut h: u64 = 14695981039346656037;
    for &c in b {
        h ^= u64::from(c);
        h = h.wrapping_mul(1099511628211);
    }
    h
}

/// Holds the one entity of an instance and its context, creating it when first needed.
/// The wasm exports and the [`Harness`] both go through it.
struct Dispatcher<E> {
    live: Option<(E, Context)>,
}

impl<E: Entity> Dispatcher<E> {
    const fn new() -> Self {
        Dispatcher { live: None }
    }

    /// The entity and its context; `create` makes them first if there are none yet.
    fn ensure(&mut self, create: impl FnOnce() -> (E, Context)) -> (&mut E, &mut Context) {
        let (e, ctx) = self.live.get_or_insert_with(create);
        (e, ctx)
    }

    /// The entity's guest-level snapshot: `None` if it keeps none or does not exist yet (no
    /// message and no restore), an error if it fails or is over [`MAX_SNAPSHOT_SIZE`].
    fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
        let (entity, _) = self.live.as_ref()?;
        match entity.snapshot()? {
            Ok(state) if state.len() > MAX_SNAPSHOT_SIZE => Some(Err(Error::new(format!(
                "shardhost: snapshot of {} bytes is over the cap of {} bytes (4 MiB)",
                state.len(),
                MAX_SNAPSHOT_SIZE
            )))),
            r => Some(r),
        }
    }

    /// Creates the entity with `create` and has it take up `state`. Only before the entity
    /// exists; if it refuses the state, there is still no entity afterwards.
    fn restore(&mut self, state: &[u8], create: impl FnOnce() -> (E, Context)) -> Result<(), Error> {
        if self.live.is_some() {
            return Err(Error::new(
                "shardhost: restore after the entity was created: state is restored once, before the first message",
            ));
        }
        let (mut entity, ctx) = create();
        entity.restore(state)?;
        self.live = Some((entity, ctx));
        Ok(())
    }
}

/// The buffer `shardhost_alloc` hands out: one `Vec`, grown when a larger message comes
/// and reused otherwise.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
struct Inbox {
    buf: Vec<u8>,
}

#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
impl Inbox {
    const fn new() -> Self {
        Inbox { buf: Vec::new() }
    }

    /// Returns the address of a buffer of at least `size` bytes, or null when memory
    /// cannot grow (the ABI's "out of memory").
    fn alloc(&mut self, size: u32) -> *mut u8 {
        let size = (size as usize).max(1);
        if self.buf.len() < size {
            self.buf.clear();
            if self.buf.try_reserve_exact(size).is_err() {
                return std::ptr::null_mut();
            }
            self.buf.resize(size, 0);
        }
        self.buf.as_mut_ptr()
    }

    /// The message of `len` bytes at `ptr`, if that lies in the buffer alloc returned.
    fn message(&self, ptr: *const u8, len: u32) -> Option<&[u8]> {
        let len = len as usize;
        if len > self.buf.len() || (len > 0 && ptr != self.buf.as_ptr()) {
            return None;
        }
        Some(&self.buf[..len])
    }
}

/// Turns a panic's payload and location into one line: "panic: MESSAGE at FILE:LINE:COL".
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn panic_line(payload: &(dyn std::any::Any + Send), location: Option<&std::panic::Location<'_>>) -> String {
    let msg = if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.as_str()
    } else {
        "(no message)"
    };
    match location {
        Some(l) => format!("panic: {} at {}:{}:{}", msg, l.file(), l.line(), l.column()),
        None => format!("panic: {}", msg),
    }
}

/// Defines the exports of ABI v1 for an entity type: `shardhost::entity!(Type, factory)`,
/// where `factory` is a closure or function `fn(&str) -> Type` that creates the entity
/// with the given ID. It is called once per instance: when the host restores a
/// guest-level snapshot ([`Entity::restore`]), or else at activation or the first message.
///
/// The exports are `shardhost_abi_v1`, `shardhost_alloc`, `shardhost_receive`,
/// `shardhost_snapshot` and `shardhost_restore`, which call [`Entity::snapshot`] and
/// [`Entity::restore`] (an entity that keeps their defaults gets transparent snapshots),
/// and `shardhost_on_activate` and `shardhost_on_passivate`, which call
/// [`Entity::on_activate`] and [`Entity::on_passivate`].
///
/// ```
/// # use shardhost::{Context, Entity, Error};
/// struct Echo { id: String }
///
/// impl Echo {
///     fn new(id: &str) -> Echo { Echo { id: id.to_string() } }
/// }
///
/// impl Entity for Echo {
///     fn receive(&mut self, _ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
///         Ok([self.id.as_bytes(), b": ", msg].concat())
///     }
/// }
///
/// shardhost::entity!(Echo, |id: &str| Echo::new(id));
/// ```
///
/// Use it once, in the crate built as the `cdylib`. On targets other than wasm32 it
/// defines nothing but still type-checks the factory, so entity code is unit-tested
/// natively with [`Harness`].
#[macro_export]
macro_rules! entity {
    ($ty:ty, $factory:expr $(,)?) => {
        const _: () = {
            #[allow(dead_code)]
            fn __shardhost_create(id: &str) -> ::std::boxed::Box<dyn $crate::Entity> {
                let e: $ty = ($factory)(id);
                ::std::boxed::Box::new(e)
            }

            #[cfg(target_arch = "wasm32")]
            #[no_mangle]
            pub extern "C" fn shardhost_abi_v1() {}

            #[cfg(target_arch = "wasm32")]
            #[no_mangle]
            pub extern "C" fn shardhost_alloc(size: u32) -> *mut u8 {
                $crate::__private::alloc(size)
            }

            #[cfg(target_arch = "wasm32")]
            #[no_mangle]
            pub extern "C" fn shardhost_receive(ptr: *const u8, len: u32) -> i32 {
                $crate::__private::receive(ptr, len, __shardhost_create)
            }

            #[cfg(target_arch = "wasm32")]
            #[no_mangle]
            pub extern "C" fn shardhost_snapshot() -> i32 {
                $crate::__private::snapshot()
            }

            #[cfg(target_arch = "wasm32")]
            #[no_mangle]
            pub extern "C" fn shardhost_restore(ptr: *const u8, len: u32) -> i32 {
                $crate::__private::restore(ptr, len, __shardhost_create)
            }

            #[cfg(target_arch = "wasm32")]
            #[no_mangle]
            pub extern "C" fn shardhost_on_activate() -> i32 {
                $crate::__private::on_activate(__shardhost_create)
            }

            #[cfg(target_arch = "wasm32")]
            #[no_mangle]
            pub extern "C" fn shardhost_on_passivate() -> i32 {
                $crate::__private::on_passivate()
            }
        };
    };
}

/// What the [`entity!`] macro expands to calls; not part of the SDK's API.
#[doc(hidden)]
#[cfg(target_arch = "wasm32")]
pub mod __private {
    pub use crate::wasm::{alloc, on_activate, on_passivate, receive, restore, snapshot};
}

/// The guest side of the ABI on wasm32: host imports, the state of the instance, and the
/// bodies of the exports.
#[cfg(target_arch = "wasm32")]
mod wasm {
    use super::{panic_line, Code, Context, Dispatcher, Entity, Error, Inbox, LogLevel, MessageKind};
    use std::cell::RefCell;

    const MSG_NOT_IN_BUFFER: &str = "shardhost: message not in the buffer shardhost_alloc returned";
    const STATE_NOT_IN_BUFFER: &str = "shardhost: state not in the buffer shardhost_alloc returned";

    // Unused imports are dropped by the linker: a module imports only what it calls.
    #[link(wasm_import_module = "shardhost")]
    extern "C" {
        fn reply(ptr: *const u8, len: u32);
        fn entity_id(ptr: *mut u8, cap: u32) -> u32;
        fn entity_type(ptr: *mut u8, cap: u32) -> u32;
        #[link_name = "log"]
        fn host_log(level: i32, ptr: *const u8, len: u32);
        #[link_name = "passivate"]
        fn host_passivate();
        #[link_name = "result"]
        fn host_result(ptr: *mut u8, cap: u32) -> u32;
        #[link_name = "message_kind"]
        fn host_message_kind() -> i32;
        #[link_name = "sender"]
        fn host_sender(ptr: *mut u8, cap: u32) -> u32;
        #[link_name = "tell"]
        fn host_tell(tp: *const u8, tl: u32, ip: *const u8, il: u32, mp: *const u8, ml: u32) -> i32;
        #[link_name = "ask"]
        fn host_ask(tp: *const u8, tl: u32, ip: *const u8, il: u32, mp: *const u8, ml: u32, timeout_ms: i32) -> i32;
        #[link_name = "forward"]
        fn host_forward(tp: *const u8, tl: u32, ip: *const u8, il: u32) -> i32;
        #[link_name = "ddata_get"]
        fn host_ddata_get(kp: *const u8, kl: u32, cp: *const u8, cl: u32, timeout_ms: i32) -> i32;
        #[link_name = "ddata_update"]
        fn host_ddata_update(
            kp: *const u8,
            kl: u32,
            tp: *const u8,
            tl: u32,
            op: *const u8,
            ol: u32,
            cp: *const u8,
            cl: u32,
            timeout_ms: i32,
        ) -> i32;
        #[link_name = "ddata_delete"]
        fn host_ddata_delete(kp: *const u8, kl: u32, cp: *const u8, cl: u32, timeout_ms: i32) -> i32;
        #[link_name = "ddata_subscribe"]
        fn host_ddata_subscribe(kp: *const u8, kl: u32) -> i32;
        #[link_name = "ddata_unsubscribe"]
        fn host_ddata_unsubscribe(kp: *const u8, kl: u32) -> i32;
        #[link_name = "timer_start"]
        fn host_timer_start(np: *const u8, nl: u32, mp: *const u8, ml: u32, delay_ms: i64, interval_ms: i64) -> i32;
        #[link_name = "timer_cancel"]
        fn host_timer_cancel(np: *const u8, nl: u32) -> i32;
        #[link_name = "now"]
        fn host_now(clock: i32) -> i64;
        #[link_name = "random"]
        fn host_random(ptr: *mut u8, len: u32);
        #[link_name = "trace_event"]
        fn host_trace_event(ptr: *const u8, len: u32);
    }

    #[repr(C)]
    struct Ciovec {
        buf: *const u8,
        len: u32,
    }

    // Only used by the panic hook, so that the host attaches the panic's text to the error.
    #[link(wasm_import_module = "wasi_snapshot_preview1")]
    extern "C" {
        fn fd_write(fd: u32, iovs: *const Ciovec, iovs_len: u32, nwritten: *mut u32) -> u32;
    }

    const STATUS_OK: i32 = 0;
    const STATUS_ERROR: i32 = 1;
    const STATUS_NO_SNAPSHOT: i32 = 2;

    type Create = fn(&str) -> Box<dyn Entity>;

    struct Guest {
        inbox: Inbox,
        dispatcher: Dispatcher<Box<dyn Entity>>,
    }

    // One instance hosts one entity and is never entered concurrently; the RefCell turns
    // an (impossible) re-entry into a trap instead of undefined behaviour.
    thread_local! {
        static GUEST: RefCell<Guest> = const {
            RefCell::new(Guest { inbox: Inbox::new(), dispatcher: Dispatcher::new() })
        };
    }

    pub fn alloc(size: u32) -> *mut u8 {
        GUEST.with(|g| g.borrow_mut().inbox.alloc(size))
    }

    /// Replies with an outcome and returns its status.
    fn status(r: Result<Vec<u8>, Error>) -> i32 {
        match r {
            Ok(out) => {
                send_reply(&out);
                STATUS_OK
            }
            Err(e) => {
                send_reply(e.message().as_bytes());
                STATUS_ERROR
            }
        }
    }

    pub fn receive(ptr: *const u8, len: u32, create: Create) -> i32 {
        GUEST.with(|g| {
            let g = &mut *g.borrow_mut();
            let msg = match g.inbox.message(ptr, len) {
                Some(m) => m,
                None => {
                    send_reply(MSG_NOT_IN_BUFFER.as_bytes());
                    return STATUS_ERROR;
                }
            };
            let (entity, ctx) = g.dispatcher.ensure(|| start(create));
            let r = entity.receive(ctx, msg);
            // The kind and sender read in this message are forgotten: the next message has
            // its own, and outside receive the sender is empty.
            ctx.kind.set(None);
            *ctx.sender.borrow_mut() = None;
            status(r)
        })
    }

    pub fn on_activate(create: Create) -> i32 {
        GUEST.with(|g| {
            let g = &mut *g.borrow_mut();
            let (entity, ctx) = g.dispatcher.ensure(|| start(create));
            status(entity.on_activate(ctx).map(|()| Vec::new()))
        })
    }

    pub fn on_passivate() -> i32 {
        GUEST.with(|g| {
            if let Some((entity, ctx)) = &mut g.borrow_mut().dispatcher.live {
                entity.on_passivate(ctx);
            }
            STATUS_OK
        })
    }

    pub fn snapshot() -> i32 {
        GUEST.with(|g| match g.borrow().dispatcher.snapshot() {
            None => STATUS_NO_SNAPSHOT,
            Some(Ok(state)) => {
                // Replied even when empty, so that the state is exactly these bytes.
                unsafe { reply(state.as_ptr(), state.len() as u32) }
                STATUS_OK
            }
            Some(Err(e)) => {
                send_reply(e.message().as_bytes());
                STATUS_ERROR
            }
        })
    }

    pub fn restore(ptr: *const u8, len: u32, create: Create) -> i32 {
        GUEST.with(|g| {
            let g = &mut *g.borrow_mut();
            let state = match g.inbox.message(ptr, len) {
                Some(s) => s,
                None => {
                    send_reply(STATE_NOT_IN_BUFFER.as_bytes());
                    return STATUS_ERROR;
                }
            };
            let result = g.dispatcher.restore(state, || start(create));
            // A state may be up to 4 MiB, more than messages need: let the allocator have
            // the buffer back (the entity has copied what it keeps).
            g.inbox = Inbox::new();
            status(result.map(|()| Vec::new()))
        })
    }

    /// Creates the instance's entity and its context, first installing the panic hook.
    fn start(create: Create) -> (Box<dyn Entity>, Context) {
        std::panic::set_hook(Box::new(|info| {
            let line = panic_line(info.payload(), info.location());
            log(LogLevel::Error, &line);
            write_stderr(&line);
        }));
        let ctx = Context {
            entity_id: String::from_utf8_lossy(&read_bytes(entity_id)).into_owned(),
            entity_type: String::from_utf8_lossy(&read_bytes(entity_type)).into_owned(),
            kind: std::cell::Cell::new(None),
            sender: RefCell::new(None),
        };
        (create(&ctx.entity_id), ctx)
    }

    pub fn passivate() {
        unsafe { host_passivate() }
    }

    fn send_reply(b: &[u8]) {
        // An empty reply needs no call: the host starts every message with an empty one.
        if !b.is_empty() {
            unsafe { reply(b.as_ptr(), b.len() as u32) }
        }
    }

    pub fn log(level: LogLevel, msg: &str) {
        unsafe { host_log(level as i32, msg.as_ptr(), msg.len() as u32) }
    }

    fn write_stderr(line: &str) {
        let iovs = [
            Ciovec { buf: line.as_ptr(), len: line.len() as u32 },
            Ciovec { buf: b"\n".as_ptr(), len: 1 },
        ];
        let mut n = 0u32;
        unsafe { fd_write(2, iovs.as_ptr(), iovs.len() as u32, &mut n) };
    }

    /// Calls a host function of the (ptr, cap) -> len shape until the value fits.
    fn read_bytes(f: unsafe extern "C" fn(*mut u8, u32) -> u32) -> Vec<u8> {
        let mut small = [0u8; 128];
        let n = unsafe { f(small.as_mut_ptr(), small.len() as u32) } as usize;
        if n <= small.len() {
            return small[..n].to_vec();
        }
        let mut buf = vec![0u8; n];
        loop {
            let m = unsafe { f(buf.as_mut_ptr(), buf.len() as u32) } as usize;
            if m <= buf.len() {
                buf.truncate(m);
                return buf;
            }
            buf = vec![0u8; m];
        }
    }

    /// `Ok` for code 0, otherwise the error with the result as its text.
    fn check(code: i32) -> Result<(), Error> {
        match Code::from_number(code) {
            None => Ok(()),
            Some(c) => Err(Error::with_code(c, String::from_utf8_lossy(&read_bytes(host_result)).into_owned())),
        }
    }

    /// The result as text, after code 0.
    fn result_text() -> String {
        let b = read_bytes(host_result);
        match String::from_utf8(b) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    pub fn message_kind() -> MessageKind {
        MessageKind::from_number(unsafe { host_message_kind() })
    }

    pub fn sender() -> String {
        String::from_utf8_lossy(&read_bytes(host_sender)).into_owned()
    }

    pub fn tell(typ: &str, id: &str, msg: &[u8]) -> Result<(), Error> {
        check(unsafe {
            host_tell(typ.as_ptr(), typ.len() as u32, id.as_ptr(), id.len() as u32, msg.as_ptr(), msg.len() as u32)
        })
    }

    pub fn ask(typ: &str, id: &str, msg: &[u8], timeout_ms: i32) -> Result<Vec<u8>, Error> {
        check(unsafe {
            host_ask(
                typ.as_ptr(),
                typ.len() as u32,
                id.as_ptr(),
                id.len() as u32,
                msg.as_ptr(),
                msg.len() as u32,
                timeout_ms,
            )
        })?;
        Ok(read_bytes(host_result))
    }

    pub fn forward(typ: &str, id: &str) -> Result<(), Error> {
        check(unsafe { host_forward(typ.as_ptr(), typ.len() as u32, id.as_ptr(), id.len() as u32) })
    }

    pub fn ddata_get(key: &str, cons: &str, timeout_ms: i32) -> Result<String, Error> {
        check(unsafe { host_ddata_get(key.as_ptr(), key.len() as u32, cons.as_ptr(), cons.len() as u32, timeout_ms) })?;
        Ok(result_text())
    }

    pub fn ddata_update(key: &str, typ: &str, op: &str, cons: &str, timeout_ms: i32) -> Result<String, Error> {
        check(unsafe {
            host_ddata_update(
                key.as_ptr(),
                key.len() as u32,
                typ.as_ptr(),
                typ.len() as u32,
                op.as_ptr(),
                op.len() as u32,
                cons.as_ptr(),
                cons.len() as u32,
                timeout_ms,
            )
        })?;
        Ok(result_text())
    }

    pub fn ddata_delete(key: &str, cons: &str, timeout_ms: i32) -> Result<(), Error> {
        check(unsafe { host_ddata_delete(key.as_ptr(), key.len() as u32, cons.as_ptr(), cons.len() as u32, timeout_ms) })
    }

    pub fn subscribe(key: &str) -> Result<(), Error> {
        check(unsafe { host_ddata_subscribe(key.as_ptr(), key.len() as u32) })
    }

    pub fn unsubscribe(key: &str) -> Result<(), Error> {
        check(unsafe { host_ddata_unsubscribe(key.as_ptr(), key.len() as u32) })
    }

    pub fn timer_start(name: &str, msg: &[u8], delay_ms: i64, interval_ms: i64) -> Result<(), Error> {
        check(unsafe { host_timer_start(name.as_ptr(), name.len() as u32, msg.as_ptr(), msg.len() as u32, delay_ms, interval_ms) })
    }

    pub fn timer_cancel(name: &str) -> bool {
        unsafe { host_timer_cancel(name.as_ptr(), name.len() as u32) == 1 }
    }

    pub fn now(clock: i32) -> i64 {
        unsafe { host_now(clock) }
    }

    pub fn random(buf: &mut [u8]) {
        unsafe { host_random(buf.as_mut_ptr(), buf.len() as u32) }
    }

    pub fn trace_event(name: &str) {
        unsafe { host_trace_event(name.as_ptr(), name.len() as u32) }
    }
}

/// A message an entity sent through a [`Harness`] with [`Context::tell`] or
/// [`Context::ask`]. `Display` writes `TYPE/ID MSG` (the message as lossy UTF-8).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The receiver's type.
    pub typ: String,
    /// The receiver's ID.
    pub id: String,
    /// The message.
    pub msg: Vec<u8>,
    /// An ask's timeout (`None`: the host's default; always `None` for a tell).
    pub timeout: Option<Duration>,
}

#[cfg(not(target_arch = "wasm32"))]
impl fmt::Display for Sent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} {}", self.typ, self.id, String::from_utf8_lossy(&self.msg))
    }
}

/// A timer an entity started in a [`Harness`].
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timer {
    /// The timer's name (the sender of its messages).
    pub name: String,
    /// Its message.
    pub msg: Vec<u8>,
    /// The delay before its first message.
    pub delay: Duration,
    /// The interval between its messages, `None` for a timer that fires once.
    pub interval: Option<Duration>,
}

/// What the entity is doing in a [`Harness`] call, for the functions valid only in some.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Receive,
    Activate,
    Passivate,
}

#[cfg(not(target_arch = "wasm32"))]
type AskHandler = Box<dyn FnMut(&str, &str, &[u8]) -> Result<Vec<u8>, Error>>;

/// The fake host of a [`Harness`]: what the entity's [`Context`] calls natively.
#[cfg(not(target_arch = "wasm32"))]
struct Fake {
    phase: Phase,
    kind: MessageKind,
    sender: String,
    /// Host calls made in the current message or hook (a Cell: reading the kind or the
    /// sender is one, through &Context).
    calls: std::cell::Cell<u32>,
    budget: u32,
    /// Whether the kind and the sender were read in the current message (the SDK reads them
    /// from a host once per message).
    kind_read: std::cell::Cell<bool>,
    sender_read: std::cell::Cell<bool>,
    logs: Vec<String>,
    passivate: bool,
    forward: Option<String>,
    tells: Vec<Sent>,
    asks: Vec<Sent>,
    ask_handler: Option<AskHandler>,
    fail_next: Option<Error>,
    store: Store,
    subscriptions: std::collections::BTreeSet<String>,
    timers: BTreeMap<String, Timer>,
    wall: i64,
    mono: i64,
    rng: u64,
    traces: Vec<String>,
}

#[cfg(not(target_arch = "wasm32"))]
impl Default for Fake {
    fn default() -> Fake {
        Fake {
            phase: Phase::Idle,
            kind: MessageKind::Message,
            sender: String::new(),
            calls: Default::default(),
            budget: DEFAULT_CALL_BUDGET,
            kind_read: Default::default(),
            sender_read: Default::default(),
            logs: Vec::new(),
            passivate: false,
            forward: None,
            tells: Vec::new(),
            asks: Vec::new(),
            ask_handler: None,
            fail_next: None,
            store: Store::default(),
            subscriptions: Default::default(),
            timers: BTreeMap::new(),
            wall: Harness::<()>::DEFAULT_WALL,
            mono: Harness::<()>::DEFAULT_MONOTONIC,
            rng: 0,
            traces: Vec::new(),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn bad_request(msg: impl Into<String>) -> Error {
    Error::with_code(Code::BadRequest, msg)
}

#[cfg(not(target_arch = "wasm32"))]
impl Fake {
    /// Counts a host call against the budget; the call past it traps, here a panic.
    fn call(&self) {
        self.calls.set(self.calls.get() + 1);
        if self.calls.get() > self.budget {
            panic!("shardhost: host call budget of {} calls exceeded (the host traps)", self.budget);
        }
    }

    fn only_in_receive(&self, f: &str) {
        if self.phase != Phase::Receive {
            panic!("shardhost: {} is only valid during receive (the host traps)", f);
        }
    }

    /// A call with a code: counted, and failed with the injected error if there is one.
    fn coded(&mut self) -> Result<(), Error> {
        self.call();
        match self.fail_next.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn check_messaging(&self, typ: &str, id: &str, msg_len: usize) -> Result<(), Error> {
        if self.phase != Phase::Receive && self.phase != Phase::Activate {
            return Err(Error::with_code(Code::NotAllowed, "shardhost: tell, ask and forward are not allowed in on_passivate"));
        }
        if typ.is_empty() || typ.contains('/') {
            return Err(bad_request(format!("shardhost: bad entity type {:?}", typ)));
        }
        if id.is_empty() {
            return Err(bad_request("shardhost: empty entity ID"));
        }
        if msg_len > MAX_MESSAGE_SIZE {
            return Err(bad_request(format!("shardhost: message of {} bytes is over the cap of {}", msg_len, MAX_MESSAGE_SIZE)));
        }
        Ok(())
    }

    fn tell(&mut self, typ: &str, id: &str, msg: &[u8]) -> Result<(), Error> {
        self.coded()?;
        self.check_messaging(typ, id, msg.len())?;
        self.tells.push(Sent { typ: typ.to_string(), id: id.to_string(), msg: msg.to_vec(), timeout: None });
        Ok(())
    }

    fn ask(&mut self, own_type: &str, own_id: &str, typ: &str, id: &str, msg: &[u8], timeout_ms: i32) -> Result<Vec<u8>, Error> {
        self.coded()?;
        self.check_messaging(typ, id, msg.len())?;
        let timeout = if timeout_ms > 0 { Some(Duration::from_millis(timeout_ms as u64)) } else { None };
        self.asks.push(Sent { typ: typ.to_string(), id: id.to_string(), msg: msg.to_vec(), timeout });
        if typ == own_type && id == own_id {
            return Err(Error::with_code(Code::AskCycle, format!("shardhost: ask cycle: {}/{} asks itself", typ, id)));
        }
        let mut handler = match self.ask_handler.take() {
            Some(h) => h,
            None => {
                return Err(Error::with_code(
                    Code::Unavailable,
                    format!("shardhost: no entity answers {}/{} (Harness::on_ask sets who does)", typ, id),
                ))
            }
        };
        let r = handler(typ, id, msg);
        self.ask_handler = Some(handler);
        r.map_err(|e| if e.code() == Code::Error { Error::with_code(Code::EntityError, e.message) } else { e })
    }

    fn forward(&mut self, typ: &str, id: &str) -> Result<(), Error> {
        self.coded()?;
        if self.phase != Phase::Receive || self.kind != MessageKind::Message {
            return Err(Error::with_code(Code::NotAllowed, "shardhost: forward is only valid for a message of kind 0 in receive"));
        }
        self.check_messaging(typ, id, 0)?;
        self.forward = Some(format!("{}/{}", typ, id));
        Ok(())
    }

    fn ddata_get(&mut self, key: &str, cons: &str, _timeout_ms: i32) -> Result<String, Error> {
        self.coded()?;
        check_consistency(cons)?;
        self.store.get(key)
    }

    fn ddata_update(&mut self, key: &str, typ: &str, op: &str, cons: &str, _timeout_ms: i32) -> Result<String, Error> {
        self.call();
        let injected = self.fail_next.take();
        if let Some(e) = &injected {
            if e.code() != Code::Timeout {
                return Err(e.clone());
            }
        }
        check_consistency(cons)?;
        let v = self.store.update(key, typ, op)?;
        match injected {
            // A write that timed out is applied locally all the same.
            Some(e) => Err(e),
            None => Ok(v),
        }
    }

    fn ddata_delete(&mut self, key: &str, cons: &str, _timeout_ms: i32) -> Result<(), Error> {
        self.coded()?;
        check_consistency(cons)?;
        self.store.delete(key)
    }

    fn subscribe(&mut self, key: &str) -> Result<(), Error> {
        self.coded()?;
        if key.is_empty() {
            return Err(bad_request("shardhost: empty ddata key"));
        }
        self.subscriptions.insert(key.to_string());
        Ok(())
    }

    fn unsubscribe(&mut self, key: &str) -> Result<(), Error> {
        self.coded()?;
        self.subscriptions.remove(key);
        Ok(())
    }

    fn timer_start(&mut self, name: &str, msg: &[u8], delay_ms: i64, interval_ms: i64) -> Result<(), Error> {
        self.coded()?;
        if name.is_empty() || name.len() > MAX_TIMER_NAME {
            return Err(bad_request(format!("shardhost: timer name of {} bytes (want 1 to {})", name.len(), MAX_TIMER_NAME)));
        }
        if msg.len() > MAX_TIMER_MESSAGE {
            return Err(bad_request(format!("shardhost: timer message of {} bytes is over {}", msg.len(), MAX_TIMER_MESSAGE)));
        }
        if self.timers.len() >= MAX_TIMERS && !self.timers.contains_key(name) {
            return Err(bad_request(format!("shardhost: more than {} timers", MAX_TIMERS)));
        }
        let ms = |v: i64| Duration::from_millis(v.max(0) as u64);
        let timer = Timer {
            name: name.to_string(),
            msg: msg.to_vec(),
            delay: ms(delay_ms),
            interval: if interval_ms > 0 { Some(ms(interval_ms)) } else { None },
        };
        self.timers.insert(name.to_string(), timer);
        Ok(())
    }

    fn timer_cancel(&mut self, name: &str) -> bool {
        self.call();
        self.timers.remove(name).is_some()
    }

    /// splitmix64 from the seed.
    fn random(&mut self, buf: &mut [u8]) {
        self.call();
        for chunk in buf.chunks_mut(8) {
            self.rng = self.rng.wrapping_add(0x9E3779B97F4A7C15);
            let mut z = self.rng;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
            z ^= z >> 31;
            chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
        }
    }
}

/// Checks a consistency string as the host does.
#[cfg(not(target_arch = "wasm32"))]
fn check_consistency(cons: &str) -> Result<(), Error> {
    let ok = match cons {
        "" | "local" | "majority" | "all" => true,
        s => match s.strip_prefix("majority+") {
            Some(k) => k.parse::<u32>().is_ok(),
            None => s.parse::<u32>().map_or(false, |n| n >= 1),
        },
    };
    if ok {
        Ok(())
    } else {
        Err(bad_request(format!(
            "shardhost: consistency {:?}: want local, majority, majority+K, all or a number of replicas",
            cons
        )))
    }
}

/// A distributed data value in the [`Harness`]'s store.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Debug)]
enum Data {
    GCounter(i128),
    PNCounter(i128),
    GSet(std::collections::BTreeSet<String>),
    ORSet(std::collections::BTreeSet<String>),
    Flag(bool),
    LWWRegister(Option<String>),
    LWWMap(BTreeMap<String, String>),
    PNCounterMap(BTreeMap<String, i128>),
    ORMultiMap(BTreeMap<String, std::collections::BTreeSet<String>>),
}

#[cfg(not(target_arch = "wasm32"))]
impl Data {
    fn empty(typ: &str) -> Result<Data, Error> {
        Ok(match typ {
            "gcounter" => Data::GCounter(0),
            "pncounter" => Data::PNCounter(0),
            "gset" => Data::GSet(Default::default()),
            "orset" => Data::ORSet(Default::default()),
            "flag" => Data::Flag(false),
            "lwwregister" => Data::LWWRegister(None),
            "lwwmap" => Data::LWWMap(BTreeMap::new()),
            "pncountermap" => Data::PNCounterMap(BTreeMap::new()),
            "ormultimap" => Data::ORMultiMap(BTreeMap::new()),
            "ormap" => return Err(bad_request("shardhost: the Harness does not model ormap")),
            _ => return Err(bad_request(format!(
                "shardhost: unknown ddata type {:?} (want gcounter, pncounter, gset, orset, ormap, ormultimap, lwwmap, pncountermap, lwwregister or flag)",
                typ
            ))),
        })
    }

    fn type_name(&self) -> &'static str {
        match self {
            Data::GCounter(_) => "gcounter",
            Data::PNCounter(_) => "pncounter",
            Data::GSet(_) => "gset",
            Data::ORSet(_) => "orset",
            Data::Flag(_) => "flag",
            Data::LWWRegister(_) => "lwwregister",
            Data::LWWMap(_) => "lwwmap",
            Data::PNCounterMap(_) => "pncountermap",
            Data::ORMultiMap(_) => "ormultimap",
        }
    }

    /// The value as the host renders it.
    fn json(&self) -> Json {
        let num = |n: &i128| Json::Number(n.to_string());
        match self {
            Data::GCounter(n) | Data::PNCounter(n) => num(n),
            Data::GSet(s) | Data::ORSet(s) => Json::string_array(s),
            Data::Flag(b) => Json::Bool(*b),
            Data::LWWRegister(v) => v.clone().map_or(Json::Null, Json::String),
            Data::LWWMap(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), Json::String(v.clone()))).collect()),
            Data::PNCounterMap(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), num(v))).collect()),
            Data::ORMultiMap(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), Json::string_array(v))).collect()),
        }
    }

    /// Applies an operation's text as the replicator parses it (ddata.ParseOp).
    fn apply(&mut self, text: &str) -> Result<(), Error> {
        let t = text.trim();
        let (verb, rest) = t.split_once(' ').unwrap_or((t, ""));
        let rest = rest.trim_start_matches(' ');
        let typ = self.type_name();
        let bad = |want: &str| bad_request(format!("shardhost: bad operation {:?} for {} (want {})", text, typ, want));
        let count = |s: &str| if s.is_empty() { Some(1u64) } else { s.parse::<u64>().ok() };
        let (word, after) = rest.split_once(' ').map_or((rest, ""), |(k, r)| (k, r.trim_start_matches(' ')));
        match self {
            Data::GCounter(n) => match (verb, count(rest)) {
                ("incr", Some(d)) => *n += i128::from(d),
                _ => return Err(bad("incr [N]")),
            },
            Data::PNCounter(n) => match (verb, count(rest)) {
                ("incr", Some(d)) => *n += i128::from(d),
                ("decr", Some(d)) => *n -= i128::from(d),
                _ => return Err(bad("incr [N] or decr [N]")),
            },
            Data::GSet(s) => match verb {
                "add" if !rest.is_empty() => {
                    s.insert(rest.to_string());
                }
                _ => return Err(bad("add X")),
            },
            Data::ORSet(s) => match verb {
                "add" if !rest.is_empty() => {
                    s.insert(rest.to_string());
                }
                "remove" if !rest.is_empty() => {
                    s.remove(rest);
                }
                "clear" if rest.is_empty() => s.clear(),
                _ => return Err(bad("add X, remove X or clear")),
            },
            Data::Flag(b) => match verb {
                "enable" if rest.is_empty() => *b = true,
                _ => return Err(bad("enable")),
            },
            Data::LWWRegister(v) => match verb {
                "set" => *v = Some(rest.to_string()),
                _ => return Err(bad("set V")),
            },
            Data::LWWMap(m) => match verb {
                "put" if !word.is_empty() => {
                    m.insert(word.to_string(), after.to_string());
                }
                "remove" if !word.is_empty() && after.is_empty() => {
                    m.remove(word);
                }
                _ => return Err(bad("put K V or remove K")),
            },
            Data::PNCounterMap(m) => match (verb, count(after)) {
                ("incr", Some(d)) if !word.is_empty() => *m.entry(word.to_string()).or_insert(0) += i128::from(d),
                ("decr", Some(d)) if !word.is_empty() => *m.entry(word.to_string()).or_insert(0) -= i128::from(d),
                ("remove", _) if !word.is_empty() && after.is_empty() => {
                    m.remove(word);
                }
                _ => return Err(bad("incr K [N], decr K [N] or remove K")),
            },
            Data::ORMultiMap(m) => match verb {
                "add" if !word.is_empty() && !after.is_empty() => {
                    m.entry(word.to_string()).or_default().insert(after.to_string());
                }
                "remove" if !word.is_empty() && !after.is_empty() => {
                    if let Some(s) = m.get_mut(word) {
                        s.remove(after);
                        if s.is_empty() {
                            m.remove(word);
                        }
                    }
                }
                "delete" if !word.is_empty() && after.is_empty() => {
                    m.remove(word);
                }
                _ => return Err(bad("add K V, remove K V or delete K")),
            },
        }
        Ok(())
    }
}

/// The [`Harness`]'s distributed data: one replica, every consistency reached at once.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Default)]
struct Store {
    data: BTreeMap<String, Data>,
    deleted: std::collections::BTreeSet<String>,
}

#[cfg(not(target_arch = "wasm32"))]
impl Store {
    fn check_key(&self, key: &str) -> Result<(), Error> {
        if key.is_empty() {
            return Err(bad_request("shardhost: empty ddata key"));
        }
        if self.deleted.contains(key) {
            return Err(Error::with_code(Code::Deleted, format!("shardhost: ddata key {:?} was deleted", key)));
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Result<String, Error> {
        self.check_key(key)?;
        match self.data.get(key) {
            Some(d) => Ok(d.json().to_string()),
            None => Err(Error::with_code(Code::NotFound, format!("shardhost: ddata key {:?} not found", key))),
        }
    }

    fn update(&mut self, key: &str, typ: &str, op: &str) -> Result<String, Error> {
        self.check_key(key)?;
        let empty = Data::empty(typ)?;
        let mut d = self.data.get(key).cloned().unwrap_or(empty);
        if d.type_name() != typ {
            return Err(Error::with_code(
                Code::TypeMismatch,
                format!("shardhost: ddata key {:?} holds a {}, not a {}", key, d.type_name(), typ),
            ));
        }
        d.apply(op)?;
        let v = d.json().to_string();
        self.data.insert(key.to_string(), d);
        Ok(v)
    }

    fn delete(&mut self, key: &str) -> Result<(), Error> {
        self.check_key(key)?;
        self.data.remove(key);
        self.deleted.insert(key.to_string());
        Ok(())
    }
}

/// Runs an entity without a host, for native unit tests of entity code: it plays the host's
/// part of the ABI and delivers messages through the same path as the wasm exports. A
/// panic in the entity unwinds out of the call (in wasm it is a trap).
///
/// The fake host keeps, across messages and incarnations:
/// - the messages the entity sent: [`tells`](Harness::tells), [`asks`](Harness::asks);
///   asks are answered by [`on_ask`](Harness::on_ask) (an ask of the entity itself fails
///   with [`Code::AskCycle`], as on a host), and [`forwarded`](Harness::forwarded) says
///   where the last message was forwarded;
/// - distributed data: one replica in memory, every consistency reached at once; values are
///   rendered as a host renders them. All types but `ormap` are modelled.
///   [`ddata_update`](Harness::ddata_update) changes them as another entity would,
///   [`changed`](Harness::changed) delivers a key's value as a subscription would;
/// - timers ([`timers`](Harness::timers)), fired with [`fire_timer`](Harness::fire_timer),
///   and subscriptions ([`subscriptions`](Harness::subscriptions));
/// - a clock that moves only when told ([`advance`](Harness::advance)), random bytes from a
///   seed ([`set_seed`](Harness::set_seed)), logs and trace events.
///
/// [`fail_next`](Harness::fail_next) makes the next host function with a code fail.
/// Lifecycle: the first message of an incarnation runs [`Entity::on_activate`] first;
/// [`stop`](Harness::stop) and [`reincarnate`](Harness::reincarnate) play passivation.
///
/// ```
/// use shardhost::{Code, Consistency, Context, Entity, Error, Harness, LogLevel};
///
/// struct Greeter;
///
/// impl Entity for Greeter {
///     fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
///         let name = std::str::from_utf8(msg)?;
///         ctx.log(LogLevel::Info, &format!("greeting {}", name));
///         ctx.or_set("greeted").add(name, Consistency::Majority)?;
///         let title = ctx.ask("titles", name, b"get", None)?;
///         Ok(format!("hello {} {}, from {}/{}", String::from_utf8_lossy(&title), name, ctx.entity_type(), ctx.entity_id()).into_bytes())
///     }
/// }
///
/// let mut h = Harness::new("greeter", "g1", |_id: &str| Greeter);
/// h.on_ask(|_typ: &str, id: &str, _msg: &[u8]| if id == "ann" { Ok(b"Dr".to_vec()) } else { Err("unknown".into()) });
/// assert_eq!(h.send(b"ann").unwrap(), b"hello Dr ann, from greeter/g1");
/// assert_eq!(h.logs(), ["INFO greeting ann"]);
/// assert_eq!(h.ddata_value("greeted").unwrap(), r#"["ann"]"#);
/// assert_eq!(h.asks()[0].to_string(), "titles/ann get");
///
/// let err = h.send(b"bob").unwrap_err();
/// assert_eq!((err.code(), err.message()), (Code::EntityError, "unknown"));
/// assert!(h.send(b"\xff").is_err());
/// ```
#[cfg(not(target_arch = "wasm32"))]
pub struct Harness<E> {
    entity_type: String,
    entity_id: String,
    factory: Box<dyn FnMut(&str) -> E>,
    dispatcher: Dispatcher<E>,
    /// The fake host; moved into the entity's context for the duration of each call.
    fake: Fake,
    /// Whether on_activate ran for the current incarnation.
    active: bool,
}

#[cfg(not(target_arch = "wasm32"))]
impl<E> Harness<E> {
    /// The wall clock a harness starts at: 2024-01-01T00:00:00Z, in nanoseconds.
    pub const DEFAULT_WALL: i64 = 1_704_067_200_000_000_000;
    /// The monotonic clock a harness starts at: one second, in nanoseconds.
    pub const DEFAULT_MONOTONIC: i64 = 1_000_000_000;
}

#[cfg(not(target_arch = "wasm32"))]
impl<E: Entity> Harness<E> {
    /// Returns a harness for one entity of the given type and ID, created by `factory`
    /// when it is first activated (or restored).
    pub fn new(entity_type: &str, entity_id: &str, factory: impl FnMut(&str) -> E + 'static) -> Self {
        Harness {
            entity_type: entity_type.to_string(),
            entity_id: entity_id.to_string(),
            factory: Box::new(factory),
            dispatcher: Dispatcher::new(),
            fake: Fake::default(),
            active: false,
        }
    }

    /// Runs `f` on the entity (creating it first if need be) with the fake host moved into
    /// its context, as a host call of the given phase and message.
    fn enter<R>(&mut self, phase: Phase, kind: MessageKind, sender: &str, f: impl FnOnce(&mut E, &mut Context) -> R) -> R {
        let (typ, id, factory) = (&self.entity_type, &self.entity_id, &mut self.factory);
        let (entity, ctx) = self.dispatcher.ensure(|| start(typ, id, factory));
        self.fake.phase = phase;
        self.fake.kind = kind;
        self.fake.sender = sender.to_string();
        self.fake.calls.set(0);
        self.fake.kind_read.set(false);
        self.fake.sender_read.set(false);
        std::mem::swap(&mut ctx.fake, &mut self.fake);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(entity, ctx)));
        std::mem::swap(&mut ctx.fake, &mut self.fake);
        self.fake.phase = Phase::Idle;
        self.fake.sender.clear();
        match r {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Runs [`Entity::on_activate`] as the host does once per incarnation before its first
    /// message, creating the entity first if no message or restore has. If it fails, the
    /// entity is dropped (the next message tries again with a new one). [`send`] and the
    /// other deliveries call it when the incarnation has not been activated yet.
    ///
    /// [`send`]: Harness::send
    pub fn activate(&mut self) -> Result<(), Error> {
        let r = self.enter(Phase::Activate, MessageKind::Message, "", |e, ctx| e.on_activate(ctx));
        match r {
            Ok(()) => self.active = true,
            Err(_) => {
                self.dispatcher.live = None;
                self.active = false;
            }
        }
        r
    }

    /// Delivers `msg` from outside the cluster's entities (an empty sender) and returns
    /// the entity's reply or error. The first message of an incarnation is preceded by
    /// [`activate`](Harness::activate); if that fails, its error is returned.
    pub fn send(&mut self, msg: &[u8]) -> Result<Vec<u8>, Error> {
        self.deliver(MessageKind::Message, "", msg)
    }

    /// Delivers `msg` as sent by the entity `sender` (`"TYPE/ID"`).
    pub fn send_from(&mut self, sender: &str, msg: &[u8]) -> Result<Vec<u8>, Error> {
        self.deliver(MessageKind::Message, sender, msg)
    }

    /// Delivers a message of any kind with the given source (see [`MessageKind`]).
    pub fn deliver(&mut self, kind: MessageKind, source: &str, msg: &[u8]) -> Result<Vec<u8>, Error> {
        if !self.active || self.dispatcher.live.is_none() {
            self.activate()?;
        }
        self.fake.passivate = false;
        self.fake.forward = None;
        self.enter(Phase::Receive, kind, source, |e, ctx| e.receive(ctx, msg))
    }

    /// Delivers the message of the timer `name` (kind [`MessageKind::Timer`], the name as
    /// sender), whenever it is due; a timer that does not repeat is done then.
    ///
    /// # Panics
    /// If no timer of that name is running.
    pub fn fire_timer(&mut self, name: &str) -> Result<Vec<u8>, Error> {
        let t = match self.fake.timers.get(name) {
            Some(t) => t.clone(),
            None => panic!("shardhost: no timer {:?} is running (timers: {:?})", name, self.fake.timers.keys().collect::<Vec<_>>()),
        };
        if t.interval.is_none() {
            self.fake.timers.remove(name);
        }
        self.deliver(MessageKind::Timer, name, &t.msg)
    }

    /// Delivers the current value of `key` as a message of kind [`MessageKind::Changed`]
    /// with the key as sender, as a host does for a subscription (whether or not the entity
    /// subscribed).
    ///
    /// # Panics
    /// If the key has no value.
    pub fn changed(&mut self, key: &str) -> Result<Vec<u8>, Error> {
        let v = match self.fake.store.get(key) {
            Ok(v) => v,
            Err(e) => panic!("shardhost: changed({:?}): {}", key, e),
        };
        self.deliver(MessageKind::Changed, key, v.as_bytes())
    }

    /// Stops the entity as the host does for passivation, handoff or shutdown: runs
    /// [`Entity::on_passivate`], then takes the snapshot and returns it (see
    /// [`snapshot`](Harness::snapshot)). `None` if there is no entity. The entity stays as
    /// it is, as after a transparent snapshot; the next message starts a new incarnation
    /// with [`Entity::on_activate`]. [`reincarnate`](Harness::reincarnate) also restores a
    /// guest-level snapshot into a new entity.
    pub fn stop(&mut self) -> Option<Result<Vec<u8>, Error>> {
        self.dispatcher.live.as_ref()?;
        self.enter(Phase::Passivate, MessageKind::Message, "", |e, ctx| e.on_passivate(ctx));
        self.active = false;
        self.snapshot()
    }

    /// Passivates the entity and starts its next incarnation as the host would: [`stop`],
    /// then for a guest-level snapshot a new entity from the factory that
    /// [restores](Entity::restore) it (a transparent snapshot keeps the entity as it is).
    /// The fake host's state (timers, subscriptions, ddata) carries over. The next message
    /// runs [`Entity::on_activate`] first. An error is the snapshot's or the restore's.
    ///
    /// [`stop`]: Harness::stop
    pub fn reincarnate(&mut self) -> Result<(), Error> {
        match self.stop() {
            None => Ok(()),
            Some(Err(e)) => Err(e),
            Some(Ok(state)) => {
                self.dispatcher.live = None;
                self.restore(&state)
            }
        }
    }

    /// Whether the last message called [`Context::passivate`], asking the host to
    /// passivate the entity after it.
    pub fn passivated(&self) -> bool {
        self.fake.passivate
    }

    /// Where the last message was forwarded ([`Context::forward`]): `"TYPE/ID"`, or `None`.
    /// A host delivers it there if `receive` returned `Ok`, and drops the entity's reply.
    pub fn forwarded(&self) -> Option<&str> {
        self.fake.forward.as_deref()
    }

    /// Takes a guest-level snapshot as the host would between messages: `None` if the
    /// entity keeps no guest-level state (the host would take a transparent snapshot) or
    /// does not exist yet; otherwise [`Entity::snapshot`]'s result, an error if it is over
    /// [`MAX_SNAPSHOT_SIZE`].
    pub fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
        self.dispatcher.snapshot()
    }

    /// Starts the entity from `state` (a [`Harness::snapshot`], say) as the host starts a
    /// new incarnation: creates it with the factory and calls [`Entity::restore`]. Use it
    /// on a fresh harness: it is an error once a message or a restore has created the
    /// entity. If the entity refuses the state, the harness stays fresh (the next message
    /// creates the entity anew; the host instead fails the activation and keeps the state).
    pub fn restore(&mut self, state: &[u8]) -> Result<(), Error> {
        let (typ, id, factory) = (&self.entity_type, &self.entity_id, &mut self.factory);
        self.dispatcher.restore(state, || start(typ, id, factory))?;
        self.active = false;
        Ok(())
    }

    /// Every line the entity logged, as "LEVEL text" (for example "INFO hello").
    pub fn logs(&self) -> &[String] {
        &self.fake.logs
    }

    /// The entity, once a message, an activation or a restore has created it.
    pub fn entity(&self) -> Option<&E> {
        self.dispatcher.live.as_ref().map(|(e, _)| e)
    }

    /// The entity, mutable.
    pub fn entity_mut(&mut self) -> Option<&mut E> {
        self.dispatcher.live.as_mut().map(|(e, _)| e)
    }

    /// Sets who answers the entity's asks: `f(type, id, msg)` returns the reply, or an error
    /// the entity gets as [`Code::EntityError`] (an error with another code, such as
    /// [`Code::Timeout`], keeps it). Without one, asks fail with [`Code::Unavailable`].
    pub fn on_ask(&mut self, f: impl FnMut(&str, &str, &[u8]) -> Result<Vec<u8>, Error> + 'static) {
        self.fake.ask_handler = Some(Box::new(f));
    }

    /// The messages the entity told, oldest first.
    pub fn tells(&self) -> &[Sent] {
        &self.fake.tells
    }

    /// Returns the messages the entity told and forgets them.
    pub fn take_tells(&mut self) -> Vec<Sent> {
        std::mem::take(&mut self.fake.tells)
    }

    /// The asks the entity made, oldest first (also those that failed).
    pub fn asks(&self) -> &[Sent] {
        &self.fake.asks
    }

    /// Makes the next host function with a code (tell, ask, forward, ddata, subscriptions,
    /// timer_start) fail with `err`. A `ddata_update` failed with [`Code::Timeout`] is still
    /// applied, as on a host (the write was not acknowledged by enough replicas in time).
    pub fn fail_next(&mut self, err: Error) {
        self.fake.fail_next = Some(err);
    }

    /// The value of the distributed data `key` as JSON, `None` if it does not exist.
    pub fn ddata_value(&self, key: &str) -> Option<String> {
        self.fake.store.get(key).ok()
    }

    /// Applies an operation to `key` as another entity or the CLI would (no budget, no
    /// injected failure) and returns the new value. Deliver it to a subscriber with
    /// [`changed`](Harness::changed).
    pub fn ddata_update(&mut self, key: &str, typ: &str, op: &str) -> Result<String, Error> {
        self.fake.store.update(key, typ, op)
    }

    /// Deletes `key` for good, as another entity or the CLI would.
    pub fn ddata_delete(&mut self, key: &str) -> Result<(), Error> {
        self.fake.store.delete(key)
    }

    /// The keys the entity subscribes to, sorted.
    pub fn subscriptions(&self) -> Vec<String> {
        self.fake.subscriptions.iter().cloned().collect()
    }

    /// The entity's running timers, by name.
    pub fn timers(&self) -> Vec<Timer> {
        self.fake.timers.values().cloned().collect()
    }

    /// Sets the wall clock ([`Context::now_wall`]), in nanoseconds since 1970.
    pub fn set_wall(&mut self, nanos: i64) {
        self.fake.wall = nanos;
    }

    /// Moves both clocks on by `d` (timers do not fire by themselves: use
    /// [`fire_timer`](Harness::fire_timer)).
    pub fn advance(&mut self, d: Duration) {
        let ns = d.as_nanos().min(i64::MAX as u128) as i64;
        self.fake.wall = self.fake.wall.saturating_add(ns);
        self.fake.mono = self.fake.mono.saturating_add(ns);
    }

    /// Seeds [`Context::random`] (the default seed is 0): the same seed gives the same bytes.
    pub fn set_seed(&mut self, seed: u64) {
        self.fake.rng = seed;
    }

    /// The trace events of all messages, oldest first.
    pub fn trace_events(&self) -> &[String] {
        &self.fake.traces
    }

    /// Sets how many host calls a message or hook may make (default
    /// [`DEFAULT_CALL_BUDGET`]); the call past it panics, as a host traps.
    pub fn set_call_budget(&mut self, calls: u32) {
        self.fake.budget = calls;
    }

    /// How many host calls the last message or hook made.
    pub fn host_calls(&self) -> u32 {
        self.fake.calls.get()
    }
}

/// Creates a harnessed entity and its context.
#[cfg(not(target_arch = "wasm32"))]
fn start<E>(typ: &str, id: &str, factory: &mut dyn FnMut(&str) -> E) -> (E, Context) {
    let ctx = Context { entity_id: id.to_string(), entity_type: typ.to_string(), fake: Fake::default() };
    (factory(id), ctx)
}
#[cfg(test)]
mod tests {
    use super::*;

    struct Echo {
        seen: usize,
    }

    impl Entity for Echo {
        fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
            self.seen += 1;
            match msg {
                b"fail" => return Err("asked to fail".into()),
                b"who" => {
                    ctx.log(LogLevel::Info, &format!("who asked, message {}", self.seen));
                    return Ok(format!("{}/{}", ctx.entity_type(), ctx.entity_id()).into_bytes());
                }
                b"parse" => {
                    let n: i64 = "x".parse()?;
                    return Ok(n.to_string().into_bytes());
                }
                _ => {}
            }
            let mut out = format!("{}:", self.seen).into_bytes();
            out.extend_from_slice(msg);
            Ok(out)
        }
    }

    // The macro expands (and type-checks the factory) on the native target too.
    crate::entity!(Echo, |_id: &str| Echo { seen: 0 });

    #[test]
    fn harness_delivers_in_order_and_keeps_state() {
        use std::cell::Cell;
        use std::rc::Rc;
        let created = Rc::new(Cell::new(0));
        let c = created.clone();
        let mut h = Harness::new("echo", "e-1", move |id: &str| {
            c.set(c.get() + 1);
            assert_eq!(id, "e-1");
            Echo { seen: 0 }
        });
        assert!(h.entity().is_none());
        for i in 1..=3 {
            assert_eq!(h.send(b"x").unwrap(), format!("{}:x", i).into_bytes());
        }
        assert_eq!(created.get(), 1);
        assert_eq!(h.send(b"who").unwrap(), b"echo/e-1");
        assert_eq!(h.logs(), ["INFO who asked, message 4"]);
        assert_eq!(h.entity().unwrap().seen, 4);
    }

    #[test]
    fn harness_error_is_delivered_and_entity_goes_on() {
        let mut h = Harness::new("echo", "e", |_: &str| Echo { seen: 0 });
        assert_eq!(h.send(b"fail").unwrap_err().message(), "asked to fail");
        assert_eq!(h.send(b"y").unwrap(), b"2:y");
        assert_eq!(h.send(b"parse").unwrap_err().to_string(), "invalid digit found in string");
        assert_eq!(h.send(b"").unwrap(), b"4:");
    }

    #[test]
    fn harness_passes_panics_on() {
        struct Bomb;
        impl Entity for Bomb {
            fn receive(&mut self, _: &mut Context, _: &[u8]) -> Result<Vec<u8>, Error> {
                panic!("boom")
            }
        }
        let mut h = Harness::new("bomb", "b", |_: &str| Bomb);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.send(b"x")));
        assert!(r.is_err());
    }

    /// Keeps a list of words; its state is the words joined by newlines, after a version
    /// byte.
    struct Words {
        words: Vec<String>,
    }

    impl Entity for Words {
        fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
            match msg {
                b"bye" => ctx.passivate(),
                b"big" => self.words.push("x".repeat(MAX_SNAPSHOT_SIZE)),
                _ => self.words.push(std::str::from_utf8(msg)?.to_string()),
            }
            Ok(self.words.join(",").into_bytes())
        }

        fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
            if self.words.iter().any(|w| w == "nosnap") {
                return None;
            }
            if self.words.iter().any(|w| w == "badsnap") {
                return Some(Err("cannot snapshot badsnap".into()));
            }
            let mut out = vec![1u8];
            out.extend_from_slice(self.words.join("\n").as_bytes());
            Some(Ok(out))
        }

        fn restore(&mut self, state: &[u8]) -> Result<(), Error> {
            match state.split_first() {
                Some((1, rest)) => {
                    assert!(self.words.is_empty(), "restore into a used entity");
                    let text = std::str::from_utf8(rest)?;
                    self.words = if text.is_empty() { Vec::new() } else { text.split('\n').map(String::from).collect() };
                    Ok(())
                }
                _ => Err("bad words state".into()),
            }
        }
    }

    fn words() -> Harness<Words> {
        Harness::new("words", "w", |_: &str| Words { words: Vec::new() })
    }

    #[test]
    fn harness_snapshot_and_restore_round_trip() {
        let mut h = words();
        assert!(h.snapshot().is_none(), "no entity yet: transparent");
        h.send(b"a").unwrap();
        h.send(b"b").unwrap();
        let state = h.snapshot().unwrap().unwrap();
        assert_eq!(state, b"\x01a\nb");
        assert_eq!(h.send(b"c").unwrap(), b"a,b,c", "a snapshot leaves the entity as it was");

        let mut next = words();
        next.restore(&state).unwrap();
        assert_eq!(next.entity().unwrap().words, ["a", "b"]);
        assert_eq!(next.snapshot().unwrap().unwrap(), state, "restored, not yet sent to");
        assert_eq!(next.send(b"d").unwrap(), b"a,b,d");

        let mut empty = words();
        empty.restore(b"\x01").unwrap();
        assert_eq!(empty.send(b"e").unwrap(), b"e");
    }

    #[test]
    fn harness_restore_only_fresh() {
        let mut h = words();
        h.send(b"a").unwrap();
        let err = h.restore(b"\x01b").unwrap_err();
        assert!(err.message().contains("restore after the entity was created"), "{}", err);
        assert_eq!(h.send(b"c").unwrap(), b"a,c", "the entity is untouched");

        let mut h = words();
        h.restore(b"\x01b").unwrap();
        assert!(h.restore(b"\x01b").is_err(), "restored twice");
    }

    #[test]
    fn harness_restore_refused_leaves_it_fresh() {
        let mut h = words();
        assert_eq!(h.restore(b"\x02a").unwrap_err().message(), "bad words state");
        assert!(h.entity().is_none());
        assert_eq!(h.restore(b"\xff").unwrap_err().message(), "bad words state");
        assert!(h.restore(b"\x01\xff").unwrap_err().message().contains("utf-8"));
        h.restore(b"\x01z").unwrap();
        assert_eq!(h.send(b"y").unwrap(), b"z,y");
    }

    #[test]
    fn harness_snapshot_none_error_and_cap() {
        let mut h = words();
        h.send(b"nosnap").unwrap();
        assert!(h.snapshot().is_none());

        let mut h = words();
        h.send(b"badsnap").unwrap();
        assert_eq!(h.snapshot().unwrap().unwrap_err().message(), "cannot snapshot badsnap");

        let mut h = words();
        h.send(b"big").unwrap(); // the version byte makes it one over
        let err = h.snapshot().unwrap().unwrap_err();
        assert_eq!(err.message(), "shardhost: snapshot of 4194305 bytes is over the cap of 4194304 bytes (4 MiB)");
    }

    #[test]
    fn default_snapshot_is_transparent_and_restore_refuses() {
        let mut h = Harness::new("echo", "e", |_: &str| Echo { seen: 0 });
        h.send(b"x").unwrap();
        assert!(h.snapshot().is_none());
        let mut h = Harness::new("echo", "e", |_: &str| Echo { seen: 0 });
        let err = h.restore(b"abc").unwrap_err();
        assert!(err.message().contains("does not restore guest-level state (3 bytes given)"), "{}", err);
        assert!(h.entity().is_none());
    }

    #[test]
    fn boxed_entities_forward_snapshot_and_restore() {
        // The wasm exports hold the entity as a Box<dyn Entity>.
        let mut h = Harness::new("words", "w", |_: &str| -> Box<dyn Entity> { Box::new(Words { words: Vec::new() }) });
        h.send(b"a").unwrap();
        let state = h.snapshot().unwrap().unwrap();
        assert_eq!(state, b"\x01a");
        let mut next = Harness::new("words", "w", |_: &str| -> Box<dyn Entity> { Box::new(Words { words: Vec::new() }) });
        next.restore(&state).unwrap();
        assert_eq!(next.send(b"b").unwrap(), b"a,b");
        assert!(next.restore(b"\x01").is_err());
    }

    #[test]
    fn harness_reports_passivate_per_message() {
        let mut h = words();
        assert!(!h.passivated());
        h.send(b"a").unwrap();
        assert!(!h.passivated());
        assert_eq!(h.send(b"bye").unwrap(), b"a", "the reply is delivered as usual");
        assert!(h.passivated());
        h.send(b"b").unwrap();
        assert!(!h.passivated(), "only the message that asked");
        assert!(h.send(b"\xff").is_err());
        assert!(!h.passivated());
    }

    #[test]
    fn error_conversions_and_display() {
        let e: Error = "a".into();
        assert_eq!(e.to_string(), "a");
        assert_eq!(format!("{:?}", e), "Error(\"a\")");
        let e: Error = String::from("b").into();
        assert_eq!(e.message(), "b");
        assert_eq!(Error::new("c"), Error::from("c"));
        let bad: Vec<u8> = (0xfeu8..=0xff).collect();
        let e: Error = String::from_utf8(bad).unwrap_err().into();
        assert!(e.message().contains("utf-8"), "{}", e);
    }

    #[test]
    fn log_levels_are_slogs() {
        assert_eq!(LogLevel::Debug as i32, -4);
        assert_eq!(LogLevel::Info as i32, 0);
        assert_eq!(LogLevel::Warn as i32, 4);
        assert_eq!(LogLevel::Error as i32, 8);
        assert_eq!(LogLevel::Warn.to_string(), "WARN");
    }

    #[test]
    fn inbox_reuses_one_buffer() {
        let mut ib = Inbox::new();
        let p = ib.alloc(10);
        assert!(!p.is_null());
        assert_eq!(ib.message(p, 10).unwrap().len(), 10);
        assert_eq!(ib.alloc(5), p, "a smaller message reuses the buffer");
        assert_eq!(ib.message(p, 5).unwrap().len(), 5);
        assert!(ib.message(p, 11).is_none(), "longer than the buffer");
        assert!(ib.message(unsafe { p.add(1) }, 3).is_none(), "not the buffer's start");
        assert_eq!(ib.message(std::ptr::null(), 0).unwrap(), b"", "an empty message may be anywhere");
        assert!(!ib.alloc(0).is_null(), "size 0 still gets a valid address");
        let q = ib.alloc(1 << 20);
        assert_eq!(ib.message(q, 1 << 20).unwrap().len(), 1 << 20);
    }

    #[test]
    fn panic_line_names_message_and_place() {
        let here = std::panic::Location::caller();
        let line = panic_line(&String::from("boom 7"), Some(here));
        assert_eq!(line, format!("panic: boom 7 at {}:{}:{}", here.file(), here.line(), here.column()));
        assert_eq!(panic_line(&"static", None), "panic: static");
        assert_eq!(panic_line(&42, None), "panic: (no message)");
    }

    #[test]
    #[should_panic(expected = "number of shards must be positive")]
    fn shard_id_of_zero_shards_panics() {
        shard_id("a", 0);
    }

    /// Checks the SDK against the vectors every host and SDK shares.
    #[test]
    fn shard_id_vectors() {
        let text = include_str!("../../../abi/testdata/shard_ids.txt");
        let mut n = 0;
        for line in text.lines() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 4, "line {:?}", line);
            let shards: u32 = f[0].parse().unwrap();
            let id = json_string(f[1]);
            let hash = u64::from_str_radix(f[2], 16).unwrap();
            let want: u32 = f[3].parse().unwrap();
            assert_eq!(fnv1a_64(id.as_bytes()), hash, "hash of {:?}", id);
            assert_eq!(shard_id(&id, shards), want, "shard_id({:?}, {})", id, shards);
            n += 1;
        }
        assert!(n >= 50, "only {} vectors", n);
    }

    /// Decodes a JSON string literal (the vectors' ID column).
    fn json_string(s: &str) -> String {
        assert!(s.len() >= 2 && s.starts_with('"') && s.ends_with('"'), "not a JSON string: {}", s);
        let mut out = String::new();
        let mut chars = s[1..s.len() - 1].chars();
        let hex4 = |chars: &mut std::str::Chars<'_>| -> u32 {
            let h: String = chars.take(4).collect();
            u32::from_str_radix(&h, 16).unwrap()
        };
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next().unwrap() {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'u' => {
                    let mut cp = hex4(&mut chars);
                    if (0xD800..0xDC00).contains(&cp) {
                        assert_eq!((chars.next(), chars.next()), (Some('\\'), Some('u')));
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(&mut chars) - 0xDC00);
                    }
                    out.push(char::from_u32(cp).unwrap());
                }
                c => out.push(c), // \" \\ \/
            }
        }
        out
    }

    #[test]
    fn json_string_decodes_escapes() {
        assert_eq!(json_string(r#""a\"b\\c\/\n\u00e9\ud83d\ude42""#), "a\"b\\c/\n\u{e9}\u{1f642}");
    }
}

/// Tests of ABI v1 in the Harness: messaging, distributed data, timers, hooks, clocks.
#[cfg(test)]
mod tests_v1 {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Runs one closure per message: a test entity whose code is the test's.
    type Script = Box<dyn FnMut(&mut Context, &[u8]) -> Result<Vec<u8>, Error>>;

    struct Scripted {
        script: Script,
        hooks: Rc<RefCell<Vec<String>>>,
        fail_activate: bool,
    }

    impl Entity for Scripted {
        fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
            (self.script)(ctx, msg)
        }

        fn on_activate(&mut self, ctx: &mut Context) -> Result<(), Error> {
            self.hooks.borrow_mut().push(format!("activate {}", ctx.entity_id()));
            if self.fail_activate {
                return Err("not today".into());
            }
            Ok(())
        }

        fn on_passivate(&mut self, ctx: &mut Context) {
            let told = ctx.tell("audit", "a", b"bye");
            self.hooks.borrow_mut().push(format!("passivate {:?}", told.map_err(|e| e.code())));
            ctx.pn_counter("stops").incr(1, Consistency::Local).unwrap();
        }
    }

    fn scripted(f: impl FnMut(&mut Context, &[u8]) -> Result<Vec<u8>, Error> + 'static) -> (Harness<Scripted>, Rc<RefCell<Vec<String>>>) {
        let hooks = Rc::new(RefCell::new(Vec::new()));
        let script: Rc<RefCell<Script>> = Rc::new(RefCell::new(Box::new(f)));
        let hk = hooks.clone();
        let h = Harness::new("t", "me", move |_: &str| {
            let s = script.clone();
            Scripted { script: Box::new(move |ctx: &mut Context, msg: &[u8]| (s.borrow_mut())(ctx, msg)), hooks: hk.clone(), fail_activate: false }
        });
        (h, hooks)
    }

    fn text(r: Result<Vec<u8>, Error>) -> String {
        match r {
            Ok(b) => String::from_utf8(b).unwrap(),
            Err(e) => format!("error {}: {}", e.code().number(), e.message()),
        }
    }

    #[test]
    fn codes_round_trip_and_errors_carry_them() {
        for n in 1..=10 {
            let c = Code::from_number(n).unwrap();
            assert_eq!(c.number(), n);
        }
        assert_eq!(Code::from_number(0), None);
        assert_eq!(Code::from_number(99), Some(Code::Error));
        assert_eq!(Code::AskCycle.to_string(), "AskCycle");
        let e = Error::with_code(Code::Timeout, "slow");
        assert_eq!((e.code(), e.message()), (Code::Timeout, "slow"));
        assert_eq!(format!("{:?}", e), "Error(Timeout, \"slow\")");
        assert_eq!(Error::new("x").code(), Code::Error);
        assert_eq!(MessageKind::from_number(2), MessageKind::Changed);
        assert_eq!(MessageKind::Timer.number(), 1);
    }

    #[test]
    fn consistency_renders_spec_strings() {
        let cases = [
            (Consistency::Local, "local"),
            (Consistency::Majority, "majority"),
            (Consistency::MajorityPlus(2), "majority+2"),
            (Consistency::All, "all"),
            (Consistency::N(3), "3"),
        ];
        for (c, s) in cases {
            assert_eq!(c.to_string(), s);
            check_consistency(s).unwrap();
        }
        assert_eq!(Consistency::default(), Consistency::Local);
        check_consistency("").unwrap();
        for bad in ["most", "0", "majority+", "majority+x", "-1"] {
            assert_eq!(check_consistency(bad).unwrap_err().code(), Code::BadRequest, "{}", bad);
        }
    }

    #[test]
    fn timeouts_in_millis() {
        assert_eq!(timeout_ms(None), 0);
        assert_eq!(timeout_ms(Some(Duration::ZERO)), 0);
        assert_eq!(timeout_ms(Some(Duration::from_micros(1))), 1);
        assert_eq!(timeout_ms(Some(Duration::from_millis(1500))), 1500);
        assert_eq!(timeout_ms(Some(Duration::from_secs(u64::MAX))), i32::MAX);
        assert_eq!(duration_ms(Duration::from_micros(1500)), 2);
        assert_eq!(duration_ms(Duration::from_secs(2)), 2000);
        assert_eq!(duration_ms(Duration::from_secs(u64::MAX)), i64::MAX);
    }

    #[test]
    fn kind_and_sender() {
        let (mut h, _) = scripted(|ctx, msg| Ok(format!("{} [{}] {}", ctx.kind().number(), ctx.sender(), String::from_utf8_lossy(msg)).into_bytes()));
        assert_eq!(text(h.send(b"a")), "0 [] a");
        assert_eq!(text(h.send_from("cart/bob", b"b")), "0 [cart/bob] b");
        assert_eq!(text(h.deliver(MessageKind::Timer, "tick", b"c")), "1 [tick] c");
        assert_eq!(text(h.deliver(MessageKind::Changed, "k", b"[]")), "2 [k] []");
    }

    #[test]
    fn tells_and_asks() {
        let (mut h, _) = scripted(|ctx, msg| {
            let m = std::str::from_utf8(msg)?;
            let (cmd, arg) = m.split_once(' ').unwrap_or((m, ""));
            match cmd {
                "tell" => ctx.tell("other", arg, b"hi").map(|()| b"ok".to_vec()),
                "ask" => ctx.ask("other", arg, b"q", Some(Duration::from_millis(250))),
                "askdefault" => ctx.ask("other", arg, b"q", None),
                "self" => ctx.ask("t", "me", b"q", None),
                "big" => ctx.tell("other", "x", &vec![0; MAX_MESSAGE_SIZE + 1]).map(|()| Vec::new()),
                _ => Err("?".into()),
            }
        });
        assert_eq!(text(h.send(b"tell x")), "ok");
        assert_eq!(text(h.send(b"tell ")), "error 7: shardhost: empty entity ID");
        assert_eq!(h.send(b"big").unwrap_err().code(), Code::BadRequest);
        assert_eq!(h.tells().len(), 1);
        assert_eq!(h.tells()[0], Sent { typ: "other".into(), id: "x".into(), msg: b"hi".to_vec(), timeout: None });
        assert_eq!(h.tells()[0].to_string(), "other/x hi");

        assert_eq!(h.send(b"ask y").unwrap_err().code(), Code::Unavailable, "no handler");
        h.on_ask(|typ, id, msg| match id {
            "y" => Ok(format!("{}/{} got {}", typ, id, String::from_utf8_lossy(msg)).into_bytes()),
            "slow" => Err(Error::with_code(Code::Timeout, "ask timed out")),
            _ => Err("no such thing".into()),
        });
        assert_eq!(text(h.send(b"ask y")), "other/y got q");
        assert_eq!(text(h.send(b"ask z")), "error 9: no such thing");
        assert_eq!(text(h.send(b"ask slow")), "error 4: ask timed out");
        assert_eq!(text(h.send(b"self")), "error 5: shardhost: ask cycle: t/me asks itself");
        assert_eq!(h.asks().len(), 5);
        assert_eq!(h.asks()[1].timeout, Some(Duration::from_millis(250)));
        h.send(b"askdefault y").unwrap();
        assert_eq!(h.asks()[5].timeout, None);
        assert_eq!(h.take_tells().len(), 1);
        assert!(h.tells().is_empty());
    }

    #[test]
    fn forward_is_recorded_per_message() {
        let (mut h, _) = scripted(|ctx, msg| {
            if msg == b"fwd" {
                ctx.forward("other", "1")?;
                ctx.forward("other", "2")?; // replaces the target
            }
            Ok(b"mine".to_vec())
        });
        assert_eq!(text(h.send(b"fwd")), "mine");
        assert_eq!(h.forwarded(), Some("other/2"));
        h.send(b"x").unwrap();
        assert_eq!(h.forwarded(), None);
        assert_eq!(text(h.deliver(MessageKind::Timer, "t", b"fwd")), "error 8: shardhost: forward is only valid for a message of kind 0 in receive");
    }

    #[test]
    fn typed_ddata() {
        let (mut h, _) = scripted(|ctx, msg| {
            let c = Consistency::Majority;
            let out = match msg {
                b"counters" => {
                    let a = ctx.pn_counter("pn").incr(5, c)?;
                    let b = ctx.pn_counter("pn").decr(7, c)?;
                    let g = ctx.g_counter("g").incr(3, Consistency::All)?;
                    format!("{} {} {} {} {}", a, b, g, ctx.pn_counter("pn").get(c)?, ctx.g_counter("none").get(c)?)
                }
                b"sets" => {
                    ctx.or_set("s").add("b", c)?;
                    let s = ctx.or_set("s").add("a b", c)?;
                    let r = ctx.or_set("s").remove("b", c)?;
                    let g = ctx.g_set("gs").add("x", c)?;
                    format!("{:?} {:?} {:?} {:?} {:?}", s, r, g, ctx.or_set("s").get(c)?, ctx.g_set("none").get(c)?)
                }
                b"clear" => {
                    ctx.or_set("s").clear(c)?;
                    format!("{:?}", ctx.or_set("s").get(Consistency::Local)?)
                }
                b"maps" => {
                    ctx.lww_map("m").put("k1", "v 1", c)?;
                    let m = ctx.lww_map("m").put("k2", "v2", c)?;
                    let r = ctx.lww_map("m").remove("k1", c)?;
                    let p = ctx.pn_counter_map("pm").incr("a", 2, c)?;
                    let p2 = ctx.pn_counter_map("pm").decr("b", 1, c)?;
                    let mm = ctx.or_multi_map("mm").add("k", "x", c)?;
                    let mm2 = ctx.or_multi_map("mm").add("k", "y", c)?;
                    let mm3 = ctx.or_multi_map("mm").remove("k", "x", c)?;
                    format!("{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}", m, r, p, p2, mm, mm2, mm3, ctx.lww_map("m").get(c)?)
                }
                b"badkey" => {
                    ctx.lww_map("m").put("two words", "v", c)?;
                    String::new()
                }
                b"register" => {
                    let before = ctx.lww_register("r").get(c)?;
                    let set = ctx.lww_register("r").set("hello world", c)?;
                    let f0 = ctx.flag("f").get(c)?;
                    let f1 = ctx.flag("f").enable(c)?;
                    format!("{:?} {:?} {} {} {:?}", before, set, f0, f1, ctx.lww_register("r").timeout(Duration::from_secs(1)).get(c)?)
                }
                b"mismatch" => {
                    ctx.or_set("pn").add("x", c)?;
                    String::new()
                }
                b"delete" => {
                    ctx.flag("f").delete(c)?;
                    ctx.flag("f").get(c)?;
                    String::new()
                }
                _ => return Err("?".into()),
            };
            Ok(out.into_bytes())
        });
        assert_eq!(text(h.send(b"counters")), "5 -2 3 -2 0");
        assert_eq!(h.ddata_value("pn").unwrap(), "-2");
        assert_eq!(text(h.send(b"sets")), r#"["a b", "b"] ["a b"] ["x"] ["a b"] []"#);
        assert_eq!(h.ddata_value("s").unwrap(), r#"["a b"]"#);
        assert_eq!(text(h.send(b"clear")), "[]");
        assert_eq!(
            text(h.send(b"maps")),
            r#"{"k1": "v 1", "k2": "v2"} {"k2": "v2"} {"a": 2} {"a": 2, "b": -1} {"k": ["x"]} {"k": ["x", "y"]} {"k": ["y"]} {"k2": "v2"}"#
        );
        assert_eq!(h.ddata_value("m").unwrap(), r#"{"k2":"v2"}"#);
        assert_eq!(h.send(b"badkey").unwrap_err().code(), Code::BadRequest);
        assert_eq!(text(h.send(b"register")), r#"None Some("hello world") false true Some("hello world")"#);
        assert_eq!(h.ddata_value("r").unwrap(), r#""hello world""#);
        assert_eq!(text(h.send(b"mismatch")), "error 10: shardhost: ddata key \"pn\" holds a pncounter, not a orset");
        assert_eq!(text(h.send(b"delete")), "error 3: shardhost: ddata key \"f\" was deleted");
        assert_eq!(h.ddata_value("f"), None);
    }

    #[test]
    fn raw_ddata_and_store_ops() {
        let (mut h, _) = scripted(|ctx, msg| {
            let m = std::str::from_utf8(msg)?;
            let f: Vec<&str> = m.splitn(4, ' ').collect();
            match f[0] {
                "get" => ctx.ddata_get(f[1], f[2], None).map(String::into_bytes),
                "up" => ctx.ddata_update(f[1], f[2], f[3], "majority+1", Some(Duration::from_secs(1))).map(String::into_bytes),
                "del" => ctx.ddata_delete(f[1], f[2], None).map(|()| b"ok".to_vec()),
                _ => Err("?".into()),
            }
        });
        let steps: &[(&str, &str)] = &[
            ("get k local", "error 2: shardhost: ddata key \"k\" not found"),
            ("get k bogus", "error 7: shardhost: consistency \"bogus\": want local, majority, majority+K, all or a number of replicas"),
            ("up k gcounter incr", "1"),
            ("up k gcounter incr 41", "42"),
            ("up k gcounter decr 1", "error 7: shardhost: bad operation \"decr 1\" for gcounter (want incr [N])"),
            ("up k nosuch x", "error 7: shardhost: unknown ddata type \"nosuch\" (want gcounter, pncounter, gset, orset, ormap, ormultimap, lwwmap, pncountermap, lwwregister or flag)"),
            ("up k pncounter incr", "error 10: shardhost: ddata key \"k\" holds a gcounter, not a pncounter"),
            ("get k 3", "42"),
            ("up s orset add   x y  ", "[\"x y\"]"),
            ("up s orset add", "error 7: shardhost: bad operation \"add\" for orset (want add X, remove X or clear)"),
            ("up r lwwregister set", "\"\""),
            ("up q\"x lwwregister set a\\b", "\"a\\\\b\""),
            ("up f flag enable", "true"),
            ("up f flag enable now", "error 7: shardhost: bad operation \"enable now\" for flag (want enable)"),
            ("up pm pncountermap incr a 5", "{\"a\":5}"),
            ("up pm pncountermap remove a", "{}"),
            ("up mm ormultimap delete k", "{}"),
            ("up om ormap update k flag enable", "error 7: shardhost: the Harness does not model ormap"),
            ("del k all", "ok"),
            ("del k all", "error 3: shardhost: ddata key \"k\" was deleted"),
            ("up k gcounter incr", "error 3: shardhost: ddata key \"k\" was deleted"),
            ("get k local", "error 3: shardhost: ddata key \"k\" was deleted"),
        ];
        for (msg, want) in steps {
            assert_eq!(text(h.send(msg.as_bytes())), *want, "{}", msg);
        }
        assert_eq!(h.ddata_update("other", "pncounter", "decr 2").unwrap(), "-2");
        assert_eq!(text(h.send(b"get other local")), "-2");
        h.ddata_delete("other").unwrap();
        assert_eq!(h.ddata_value("other"), None);
    }

    #[test]
    fn injected_failures() {
        let (mut h, _) = scripted(|ctx, msg| match msg {
            b"incr" => ctx.pn_counter("c").incr(1, Consistency::Majority).map(|n| n.to_string().into_bytes()),
            _ => ctx.tell("a", "b", msg).map(|()| b"ok".to_vec()),
        });
        h.fail_next(Error::with_code(Code::Unavailable, "shard unavailable"));
        assert_eq!(text(h.send(b"x")), "error 6: shard unavailable");
        assert_eq!(text(h.send(b"x")), "ok", "only the next call fails");
        h.fail_next(Error::with_code(Code::Timeout, "not acknowledged"));
        assert_eq!(text(h.send(b"incr")), "error 4: not acknowledged");
        assert_eq!(h.ddata_value("c").unwrap(), "1", "applied locally all the same");
        h.fail_next(Error::with_code(Code::Deleted, "gone"));
        assert_eq!(text(h.send(b"incr")), "error 3: gone");
        assert_eq!(h.ddata_value("c").unwrap(), "1");
    }

    #[test]
    fn subscriptions_and_changed() {
        let (mut h, _) = scripted(|ctx, msg| {
            match (ctx.kind(), msg) {
                (MessageKind::Changed, v) => return Ok(format!("{} is {}", ctx.sender(), String::from_utf8_lossy(v)).into_bytes()),
                (_, b"sub") => ctx.subscribe("k")?,
                (_, b"unsub") => ctx.unsubscribe("k")?,
                (_, b"bad") => ctx.subscribe("")?,
                _ => {}
            }
            Ok(Vec::new())
        });
        h.send(b"sub").unwrap();
        assert_eq!(h.subscriptions(), ["k"]);
        assert_eq!(h.send(b"bad").unwrap_err().code(), Code::BadRequest);
        h.ddata_update("k", "orset", "add x").unwrap();
        assert_eq!(text(h.changed("k")), r#"k is ["x"]"#);
        h.send(b"unsub").unwrap();
        h.send(b"unsub").unwrap();
        assert!(h.subscriptions().is_empty());
    }

    #[test]
    fn timers_record_fire_and_cancel() {
        let (mut h, _) = scripted(|ctx, msg| {
            if ctx.kind() == MessageKind::Timer {
                return Ok(format!("fired {} {}", ctx.sender(), String::from_utf8_lossy(msg)).into_bytes());
            }
            match msg {
                b"once" => ctx.start_timer("once", b"one", Duration::from_secs(5))?,
                b"every" => ctx.start_repeating_timer("every", b"tick", Duration::from_millis(10), Duration::from_secs(1))?,
                b"cancel" => return Ok(format!("{} {}", ctx.cancel_timer("every"), ctx.cancel_timer("every")).into_bytes()),
                b"longname" => ctx.start_timer(&"n".repeat(MAX_TIMER_NAME + 1), b"", Duration::ZERO)?,
                b"bigmsg" => ctx.start_timer("big", &vec![0; MAX_TIMER_MESSAGE + 1], Duration::ZERO)?,
                b"many" => {
                    for i in 0..=MAX_TIMERS {
                        ctx.start_timer(&format!("t{}", i), b"", Duration::ZERO)?;
                    }
                }
                _ => {}
            }
            Ok(b"ok".to_vec())
        });
        h.send(b"once").unwrap();
        h.send(b"every").unwrap();
        let timers = h.timers();
        assert_eq!(timers.len(), 2);
        assert_eq!(timers[0], Timer { name: "every".into(), msg: b"tick".to_vec(), delay: Duration::from_millis(10), interval: Some(Duration::from_secs(1)) });
        assert_eq!(timers[1].interval, None);
        assert_eq!(text(h.fire_timer("once")), "fired once one");
        assert_eq!(text(h.fire_timer("every")), "fired every tick");
        assert_eq!(text(h.fire_timer("every")), "fired every tick");
        assert_eq!(h.timers().len(), 1, "a repeating timer stays, a single one is done");
        assert_eq!(text(h.send(b"cancel")), "true false");
        assert!(h.timers().is_empty());
        assert_eq!(h.send(b"longname").unwrap_err().code(), Code::BadRequest);
        assert_eq!(h.send(b"bigmsg").unwrap_err().code(), Code::BadRequest);
        assert_eq!(text(h.send(b"many")), "error 7: shardhost: more than 1000 timers");
    }

    #[test]
    #[should_panic(expected = "no timer \"nope\" is running")]
    fn firing_an_unknown_timer_panics() {
        let (mut h, _) = scripted(|_, _| Ok(Vec::new()));
        let _ = h.fire_timer("nope");
    }

    #[test]
    fn clocks_random_traces() {
        let (mut h, _) = scripted(|ctx, msg| {
            let mut b = vec![0u8; msg.len()];
            ctx.random(&mut b);
            ctx.trace_event(&"é".repeat(200));
            Ok(format!("{} {} {:?}", ctx.now_wall(), ctx.now_monotonic(), b).into_bytes())
        });
        let first = text(h.send(b"abc"));
        assert!(first.starts_with("1704067200000000000 1000000000 "), "{}", first);
        h.advance(Duration::from_millis(1));
        h.set_seed(0);
        let again = text(h.send(b"abc"));
        assert_eq!(again.split(' ').nth(2), first.split(' ').nth(2), "the same seed, the same bytes");
        assert!(again.starts_with("1704067200001000000 1001000000 "), "{}", again);
        h.set_seed(7);
        assert_ne!(text(h.send(b"abc")).split(' ').nth(2), first.split(' ').nth(2));
        h.set_wall(5);
        assert!(text(h.send(b"")).starts_with("5 1001000000 "));
        assert_eq!(h.trace_events().len(), 4);
        assert_eq!(h.trace_events()[0].len(), 256, "cut at 256 bytes");
    }

    #[test]
    fn random_fills_big_buffers() {
        let (mut h, _) = scripted(|ctx, _| {
            let mut b = vec![0u8; 3 * MAX_RANDOM + 5];
            ctx.random(&mut b);
            Ok(b)
        });
        let b = h.send(b"").unwrap();
        assert_eq!(h.host_calls(), 4, "one call per 64 KiB");
        assert!(b[3 * MAX_RANDOM..].iter().any(|&x| x != 0));
    }

    #[test]
    fn call_budget_traps() {
        let (mut h, _) = scripted(|ctx, msg| {
            for _ in 0..msg.len() {
                ctx.now_wall();
            }
            Ok(Vec::new())
        });
        h.set_call_budget(3);
        h.send(b"xxx").unwrap();
        assert_eq!(h.host_calls(), 3);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.send(b"xxxx")));
        assert!(r.is_err());
        h.send(b"x").unwrap();
    }

    #[test]
    fn hooks_run_per_incarnation() {
        let (mut h, hooks) = scripted(|_, _| Ok(Vec::new()));
        assert!(h.stop().is_none(), "nothing to stop");
        h.send(b"a").unwrap();
        h.send(b"b").unwrap();
        assert_eq!(*hooks.borrow(), ["activate me"]);
        assert!(h.stop().is_none(), "transparent");
        assert_eq!(*hooks.borrow(), ["activate me", "passivate Err(NotAllowed)"]);
        assert_eq!(h.ddata_value("stops").unwrap(), "1", "ddata works in on_passivate");
        h.reincarnate().unwrap();
        h.send(b"c").unwrap();
        assert_eq!(hooks.borrow().len(), 4);
        assert_eq!(hooks.borrow()[3], "activate me");
        assert!(h.tells().is_empty());
    }

    #[test]
    fn failed_activation_drops_the_entity() {
        let hooks = Rc::new(RefCell::new(Vec::new()));
        let hk = hooks.clone();
        let tries = Rc::new(RefCell::new(0));
        let t = tries.clone();
        let mut h = Harness::new("t", "x", move |_: &str| {
            *t.borrow_mut() += 1;
            let fail = *t.borrow() == 1;
            Scripted { script: Box::new(|_: &mut Context, _: &[u8]| Ok(b"hi".to_vec())), hooks: hk.clone(), fail_activate: fail }
        });
        assert_eq!(h.send(b"a").unwrap_err().message(), "not today");
        assert!(h.entity().is_none());
        assert_eq!(h.send(b"a").unwrap(), b"hi");
        assert_eq!(*tries.borrow(), 2);
        assert_eq!(hooks.borrow().len(), 2);
    }

    #[test]
    #[should_panic(expected = "passivate is only valid during receive")]
    fn passivate_outside_receive_traps() {
        struct P;
        impl Entity for P {
            fn receive(&mut self, _: &mut Context, _: &[u8]) -> Result<Vec<u8>, Error> {
                Ok(Vec::new())
            }
            fn on_activate(&mut self, ctx: &mut Context) -> Result<(), Error> {
                ctx.passivate();
                Ok(())
            }
        }
        let mut h = Harness::new("p", "p", |_: &str| P);
        let _ = h.send(b"");
    }

    #[test]
    fn reincarnate_restores_guest_state_and_keeps_the_fake_host() {
        struct N {
            n: u8,
        }
        impl Entity for N {
            fn receive(&mut self, ctx: &mut Context, _: &[u8]) -> Result<Vec<u8>, Error> {
                self.n += 1;
                ctx.start_timer("t", b"", Duration::from_secs(1))?;
                Ok(vec![self.n])
            }
            fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
                Some(Ok(vec![self.n]))
            }
            fn restore(&mut self, state: &[u8]) -> Result<(), Error> {
                self.n = state[0] + 100;
                Ok(())
            }
        }
        let mut h = Harness::new("n", "n", |_: &str| N { n: 0 });
        h.send(b"").unwrap();
        h.reincarnate().unwrap();
        assert_eq!(h.entity().unwrap().n, 101);
        assert_eq!(h.timers().len(), 1, "timers are kept with the entity");
        assert_eq!(h.send(b"").unwrap(), [102]);
        h.entity_mut().unwrap().n = 7;
        assert_eq!(h.stop().unwrap().unwrap(), [7]);
    }

    #[test]
    fn json_parses_and_renders() {
        let v = Json::parse(" {\"a\" : [1, -2.5e3, true, false, null, \"x\\u0041\\n\\ud83d\\ude42\"], \"b\":{}} ").unwrap();
        assert_eq!(v.to_string(), "{\"a\":[1,-2.5e3,true,false,null,\"xA\\n\u{1f642}\"],\"b\":{}}");
        assert_eq!(Json::parse("[]").unwrap(), Json::Array(Vec::new()));
        assert_eq!(Json::parse("\"\\u001f\"").unwrap().to_string(), "\"\\u001f\"");
        assert_eq!(Json::parse("12345678901234567890").unwrap().as_i64(), None, "too big for i64");
        assert_eq!(Json::from_i64(-3).as_i64(), Some(-3));
        assert_eq!(Json::parse("null").unwrap().as_optional_string(), Some(None));
        assert_eq!(Json::parse("1").unwrap().as_optional_string(), None);
        assert_eq!(Json::parse("[\"a\", 1]").unwrap().as_string_array(), None);
        assert_eq!(Json::parse(r#"{"k":["a"]}"#).unwrap().as_set_map().unwrap()["k"], ["a"]);
        for bad in ["", "[", "[1,]", "{\"a\"}", "01", "1.", "-", "tru", "\"abc", "\"\\x\"", "[1] 2", "\"\u{1}\"", "{1:2}"] {
            assert!(Json::parse(bad).is_err(), "{:?}", bad);
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(Json::parse(&deep).is_err());
    }

    #[test]
    fn typed_get_of_another_type_is_a_mismatch() {
        let (mut h, _) = scripted(|ctx, _| ctx.pn_counter("s").get(Consistency::Local).map(|n| n.to_string().into_bytes()));
        h.ddata_update("s", "orset", "add x").unwrap();
        let e = h.send(b"").unwrap_err();
        assert_eq!(e.code(), Code::TypeMismatch);
        assert_eq!(e.message(), "shardhost: ddata key \"s\" (pncounter): want a number, got [\"x\"]");
    }
}
