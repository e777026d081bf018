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
//!
//!     // Its state is the field n, saved as bytes the entity's next incarnation (perhaps
//!     // of newer code) loads: explicit state (see State; docs/state.md in the repository).
//!     shardhost::explicit_state!(n);
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
//! Entities talk to each other ([`Context::tell`], [`Context::ask`], [`Context::forward`];
//! [`Context::tell_with_key`] and [`Context::ask_with_key`] send with an idempotency key, so
//! that the receiver handles a repeat once),
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

use std::fmt;

mod context;
mod ddata;
mod dispatch;
// The Harness: everything native builds have and wasm32 builds do not.
#[cfg(not(target_arch = "wasm32"))]
mod harness;
mod http;
mod json;
mod state;
mod reminders;
// The exports' bodies and the host's imports: only in wasm32 builds.
#[cfg(target_arch = "wasm32")]
mod wasm;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_http;
#[cfg(test)]
mod tests_serve_http;
#[cfg(test)]
mod tests_v1;
#[cfg(test)]
mod tests_query;

pub use context::Context;
pub use ddata::{Consistency, Flag, GCounter, GSet, LWWMap, LWWRegister, ORMultiMap, ORSet, PNCounter, PNCounterMap};
#[cfg(not(target_arch = "wasm32"))]
pub use harness::{Harness, Sent, Timer};
pub use http::{HttpRequest, HttpResponse, IncomingRequest};
pub use json::Json;
pub use state::{State, StateReader, StateWriter};
pub use reminders::Reminder;

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

/// The longest reminder name, in bytes.
pub const MAX_REMINDER_NAME: usize = 128;

/// The largest reminder payload, in bytes (64 KiB).
pub const MAX_REMINDER_PAYLOAD: usize = 64 << 10;

/// The most reminders one entity may have.
pub const MAX_REMINDERS: usize = 100;

/// The shortest interval of a repeating reminder, in milliseconds.
pub const MIN_REMINDER_INTERVAL_MS: i64 = 1000;

/// The longest idempotency key of [`Context::tell_with_key`] and
/// [`Context::ask_with_key`], in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 256;

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
    /// 11: outbound HTTP: the URL, or a redirect, is off the type's egress allowlist, or
    /// at a non-public address it does not name.
    EgressDenied = 11,
    /// 12: outbound HTTP: the response is over the type's cap.
    EgressTooLarge = 12,
    /// 13: outbound HTTP: the request failed (connection, DNS, TLS, too many redirects).
    EgressFailed = 13,
    /// 14: outbound HTTP: the entity made more requests than its type's rate allows.
    EgressRateLimited = 14,
    /// 15: the call would change something, inside [`Entity::query`] (which changes
    /// nothing).
    ReadOnly = 15,
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
            11 => Code::EgressDenied,
            12 => Code::EgressTooLarge,
            13 => Code::EgressFailed,
            14 => Code::EgressRateLimited,
            15 => Code::ReadOnly,
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
            Code::EgressDenied => "EgressDenied",
            Code::EgressTooLarge => "EgressTooLarge",
            Code::EgressFailed => "EgressFailed",
            Code::EgressRateLimited => "EgressRateLimited",
            Code::ReadOnly => "ReadOnly",
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
    /// 10: a durable reminder's payload; the sender is the reminder's name, and
    /// [`Context::reminder_due`] its due time.
    Reminder = 10,
    /// 11: an HTTP request one of the type's routes sent the entity, handled by
    /// [`Entity::serve_http`] (never by `receive`); the sender is empty.
    Http = 11,
}

impl MessageKind {
    /// The kind of an ABI number; a number this SDK does not know is `Message`.
    pub fn from_number(n: i32) -> MessageKind {
        match n {
            1 => MessageKind::Timer,
            2 => MessageKind::Changed,
            10 => MessageKind::Reminder,
            11 => MessageKind::Http,
            _ => MessageKind::Message,
        }
    }

    /// The kind's number in the ABI.
    pub fn number(self) -> i32 {
        self as i32
    }
}

