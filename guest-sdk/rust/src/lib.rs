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
//! // The exports of ABI v0 (in a wasm32 build): each instance creates its entity with this.
//! shardhost::entity!(Counter, |_id: &str| Counter { n: 0 });
//!
//! // Natively, the entity is tested without a host:
//! let mut h = shardhost::Harness::new("counter", "c1", |_id: &str| Counter { n: 0 });
//! assert_eq!(h.send(b"inc").unwrap(), b"1");
//! assert_eq!(h.send(b"dec").unwrap_err().message(), "unknown message \"dec\"");
//! ```
//!
//! Build the crate as a `cdylib` for `wasm32-unknown-unknown` with `panic=abort` and a
//! 64 KiB stack (see README.md). The SDK implements ABI version 0 (`abi/SPEC.md` in the
//! shardhost repository), has no dependencies and builds with Rust 1.63. Entity code is
//! tested natively, without a host, with [`Harness`].
//!
//! A panic in an entity becomes a wasm trap: the host fails that message and discards the
//! instance. Before the trap, the SDK writes the panic message to the host's log at error
//! level and to WASI stderr, which the host attaches to the error it returns.

use std::fmt;

/// The host ABI version this SDK implements.
pub const ABI_VERSION: u32 = 0;

/// The largest guest-level snapshot a host accepts, in bytes (4 MiB): a larger one fails
/// the snapshot (see [`Entity::snapshot`]).
pub const MAX_SNAPSHOT_SIZE: usize = 4 << 20;

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

/// An entity's refusal of a message. Its text is delivered to the asker as an error
/// (status Error in the ABI); the entity keeps its state and goes on.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Error {
    message: String,
}

impl Error {
    /// Returns an error with the given text.
    pub fn new(message: impl Into<String>) -> Error {
        Error { message: message.into() }
    }

    /// The error's text.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?})", self.message)
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
    /// entity keeps its state and goes on).
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
}

/// What an entity may ask of the host during [`Entity::receive`].
pub struct Context {
    entity_id: String,
    entity_type: String,
    /// Lines logged through a [`Harness`], as "LEVEL text".
    #[cfg(not(target_arch = "wasm32"))]
    logs: Vec<String>,
    /// Whether the current message (in a [`Harness`]) called [`Context::passivate`].
    #[cfg(not(target_arch = "wasm32"))]
    passivate: bool,
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
        self.logs.push(format!("{} {}", level.name(), msg));
    }

    /// Asks the host to passivate the entity once the current message is handled: the host
    /// saves its state (see [`Entity::snapshot`]) and releases its instance; messages that
    /// arrive meanwhile go to the next incarnation, which starts from that state. The reply
    /// to the current message is delivered as usual. Calling it again changes nothing.
    pub fn passivate(&mut self) {
        #[cfg(target_arch = "wasm32")]
        wasm::passivate();
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.passivate = true;
        }
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

/// Delivers messages to the one entity of an instance, creating it on the first message.
/// The wasm exports and the [`Harness`] both go through it.
struct Dispatcher<E> {
    live: Option<(E, Context)>,
}

impl<E: Entity> Dispatcher<E> {
    const fn new() -> Self {
        Dispatcher { live: None }
    }

    /// Hands `msg` to the entity; `create` makes the entity and its context first if there
    /// is none yet.
    fn receive(&mut self, msg: &[u8], create: impl FnOnce() -> (E, Context)) -> Result<Vec<u8>, Error> {
        let (entity, ctx) = self.live.get_or_insert_with(create);
        entity.receive(ctx, msg)
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

/// Defines the exports of ABI v0 for an entity type: `shardhost::entity!(Type, factory)`,
/// where `factory` is a closure or function `fn(&str) -> Type` that creates the entity
/// with the given ID. It is called once per instance: when the first message arrives, or
/// before that, when the host restores a guest-level snapshot ([`Entity::restore`]).
///
/// The exports are `shardhost_abi_v0`, `shardhost_alloc`, `shardhost_receive`, and
/// `shardhost_snapshot` and `shardhost_restore`, which call [`Entity::snapshot`] and
/// [`Entity::restore`] (an entity that keeps their defaults gets transparent snapshots).
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
            pub extern "C" fn shardhost_abi_v0() {}

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
        };
    };
}

/// What the [`entity!`] macro expands to calls; not part of the SDK's API.
#[doc(hidden)]
#[cfg(target_arch = "wasm32")]
pub mod __private {
    pub use crate::wasm::{alloc, receive, restore, snapshot};
}

/// The guest side of ABI v0 on wasm32: host imports, the state of the instance, and the
/// bodies of the exports.
#[cfg(target_arch = "wasm32")]
mod wasm {
    use super::{panic_line, Context, Dispatcher, Entity, Inbox, LogLevel};
    use std::cell::RefCell;

    const MSG_NOT_IN_BUFFER: &str = "shardhost: message not in the buffer shardhost_alloc returned";
    const STATE_NOT_IN_BUFFER: &str = "shardhost: state not in the buffer shardhost_alloc returned";

