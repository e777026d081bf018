//! Unit tests of the SDK in the Harness: entities, snapshots, JSON, shard IDs.

use super::*;
use crate::dispatch::{panic_line, Inbox};

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

/// Version 2 of Words keeps its words upper-cased; its migrate converts version 1's.
struct LoudWords {
    words: Words,
}

impl Entity for LoudWords {
    fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
        self.words.receive(ctx, &msg.to_ascii_uppercase())
    }

    fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
        self.words.snapshot()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), Error> {
        self.words.restore(state)
    }

    fn migrate(&mut self, from_version: u64, state: &[u8]) -> Result<(), Error> {
        if from_version != 1 {
            return Err(format!("no migration from version {from_version}").into());
        }
        self.words.restore(state)?;
        for w in &mut self.words.words {
            *w = w.to_ascii_uppercase();
        }
        Ok(())
    }
}

#[test]
fn harness_migrate_converts_or_refuses() {
    let mut h = words();
    h.send(b"a").unwrap();
    let state = h.snapshot().unwrap().unwrap();

    let loud = || Harness::new("words", "w", |_: &str| LoudWords { words: Words { words: Vec::new() } });
    let mut next = loud();
    next.migrate(1, &state).unwrap();
    assert_eq!(next.send(b"b").unwrap(), b"A,B");
    assert!(next.migrate(1, &state).is_err(), "once, before the first message");

    let mut refused = loud();
    assert_eq!(refused.migrate(5, &state).unwrap_err().to_string(), "no migration from version 5");
    assert!(refused.entity().is_none(), "a refused migration keeps nothing");

    // Without its own migrate, an entity restores.
    let mut plain = words();
    plain.migrate(9, &state).unwrap();
    assert_eq!(plain.send(b"c").unwrap(), b"a,c");
}
