//! The guest side of the ABI on wasm32: host imports, the state of the instance, and the
//! bodies of the exports.

use crate::dispatch::{panic_line, Dispatcher, Inbox};
use crate::{Code, Context, Entity, Error, LogLevel, MessageKind};
use std::cell::{Cell, RefCell};

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
    #[link_name = "tell_key"]
    fn host_tell_key(tp: *const u8, tl: u32, ip: *const u8, il: u32, mp: *const u8, ml: u32, kp: *const u8, kl: u32) -> i32;
    #[link_name = "ask_key"]
    fn host_ask_key(
        tp: *const u8,
        tl: u32,
        ip: *const u8,
        il: u32,
        mp: *const u8,
        ml: u32,
        kp: *const u8,
        kl: u32,
        timeout_ms: i32,
    ) -> i32;
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
    #[link_name = "reminder_set"]
    fn host_reminder_set(np: *const u8, nl: u32, due_ms: i64, interval_ms: i64, pp: *const u8, pl: u32) -> i32;
    #[link_name = "reminder_cancel"]
    fn host_reminder_cancel(np: *const u8, nl: u32) -> i32;
    #[link_name = "reminder_list"]
    fn host_reminder_list() -> i32;
    #[link_name = "reminder_due"]
    fn host_reminder_due() -> i64;
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
const STATUS_NO_QUERY: i32 = 2;
const STATUS_NO_HTTP: i32 = 2;

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
        ctx.host.end_message();
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

/// `shardhost_migrate`: the first 8 bytes are `from_version` (little-endian), the rest
/// the state another version of the module saved.
pub fn migrate(ptr: *const u8, len: u32, create: Create) -> i32 {
    GUEST.with(|g| {
        let g = &mut *g.borrow_mut();
        let input = match g.inbox.message(ptr, len) {
            Some(s) if s.len() >= 8 => s,
            _ => {
                send_reply(STATE_NOT_IN_BUFFER.as_bytes());
                return STATUS_ERROR;
            }
        };
        let mut from = [0u8; 8];
        from.copy_from_slice(&input[..8]);
        let result = g.dispatcher.migrate(u64::from_le_bytes(from), &input[8..], || start(create));
        g.inbox = Inbox::new();
        status(result.map(|()| Vec::new()))
    })
}

/// `shardhost_query`: runs on a throwaway instance (abi/SPEC.md, "Queries").
pub fn query(ptr: *const u8, len: u32, create: Create) -> i32 {
    GUEST.with(|g| {
        let g = &mut *g.borrow_mut();
        let payload = match g.inbox.message(ptr, len) {
            Some(m) => m,
            None => {
                send_reply(MSG_NOT_IN_BUFFER.as_bytes());
                return STATUS_ERROR;
            }
        };
        let (entity, ctx) = g.dispatcher.ensure(|| start(create));
        let r = entity.query(ctx, payload);
        ctx.host.end_message();
        match r {
            None => STATUS_NO_QUERY,
            Some(r) => status(r),
        }
    })
}

pub fn http(ptr: *const u8, len: u32, create: Create) -> i32 {
    GUEST.with(|g| {
        let g = &mut *g.borrow_mut();
        let payload = match g.inbox.message(ptr, len) {
            Some(m) => m,
            None => {
                send_reply(b"shardhost: HTTP request not in the buffer shardhost_alloc returned");
                return STATUS_ERROR;
            }
        };
        let (entity, ctx) = g.dispatcher.ensure(|| start(create));
        let r = crate::http::serve(entity, ctx, payload);
        ctx.host.end_message();
        match r {
            None => STATUS_NO_HTTP,
            Some(r) => status(r),
        }
    })
}