/// The code of one entity. The host calls `receive` for each message, one at a time and in
/// order; `Ok` bytes are the reply to the asker (ignored for a tell), and an `Err` is
/// delivered to the asker as an error. An entity keeps its state in its own fields: one
/// wasm instance hosts exactly one entity.
///
/// The host saves an entity's state on passivation, handoff and shutdown, and after
/// messages as its type's checkpoint policy says; the next incarnation starts from it. The
/// state is kept one of two ways (docs/state.md in the shardhost repository):
///
/// - *explicit* (guest-level), the one to choose: the entity implements
///   [`snapshot`](Entity::snapshot) and [`restore`](Entity::restore), and gives its state
///   as bytes of its own encoding. [`explicit_state!`] writes both for a field whose type
///   implements [`State`]. Such state survives a redeploy of the type with new code: the
///   next incarnation, after a passivation, runs the new code, which loads it.
/// - *transparent*: an entity that keeps the defaults opts in to the host copying the
///   instance's memory, for state it cannot describe. Only the same module can take that
///   copy up, so after a redeploy the entity goes on running the module its state was
///   made by.
///
/// By hand, with an encoding of the entity's own:
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
    ///   of the instance's memory instead, which only this same module can take up (a
    ///   redeploy does not reach the entity).
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

    /// Takes up, converted, `state` that another version of the entity type's module
    /// saved: the host calls it instead of [`restore`](Entity::restore) when it moves an
    /// entity to a new version of its module (the host's `shardhost_migrate`, abi/SPEC.md,
    /// "State: migrations"). `from_version` is the type's version number of the module
    /// that saved the state (0 when the host does not know it). An `Err` refuses it: the
    /// entity stays on the module that saved its state, with that state, and nothing of
    /// the conversion is kept.
    ///
    /// The default is [`restore`](Entity::restore): an entity whose encoding did not
    /// change has nothing to convert.
    fn migrate(&mut self, from_version: u64, state: &[u8]) -> Result<(), Error> {
        let _ = from_version;
        self.restore(state)
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

    /// Answers a read-only query (the host's `shardhost_query`, abi/SPEC.md, "Queries";
    /// `shardhost query TYPE/ID PAYLOAD`). The host calls it on a throwaway instance made
    /// from the entity's saved state, never on the instance that handles messages: it
    /// never waits behind the entity's messages, never activates it, and nothing it
    /// does is kept. [`Context`] calls that would change anything (tell, ask, forward,
    /// distributed data updates, deletes and subscriptions, timers) fail with
    /// [`Code::ReadOnly`]; `passivate` traps.
    ///
    /// - `None` (the default): the entity answers no query; the host says how to add one.
    /// - `Some(Ok(reply))`: the answer.
    /// - `Some(Err(e))`: the query's error, with `e`'s text.
    fn query(&self, ctx: &mut Context, payload: &[u8]) -> Option<Result<Vec<u8>, Error>> {
        let _ = (ctx, payload);
        None
    }

    /// Serves an HTTP request that one of the type's routes sent the entity (the host's
    /// `shardhost_http`, abi/SPEC.md, "HTTP routes"; deploy `--http-route
    /// /shop/{id}/...`). It is the entity's message, of kind [`MessageKind::Http`]: it
    /// runs as [`receive`](Entity::receive) does, with the same [`Context`], one at a time
    /// with the entity's other messages, and is journaled and replayed like them.
    ///
    /// - `None` (the default): the entity serves no HTTP; the caller gets 501.
    /// - `Some(Ok(response))`: the answer (a status of 0 is 200). Header values may not
    ///   hold a CR, LF or NUL (the request then fails as an error of the entity's), and
    ///   the host refuses the headers it sets itself (`Content-Length`,
    ///   `Transfer-Encoding`, `Connection` and the other hop-by-hop ones, `traceparent`,
    ///   `Shardhost-Node`) with 502.
    /// - `Some(Err(e))`: the entity's error, as an ask's (HTTP 422 with its text).
    fn serve_http(&mut self, ctx: &mut Context, req: &IncomingRequest) -> Option<Result<HttpResponse, Error>> {
        let _ = (ctx, req);
        None
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

    fn migrate(&mut self, from_version: u64, state: &[u8]) -> Result<(), Error> {
        (**self).migrate(from_version, state)
    }

    fn on_activate(&mut self, ctx: &mut Context) -> Result<(), Error> {
        (**self).on_activate(ctx)
    }

    fn on_passivate(&mut self, ctx: &mut Context) {
        (**self).on_passivate(ctx)
    }

    fn query(&self, ctx: &mut Context, payload: &[u8]) -> Option<Result<Vec<u8>, Error>> {
        (**self).query(ctx, payload)
    }

    fn serve_http(&mut self, ctx: &mut Context, req: &IncomingRequest) -> Option<Result<HttpResponse, Error>> {
        (**self).serve_http(ctx, req)
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

/// Defines the exports of ABI v1 for an entity type: `shardhost::entity!(Type, factory)`,
/// where `factory` is a closure or function `fn(&str) -> Type` that creates the entity
/// with the given ID. It is called once per instance: when the host restores a
/// guest-level snapshot ([`Entity::restore`]), or else at activation or the first message.
///
/// The exports are `shardhost_abi_v1`, `shardhost_alloc`, `shardhost_receive`,
/// `shardhost_snapshot`, `shardhost_restore` and `shardhost_migrate`, which call
/// [`Entity::snapshot`], [`Entity::restore`] and [`Entity::migrate`] (an entity that keeps
/// their defaults gets transparent snapshots),
/// `shardhost_on_activate` and `shardhost_on_passivate`, which call
/// [`Entity::on_activate`] and [`Entity::on_passivate`], `shardhost_query`, which
/// calls [`Entity::query`], and `shardhost_http`, which calls [`Entity::serve_http`].
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
            const _: () = {
                #[no_mangle]
                pub extern "C" fn shardhost_abi_v1() {}

                #[no_mangle]
                pub extern "C" fn shardhost_alloc(size: u32) -> *mut u8 {
                    $crate::__private::alloc(size)
                }

                #[no_mangle]
                pub extern "C" fn shardhost_receive(ptr: *const u8, len: u32) -> i32 {
                    $crate::__private::receive(ptr, len, __shardhost_create)
                }

                #[no_mangle]
                pub extern "C" fn shardhost_snapshot() -> i32 {
                    $crate::__private::snapshot()
                }

                #[no_mangle]
                pub extern "C" fn shardhost_restore(ptr: *const u8, len: u32) -> i32 {
                    $crate::__private::restore(ptr, len, __shardhost_create)
                }

                #[no_mangle]
                pub extern "C" fn shardhost_migrate(ptr: *const u8, len: u32) -> i32 {
                    $crate::__private::migrate(ptr, len, __shardhost_create)
                }

                #[no_mangle]
                pub extern "C" fn shardhost_on_activate() -> i32 {
                    $crate::__private::on_activate(__shardhost_create)
                }

                #[no_mangle]
                pub extern "C" fn shardhost_on_passivate() -> i32 {
                    $crate::__private::on_passivate()
                }

                #[no_mangle]
                pub extern "C" fn shardhost_query(ptr: *const u8, len: u32) -> i32 {
                    $crate::__private::query(ptr, len, __shardhost_create)
                }

                #[no_mangle]
                pub extern "C" fn shardhost_http(ptr: *const u8, len: u32) -> i32 {
                    $crate::__private::http(ptr, len, __shardhost_create)
                }
            };
        };
    };
}

/// What the [`entity!`] macro expands to calls; not part of the SDK's API.
#[doc(hidden)]
#[cfg(target_arch = "wasm32")]
pub mod __private {
    pub use crate::wasm::{alloc, migrate, on_activate, on_passivate, receive, restore, snapshot};
    pub use crate::wasm::{http, query};
}
