//! The Harness: a fake host that runs an entity natively, for its unit tests.

use crate::dispatch::Dispatcher;
use crate::{Code, Context, Entity, Error, Json, LogLevel, MessageKind};
use crate::{DEFAULT_CALL_BUDGET, MAX_IDEMPOTENCY_KEY, MAX_MESSAGE_SIZE, MAX_TIMERS, MAX_TIMER_MESSAGE, MAX_TIMER_NAME};
use crate::{Reminder, MAX_REMINDERS, MAX_REMINDER_NAME, MAX_REMINDER_PAYLOAD, MIN_REMINDER_INTERVAL_MS};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;
#[cfg(doc)] // names the docs link to
use crate::MAX_SNAPSHOT_SIZE;

/// A message an entity sent through a [`Harness`] with [`Context::tell`] or
/// [`Context::ask`] (or their `_with_key` forms). `Display` writes `TYPE/ID MSG` (the
/// message as lossy UTF-8).
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
    /// The idempotency key of [`Context::tell_with_key`] or [`Context::ask_with_key`]
    /// (`None` without one, or for an empty key).
    pub key: Option<String>,
}

impl fmt::Display for Sent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} {}", self.typ, self.id, String::from_utf8_lossy(&self.msg))
    }
}

/// A timer an entity started in a [`Harness`].
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Receive,
    Activate,
    Passivate,
    Query,
}

type AskHandler = Box<dyn FnMut(&str, &str, &[u8]) -> Result<Vec<u8>, Error>>;
type HttpHandler = Box<dyn FnMut(&crate::HttpRequest) -> Result<crate::HttpResponse, Error>>;

/// The fake host of a [`Harness`]: what the entity's [`Context`] calls natively. Its
/// methods are those of the wasm32 host (`wasm.rs`), one per host function.
pub(crate) struct Fake {
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
    /// The entity's durable reminders, by name, and the due time of the one being
    /// delivered (0 for none).
    reminders: BTreeMap<String, Reminder>,
    due: i64,
    wall: i64,
    mono: i64,
    rng: u64,
    traces: Vec<String>,
    http_handler: Option<HttpHandler>,
    http_requests: Vec<crate::HttpRequest>,
}

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
            reminders: BTreeMap::new(),
            due: 0,
            wall: Harness::<()>::DEFAULT_WALL,
            mono: Harness::<()>::DEFAULT_MONOTONIC,
            rng: 0,
            traces: Vec::new(),
            http_handler: None,
            http_requests: Vec::new(),
        }
    }
}

fn bad_request(msg: impl Into<String>) -> Error {
    Error::with_code(Code::BadRequest, msg)
}

/// Checks an idempotency key as the host does (a `&str` is UTF-8 already); an empty key
/// is none.
fn check_key(key: &str) -> Result<Option<String>, Error> {
    if key.len() > MAX_IDEMPOTENCY_KEY {
        return Err(bad_request(format!(
            "shardhost: invalid idempotency key: {} bytes (at most {})",
            key.len(),
            MAX_IDEMPOTENCY_KEY
        )));
    }
    Ok(if key.is_empty() { None } else { Some(key.to_string()) })
}

impl Fake {
    /// Counts a host call against the budget; the call past it traps, here a panic.
    fn call(&self) {
        self.calls.set(self.calls.get() + 1);
        if self.calls.get() > self.budget {
            panic!("shardhost: host call budget of {} calls exceeded (the host traps)", self.budget);
        }
    }