/// Creates the instance's entity and its context, first installing the panic hook.
fn start(create: Create) -> (Box<dyn Entity>, Context) {
    std::panic::set_hook(Box::new(|info| {
        let line = panic_line(info.payload(), info.location());
        log(LogLevel::Error, &line);
        write_stderr(&line);
    }));
    let id = String::from_utf8_lossy(&read_bytes(entity_id)).into_owned();
    let typ = String::from_utf8_lossy(&read_bytes(entity_type)).into_owned();
    let entity = create(&id);
    (entity, Context::new(typ, id, Host { kind: Cell::new(None), sender: RefCell::new(None) }))
}

fn send_reply(b: &[u8]) {
    // An empty reply needs no call: the host starts every message with an empty one.
    if !b.is_empty() {
        unsafe { reply(b.as_ptr(), b.len() as u32) }
    }
}

fn log(level: LogLevel, msg: &str) {
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

/// The host through the ABI's imports, as the entity's Context holds it: one method per
/// host function, the same as the Harness's fake host has. The current message's kind
/// and sender are read from the host when first asked for (each read is a host call,
/// counted against the message's budget) and kept until the message ends.
pub(crate) struct Host {
    kind: Cell<Option<MessageKind>>,
    sender: RefCell<Option<String>>,
}

impl Host {
    pub fn log(&mut self, level: LogLevel, msg: &str) {
        log(level, msg)
    }

    pub fn passivate(&mut self) {
        unsafe { host_passivate() }
    }

    pub fn message_kind(&self) -> MessageKind {
        if let Some(k) = self.kind.get() {
            return k;
        }
        let k = MessageKind::from_number(unsafe { host_message_kind() });
        self.kind.set(Some(k));
        k
    }

    pub fn sender(&self) -> String {
        let mut s = self.sender.borrow_mut();
        if s.is_none() {
            *s = Some(String::from_utf8_lossy(&read_bytes(host_sender)).into_owned());
        }
        s.clone().unwrap_or_default()
    }

    /// Forgets the kind and sender read in this message: the next message has its own, and
    /// outside receive the sender is empty.
    fn end_message(&self) {
        self.kind.set(None);
        *self.sender.borrow_mut() = None;
    }

    pub fn tell(&mut self, typ: &str, id: &str, msg: &[u8]) -> Result<(), Error> {
        check(unsafe {
            host_tell(typ.as_ptr(), typ.len() as u32, id.as_ptr(), id.len() as u32, msg.as_ptr(), msg.len() as u32)
        })
    }

    /// Asks `typ`/`id`; the host knows the asker, so its own type and ID are not passed.
    pub fn ask(
        &mut self,
        _own_type: &str,
        _own_id: &str,
        typ: &str,
        id: &str,
        msg: &[u8],
        timeout_ms: i32,
    ) -> Result<Vec<u8>, Error> {
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

    pub fn tell_key(&mut self, typ: &str, id: &str, msg: &[u8], key: &str) -> Result<(), Error> {
        check(unsafe {
            host_tell_key(
                typ.as_ptr(),
                typ.len() as u32,
                id.as_ptr(),
                id.len() as u32,
                msg.as_ptr(),
                msg.len() as u32,
                key.as_ptr(),
                key.len() as u32,
            )
        })
    }

    /// Asks `typ`/`id` with an idempotency key; as `ask`, without its own type and ID.
    #[allow(clippy::too_many_arguments)]
    pub fn ask_key(
        &mut self,
        _own_type: &str,
        _own_id: &str,
        typ: &str,
        id: &str,
        msg: &[u8],
        key: &str,
        timeout_ms: i32,
    ) -> Result<Vec<u8>, Error> {
        check(unsafe {
            host_ask_key(
                typ.as_ptr(),
                typ.len() as u32,
                id.as_ptr(),
                id.len() as u32,
                msg.as_ptr(),
                msg.len() as u32,
                key.as_ptr(),
                key.len() as u32,
                timeout_ms,
            )
        })?;
        Ok(read_bytes(host_result))
    }

    pub fn forward(&mut self, typ: &str, id: &str) -> Result<(), Error> {
        check(unsafe { host_forward(typ.as_ptr(), typ.len() as u32, id.as_ptr(), id.len() as u32) })
    }

    pub fn ddata_get(&mut self, key: &str, cons: &str, timeout_ms: i32) -> Result<String, Error> {
        check(unsafe { host_ddata_get(key.as_ptr(), key.len() as u32, cons.as_ptr(), cons.len() as u32, timeout_ms) })?;
        Ok(result_text())
    }

    pub fn ddata_update(&mut self, key: &str, typ: &str, op: &str, cons: &str, timeout_ms: i32) -> Result<String, Error> {
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

    pub fn ddata_delete(&mut self, key: &str, cons: &str, timeout_ms: i32) -> Result<(), Error> {
        check(unsafe { host_ddata_delete(key.as_ptr(), key.len() as u32, cons.as_ptr(), cons.len() as u32, timeout_ms) })
    }

    pub fn subscribe(&mut self, key: &str) -> Result<(), Error> {
        check(unsafe { host_ddata_subscribe(key.as_ptr(), key.len() as u32) })
    }

    pub fn unsubscribe(&mut self, key: &str) -> Result<(), Error> {
        check(unsafe { host_ddata_unsubscribe(key.as_ptr(), key.len() as u32) })
    }

    pub fn timer_start(&mut self, name: &str, msg: &[u8], delay_ms: i64, interval_ms: i64) -> Result<(), Error> {
        check(unsafe { host_timer_start(name.as_ptr(), name.len() as u32, msg.as_ptr(), msg.len() as u32, delay_ms, interval_ms) })
    }

    pub fn timer_cancel(&mut self, name: &str) -> bool {
        unsafe { host_timer_cancel(name.as_ptr(), name.len() as u32) == 1 }
    }

    pub fn reminder_set(&mut self, name: &str, due_ms: i64, interval_ms: i64, payload: &[u8]) -> Result<(), Error> {
        check(unsafe { host_reminder_set(name.as_ptr(), name.len() as u32, due_ms, interval_ms, payload.as_ptr(), payload.len() as u32) })
    }

    pub fn reminder_cancel(&mut self, name: &str) -> Result<(), Error> {
        check(unsafe { host_reminder_cancel(name.as_ptr(), name.len() as u32) })
    }

    pub fn reminder_list(&mut self) -> Result<Vec<u8>, Error> {
        check(unsafe { host_reminder_list() })?;
        Ok(read_bytes(host_result))
    }

    pub fn reminder_due(&self) -> i64 {
        unsafe { host_reminder_due() }
    }

    pub fn now(&mut self, clock: i32) -> i64 {
        unsafe { host_now(clock) }
    }

    pub fn random(&mut self, buf: &mut [u8]) {
        unsafe { host_random(buf.as_mut_ptr(), buf.len() as u32) }
    }

    pub fn trace_event(&mut self, name: &str) {
        unsafe { host_trace_event(name.as_ptr(), name.len() as u32) }
    }
}

// Outbound HTTP (http.rs).
#[link(wasm_import_module = "shardhost")]
extern "C" {
    #[link_name = "http_request"]
    fn host_http_request(
        mp: *const u8,
        ml: u32,
        up: *const u8,
        ul: u32,
        hp: *const u8,
        hl: u32,
        bp: *const u8,
        bl: u32,
        timeout_ms: i32,
    ) -> i32;
}

impl Host {
    /// http_request: the response as the host encodes it.
    pub fn http_request(&mut self, method: &str, url: &str, headers: &[u8], body: &[u8], timeout_ms: i32) -> Result<Vec<u8>, Error> {
        check(unsafe {
            host_http_request(
                method.as_ptr(),
                method.len() as u32,
                url.as_ptr(),
                url.len() as u32,
                headers.as_ptr(),
                headers.len() as u32,
                body.as_ptr(),
                body.len() as u32,
                timeout_ms,
            )
        })?;
        Ok(read_bytes(host_result))
    }
}