    #[link(wasm_import_module = "shardhost")]
    extern "C" {
        fn reply(ptr: *const u8, len: u32);
        fn entity_id(ptr: *mut u8, cap: u32) -> u32;
        fn entity_type(ptr: *mut u8, cap: u32) -> u32;
        #[link_name = "log"]
        fn host_log(level: i32, ptr: *const u8, len: u32);
        #[link_name = "passivate"]
        fn host_passivate();
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

    pub fn receive(ptr: *const u8, len: u32, create: fn(&str) -> Box<dyn Entity>) -> i32 {
        GUEST.with(|g| {
            let g = &mut *g.borrow_mut();
            let msg = match g.inbox.message(ptr, len) {
                Some(m) => m,
                None => {
                    send_reply(MSG_NOT_IN_BUFFER.as_bytes());
                    return STATUS_ERROR;
                }
            };
            let result = g.dispatcher.receive(msg, || start(create));
            match result {
                Ok(out) => {
                    send_reply(&out);
                    STATUS_OK
                }
                Err(e) => {
                    send_reply(e.message().as_bytes());
                    STATUS_ERROR
                }
            }
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

    pub fn restore(ptr: *const u8, len: u32, create: fn(&str) -> Box<dyn Entity>) -> i32 {
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
            match result {
                Ok(()) => STATUS_OK,
                Err(e) => {
                    send_reply(e.message().as_bytes());
                    STATUS_ERROR
                }
            }
        })
    }

    /// Creates the instance's entity and its context, first installing the panic hook.
    fn start(create: fn(&str) -> Box<dyn Entity>) -> (Box<dyn Entity>, Context) {
        std::panic::set_hook(Box::new(|info| {
            let line = panic_line(info.payload(), info.location());
            log(LogLevel::Error, &line);
            write_stderr(&line);
        }));
        let ctx = Context {
            entity_id: read_string(entity_id),
            entity_type: read_string(entity_type),
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
    fn read_string(f: unsafe extern "C" fn(*mut u8, u32) -> u32) -> String {
        let mut small = [0u8; 64];
        let n = unsafe { f(small.as_mut_ptr(), small.len() as u32) } as usize;
        if n <= small.len() {
            return String::from_utf8_lossy(&small[..n]).into_owned();
        }
        let mut buf = vec![0u8; n];
        loop {
            let m = unsafe { f(buf.as_mut_ptr(), buf.len() as u32) } as usize;
            if m <= buf.len() {
                buf.truncate(m);
                return match String::from_utf8(buf) {
                    Ok(s) => s,
                    Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                };
            }
            buf = vec![0u8; m];
        }
    }
}

/// Runs an entity without a host, for native unit tests of entity code: it plays the host's
/// part of the ABI (entity ID and type, log, passivation requests, guest-level snapshots)
/// and delivers messages through the same path as the wasm exports. A panic in the entity
/// unwinds out of [`Harness::send`] (in wasm it is a trap).
///
/// ```
/// use shardhost::{Context, Entity, Error, Harness, LogLevel};
///
/// struct Greeter;
///
/// impl Entity for Greeter {
///     fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
///         let name = std::str::from_utf8(msg)?;
///         ctx.log(LogLevel::Info, &format!("greeting {}", name));
///         Ok(format!("hello {}, from {}/{}", name, ctx.entity_type(), ctx.entity_id()).into_bytes())
///     }
/// }
///
/// let mut h = Harness::new("greeter", "g1", |_id: &str| Greeter);
/// assert_eq!(h.send(b"ann").unwrap(), b"hello ann, from greeter/g1");
/// assert_eq!(h.logs(), ["INFO greeting ann"]);
/// assert!(h.send(b"\xff").is_err());
/// ```
#[cfg(not(target_arch = "wasm32"))]
pub struct Harness<E> {
    entity_type: String,
    entity_id: String,
    factory: Box<dyn FnMut(&str) -> E>,
    dispatcher: Dispatcher<E>,
}

#[cfg(not(target_arch = "wasm32"))]
impl<E: Entity> Harness<E> {
    /// Returns a harness for one entity of the given type and ID, created by `factory`
    /// when the first message arrives.
    pub fn new(entity_type: &str, entity_id: &str, factory: impl FnMut(&str) -> E + 'static) -> Self {
        Harness {
            entity_type: entity_type.to_string(),
            entity_id: entity_id.to_string(),
            factory: Box::new(factory),
            dispatcher: Dispatcher::new(),
        }
    }

    /// Delivers `msg` to the entity (creating it on the first call) and returns its reply,
    /// or its error.
    pub fn send(&mut self, msg: &[u8]) -> Result<Vec<u8>, Error> {
        if let Some((_, ctx)) = &mut self.dispatcher.live {
            ctx.passivate = false;
        }
        let (typ, id, factory) = (&self.entity_type, &self.entity_id, &mut self.factory);
        self.dispatcher.receive(msg, || start(typ, id, factory))
    }

    /// Whether the last message sent called [`Context::passivate`], asking the host to
    /// passivate the entity after it.
    pub fn passivated(&self) -> bool {
        match &self.dispatcher.live {
            Some((_, ctx)) => ctx.passivate,
            None => false,
        }
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
        self.dispatcher.restore(state, || start(typ, id, factory))
    }

    /// Every line the entity logged, as "LEVEL text" (for example "INFO hello").
    pub fn logs(&self) -> &[String] {
        match &self.dispatcher.live {
            Some((_, ctx)) => &ctx.logs,
            None => &[],
        }
    }

    /// The entity, once the first message (or a restore) has created it.
    pub fn entity(&self) -> Option<&E> {
        self.dispatcher.live.as_ref().map(|(e, _)| e)
    }
}

/// Creates a harnessed entity and its context.
#[cfg(not(target_arch = "wasm32"))]
fn start<E>(typ: &str, id: &str, factory: &mut dyn FnMut(&str) -> E) -> (E, Context) {
    let ctx = Context { entity_id: id.to_string(), entity_type: typ.to_string(), logs: Vec::new(), passivate: false };
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