    /// Fails a call that would change something inside a query, as the host does.
    fn writable(&self, f: &str) -> Result<(), Error> {
        if self.phase == Phase::Query {
            return Err(Error::with_code(Code::ReadOnly, format!("shardhost: {} would change something, and a query changes nothing", f)));
        }
        Ok(())
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

    /// http_request, as the host: decoded, handed to the handler, the answer encoded.
    pub(crate) fn http_request(&mut self, method: &str, url: &str, headers: &[u8], body: &[u8], timeout_ms: i32) -> Result<Vec<u8>, Error> {
        self.coded()?;
        if self.phase != Phase::Receive && self.phase != Phase::Activate {
            return Err(Error::with_code(Code::NotAllowed, "http_request outside a message or on_activate"));
        }
        let req = crate::HttpRequest {
            method: if method.is_empty() { "GET".to_string() } else { method.to_string() },
            url: url.to_string(),
            headers: crate::http::decode_headers(headers),
            body: body.to_vec(),
            timeout: if timeout_ms > 0 { Some(std::time::Duration::from_millis(timeout_ms as u64)) } else { None },
        };
        let mut handler = match self.http_handler.take() {
            Some(h) => h,
            None => {
                return Err(Error::with_code(
                    Code::EgressDenied,
                    format!("egress-denied: {} is not on the entity type's egress allowlist (no Harness::on_http)", url),
                ))
            }
        };
        self.http_requests.push(req.clone());
        let res = handler(&req);
        self.http_handler = Some(handler);
        res.map(|r| crate::http::encode_response(&r))
    }

    pub(crate) fn tell(&mut self, typ: &str, id: &str, msg: &[u8]) -> Result<(), Error> {
        self.tell_key(typ, id, msg, "")
    }

    pub(crate) fn tell_key(&mut self, typ: &str, id: &str, msg: &[u8], key: &str) -> Result<(), Error> {
        self.coded()?;
        self.writable("tell")?;
        self.check_messaging(typ, id, msg.len())?;
        let key = check_key(key)?;
        self.tells.push(Sent { typ: typ.to_string(), id: id.to_string(), msg: msg.to_vec(), timeout: None, key });
        Ok(())
    }

    pub(crate) fn ask(&mut self, own_type: &str, own_id: &str, typ: &str, id: &str, msg: &[u8], timeout_ms: i32) -> Result<Vec<u8>, Error> {
        self.ask_key(own_type, own_id, typ, id, msg, "", timeout_ms)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn ask_key(
        &mut self,
        own_type: &str,
        own_id: &str,
        typ: &str,
        id: &str,
        msg: &[u8],
        key: &str,
        timeout_ms: i32,
    ) -> Result<Vec<u8>, Error> {
        self.coded()?;
        self.writable("ask")?;
        self.check_messaging(typ, id, msg.len())?;
        let key = check_key(key)?;
        let timeout = if timeout_ms > 0 { Some(Duration::from_millis(timeout_ms as u64)) } else { None };
        self.asks.push(Sent { typ: typ.to_string(), id: id.to_string(), msg: msg.to_vec(), timeout, key });
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

    pub(crate) fn forward(&mut self, typ: &str, id: &str) -> Result<(), Error> {
        self.coded()?;
        self.writable("forward")?;
        if self.phase != Phase::Receive || self.kind != MessageKind::Message {
            return Err(Error::with_code(Code::NotAllowed, "shardhost: forward is only valid for a message of kind 0 in receive"));
        }
        self.check_messaging(typ, id, 0)?;
        self.forward = Some(format!("{}/{}", typ, id));
        Ok(())
    }

    pub(crate) fn ddata_get(&mut self, key: &str, cons: &str, _timeout_ms: i32) -> Result<String, Error> {
        self.coded()?;
        check_consistency(cons)?;
        self.store.get(key)
    }

    pub(crate) fn ddata_update(&mut self, key: &str, typ: &str, op: &str, cons: &str, _timeout_ms: i32) -> Result<String, Error> {
        self.call();
        self.writable("ddata_update")?;
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

    pub(crate) fn ddata_delete(&mut self, key: &str, cons: &str, _timeout_ms: i32) -> Result<(), Error> {
        self.coded()?;
        self.writable("ddata_delete")?;
        check_consistency(cons)?;
        self.store.delete(key)
    }

    pub(crate) fn subscribe(&mut self, key: &str) -> Result<(), Error> {
        self.coded()?;
        self.writable("ddata_subscribe")?;
        if key.is_empty() {
            return Err(bad_request("shardhost: empty ddata key"));
        }
        self.subscriptions.insert(key.to_string());
        Ok(())
    }

    pub(crate) fn unsubscribe(&mut self, key: &str) -> Result<(), Error> {
        self.coded()?;
        self.writable("ddata_unsubscribe")?;
        self.subscriptions.remove(key);
        Ok(())
    }

    pub(crate) fn timer_start(&mut self, name: &str, msg: &[u8], delay_ms: i64, interval_ms: i64) -> Result<(), Error> {
        self.coded()?;
        self.writable("timer_start")?;
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

    pub(crate) fn reminder_set(&mut self, name: &str, due_ms: i64, interval_ms: i64, payload: &[u8]) -> Result<(), Error> {
        self.coded()?;
        if name.is_empty() || name.len() > MAX_REMINDER_NAME {
            return Err(bad_request(format!("shardhost: reminder name of {} bytes (want 1 to {})", name.len(), MAX_REMINDER_NAME)));
        }
        if due_ms < 0 {
            return Err(bad_request(format!("shardhost: negative due time {}", due_ms)));
        }
        if interval_ms < 0 || (interval_ms > 0 && interval_ms < MIN_REMINDER_INTERVAL_MS) {
            return Err(bad_request(format!("shardhost: an interval of {} ms (0 or at least {})", interval_ms, MIN_REMINDER_INTERVAL_MS)));
        }
        if payload.len() > MAX_REMINDER_PAYLOAD {
            return Err(bad_request(format!("shardhost: reminder payload of {} bytes is over {}", payload.len(), MAX_REMINDER_PAYLOAD)));
        }
        if self.reminders.len() >= MAX_REMINDERS && !self.reminders.contains_key(name) {
            return Err(bad_request(format!("shardhost: too many reminders (at most {})", MAX_REMINDERS)));
        }
        let r = Reminder { name: name.to_string(), due_unix_ms: due_ms, interval_ms, payload: payload.to_vec() };
        self.reminders.insert(name.to_string(), r);
        Ok(())
    }

    pub(crate) fn reminder_cancel(&mut self, name: &str) -> Result<(), Error> {
        self.coded()?;
        match self.reminders.remove(name) {
            Some(_) => Ok(()),
            None => Err(Error::with_code(Code::NotFound, format!("shardhost: no reminder {:?}", name))),
        }
    }

    pub(crate) fn reminder_list(&mut self) -> Result<Vec<u8>, Error> {
        self.coded()?;
        let rs: Vec<Reminder> = self.reminders.values().cloned().collect();
        Ok(crate::reminders::encode(&rs))
    }

    pub(crate) fn reminder_due(&self) -> i64 {
        self.call();
        self.due
    }

    pub(crate) fn timer_cancel(&mut self, name: &str) -> bool {
        self.call();
        if self.phase == Phase::Query {
            return false;
        }
        self.timers.remove(name).is_some()
    }

    pub(crate) fn log(&mut self, level: LogLevel, msg: &str) {
        self.call();
        self.logs.push(format!("{} {}", level.name(), msg));
    }

    pub(crate) fn passivate(&mut self) {
        self.call();
        self.only_in_receive("passivate");
        self.passivate = true;
    }

    /// The current message's kind: read from the host once per message, as the SDK does
    /// on wasm32.
    pub(crate) fn message_kind(&self) -> MessageKind {
        if !self.kind_read.replace(true) {
            self.call();
        }
        self.only_in_receive("message_kind");
        self.kind
    }

    /// The current message's sender, read once per message.
    pub(crate) fn sender(&self) -> String {
        if !self.sender_read.replace(true) {
            self.call();
        }
        self.sender.clone()
    }

    /// The wall clock (clock 0) or the monotonic one (1).
    pub(crate) fn now(&mut self, clock: i32) -> i64 {
        self.call();
        if clock == 0 {
            self.wall
        } else {
            self.mono
        }
    }

    /// Records a trace event, cut at 256 bytes as a host cuts it.
    pub(crate) fn trace_event(&mut self, name: &str) {
        self.call();
        let mut end = name.len().min(256);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        self.traces.push(name[..end].to_string());
    }

    /// splitmix64 from the seed.
    pub(crate) fn random(&mut self, buf: &mut [u8]) {
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
pub(crate) fn check_consistency(cons: &str) -> Result<(), Error> {
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
#[derive(Default)]
struct Store {
    data: BTreeMap<String, Data>,
    deleted: std::collections::BTreeSet<String>,
}

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
/// - the messages the entity sent: [`tells`](Harness::tells), [`asks`](Harness::asks),
///   each with its idempotency key ([`Sent::key`]); asks are answered by
///   [`on_ask`](Harness::on_ask) (an ask of the entity itself fails with
///   [`Code::AskCycle`], as on a host), and [`forwarded`](Harness::forwarded) says where
///   the last message was forwarded;
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

impl<E> Harness<E> {
    /// The wall clock a harness starts at: 2024-01-01T00:00:00Z, in nanoseconds.
    pub const DEFAULT_WALL: i64 = 1_704_067_200_000_000_000;
    /// The monotonic clock a harness starts at: one second, in nanoseconds.
    pub const DEFAULT_MONOTONIC: i64 = 1_000_000_000;
}

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
        std::mem::swap(&mut ctx.host, &mut self.fake);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(entity, ctx)));
        std::mem::swap(&mut ctx.host, &mut self.fake);
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

    /// Delivers `msg` as the scheduled message due at `due_unix_ms` (sent from outside
    /// with a delivery time: [`Context::scheduled_due`] gives its due time), now,
    /// whatever the harness's clock says: a due before it is a late delivery, as after
    /// an outage.
    pub fn send_scheduled(&mut self, msg: &[u8], due_unix_ms: i64) -> Result<Vec<u8>, Error> {
        self.fake.due = due_unix_ms;
        let out = self.deliver(MessageKind::Message, "", msg);
        self.fake.due = 0;
        out
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

    /// Delivers `req` as one of the type's HTTP routes does (a message of kind
    /// [`MessageKind::Http`] handled by [`Entity::serve_http`](crate::Entity::serve_http))
    /// and returns the response as the host would send it: `None` when the entity serves
    /// no HTTP (the host answers 501), an error when it fails or answers a header with a
    /// CR, LF or NUL (or when `req` has one).
    pub fn serve_http(&mut self, req: &crate::IncomingRequest) -> Option<Result<crate::HttpResponse, Error>> {
        let payload = match crate::http::encode_request(req) {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        if !self.active || self.dispatcher.live.is_none() {
            if let Err(e) = self.activate() {
                return Some(Err(e));
            }
        }
        self.fake.passivate = false;
        self.fake.forward = None;
        let r = self.enter(Phase::Receive, MessageKind::Http, "", |e, ctx| crate::http::serve(e, ctx, &payload))?;
        Some(r.and_then(|out| crate::http::decode_response(&out)))
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

    /// The entity's durable reminders, by name.
    pub fn reminders(&self) -> Vec<Reminder> {
        self.fake.reminders.values().cloned().collect()
    }

    /// Delivers the reminder `name` (kind [`MessageKind::Reminder`], the name as sender,
    /// [`Context::reminder_due`] its due time), whenever it is due; then, as the host does
    /// after a delivery, a repeating reminder moves on to its first due after the harness's
    /// wall clock and a one-shot is deleted (unless the entity set it anew meanwhile).
    ///
    /// # Panics
    /// If the entity has no reminder of that name.
    pub fn fire_reminder(&mut self, name: &str) -> Result<Vec<u8>, Error> {
        let r = match self.fake.reminders.get(name) {
            Some(r) => r.clone(),
            None => panic!("shardhost: no reminder {:?} (reminders: {:?})", name, self.fake.reminders.keys().collect::<Vec<_>>()),
        };
        self.fake.due = r.due_unix_ms;
        let out = self.deliver(MessageKind::Reminder, name, &r.payload);
        self.fake.due = 0;
        let now_ms = self.fake.wall / 1_000_000;
        if let Some(cur) = self.fake.reminders.get_mut(name) {
            if cur.due_unix_ms == r.due_unix_ms {
                if cur.interval_ms > 0 {
                    let mut next = r.due_unix_ms + cur.interval_ms;
                    while next <= now_ms {
                        next += cur.interval_ms;
                    }
                    cur.due_unix_ms = next;
                } else {
                    self.fake.reminders.remove(name);
                }
            }
        }
        out
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

    /// Runs [`Entity::query`] as the host does (abi/SPEC.md, "Queries"): on the entity as
    /// it is (created first if no message or restore has; not activated), with the calls
    /// that would change anything failing with [`Code::ReadOnly`]. The host runs it on a
    /// throwaway copy of the entity's saved state; `query` takes `&self`, so the entity
    /// here is not changed either. `None` when the entity answers no query (the default
    /// [`Entity::query`]).
    pub fn query(&mut self, payload: &[u8]) -> Option<Result<Vec<u8>, Error>> {
        self.enter(Phase::Query, MessageKind::Message, "", |e, ctx| e.query(ctx, payload))
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

    /// Starts the entity from `state`, which the type's module version `from_version`
    /// saved, as the host does when it moves an entity to a new version: creates it with
    /// the factory and calls [`Entity::migrate`]. Use it on a fresh harness; if the entity
    /// refuses the state, the harness stays fresh.
    pub fn migrate(&mut self, from_version: u64, state: &[u8]) -> Result<(), Error> {
        let (typ, id, factory) = (&self.entity_type, &self.entity_id, &mut self.factory);
        self.dispatcher.migrate(from_version, state, || start(typ, id, factory))?;
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
    /// [`Code::Timeout`], keeps it). Without one, asks fail with [`Code::Unavailable`]. It
    /// stands for the asked entity, but it is called for every ask, even one whose
    /// idempotency key it saw ([`asks`](Harness::asks) has the keys); a real entity answers
    /// such a repeat with its first reply.
    pub fn on_ask(&mut self, f: impl FnMut(&str, &str, &[u8]) -> Result<Vec<u8>, Error> + 'static) {
        self.fake.ask_handler = Some(Box::new(f));
    }

    /// Answers the entity's outbound HTTP requests ([`Context::http`]) with `f`, which
    /// stands for the outside services and the type's egress settings (return
    /// `Err(Error::with_code(Code::EgressDenied, ...))` and the like for the host's
    /// refusals). Without it every request fails with [`Code::EgressDenied`], as for a
    /// type deployed without `--egress`.
    pub fn on_http(&mut self, f: impl FnMut(&crate::HttpRequest) -> Result<crate::HttpResponse, Error> + 'static) {
        self.fake.http_handler = Some(Box::new(f));
    }

    /// The outbound HTTP requests that reached the handler of [`on_http`](Self::on_http),
    /// oldest first.
    pub fn http_requests(&self) -> &[crate::HttpRequest] {
        &self.fake.http_requests
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
fn start<E>(typ: &str, id: &str, factory: &mut dyn FnMut(&str) -> E) -> (E, Context) {
    let ctx = Context::new(typ.to_string(), id.to_string(), Fake::default());
    (factory(id), ctx)
}
