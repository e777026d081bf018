//! abitest-rust is the ABI v1 conformance module in Rust: each text command exercises one
//! part of the host ABI through the Rust SDK, and the host's tests send the same commands
//! to this module and to its Go twin and compare the replies. See README.md for the
//! commands; an error reply is an entity error whose text is given there (a host function's
//! failure is "code N: TEXT", N the ABI code).
//!
//! Messages of kind 1 (timer), 2 (changed) and 10 (reminder) are not commands: each is
//! recorded as the line "KIND SOURCE PAYLOAD" (a reminder's with " due=DUEMS" after it) in
//! an event list ("events" replies it) and gets no reply. Nor is a scheduled message (from
//! outside, with a due time): its line is "0 scheduled PAYLOAD due=DUEMS".
//!
//! Its state (count, events, activations, passivations) is a guest-level snapshot: a version
//! byte (1), count, activations and passivations as 8 bytes little-endian each, the number
//! of events as 4 bytes little-endian and each event as its length (4 bytes) and bytes.
//!
//! Build: make bin/wasm/abitest-rust.wasm.

use shardhost::{Context, Entity, Error, MessageKind};
use std::time::Duration;

const STATE_V1: u8 = 1;

#[derive(Default)]
pub struct AbiTest {
    count: u64,
    activations: u64,
    passivations: u64,
    events: Vec<Vec<u8>>,
    /// What "grow" allocates, kept so that the allocations stay.
    hoard: Vec<Vec<u8>>,
}

impl AbiTest {
    pub fn new(_id: &str) -> AbiTest {
        AbiTest::default()
    }
}

/// A host function's failure as this module replies it: "code N: TEXT".
fn coded(e: Error) -> Error {
    Error::new(format!("code {}: {}", e.code().number(), e.message()))
}

/// Splits at the first space: (before, after); after is empty without a space.
fn split(b: &[u8]) -> (&[u8], &[u8]) {
    match b.iter().position(|&c| c == b' ') {
        Some(i) => (&b[..i], &b[i + 1..]),
        None => (b, &b[b.len()..]),
    }
}

fn text(b: &[u8]) -> Result<&str, Error> {
    std::str::from_utf8(b).map_err(|_| Error::new("unknown command"))
}

/// "TYPE/ID" as (TYPE, ID); without a slash the ID is empty (which the host refuses).
fn target(b: &[u8]) -> Result<(&str, &str), Error> {
    let t = text(b)?;
    Ok(t.split_once('/').unwrap_or((t, "")))
}

fn number(b: &[u8]) -> Result<i64, Error> {
    text(b)?.parse::<i64>().map_err(|_| Error::new(format!("bad number {:?}", String::from_utf8_lossy(b))))
}

/// A consistency argument: "-" is the empty string.
fn cons(b: &[u8]) -> Result<&str, Error> {
    let c = text(b)?;
    Ok(if c == "-" { "" } else { c })
}

fn ms(n: i64) -> Duration {
    Duration::from_millis(n.max(0) as u64)
}

const OK: &[u8] = b"ok";

impl Entity for AbiTest {
    fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
        let kind = ctx.kind();
        if kind != MessageKind::Message {
            let mut line = format!("{} {} ", kind.number(), ctx.sender()).into_bytes();
            line.extend_from_slice(msg);
            if let Some(due) = ctx.reminder_due() {
                line.extend_from_slice(format!(" due={}", due).as_bytes());
            }
            self.events.push(line);
            return Ok(Vec::new());
        }
        if let Some(due) = ctx.scheduled_due() {
            // A scheduled message: kept as an event with its due time, not run.
            let mut line = b"0 scheduled ".to_vec();
            line.extend_from_slice(msg);
            line.extend_from_slice(format!(" due={}", due).as_bytes());
            self.events.push(line);
            return Ok(Vec::new());
        }
        let (cmd, rest) = split(msg);
        match cmd {
            b"echo" => Ok(rest.to_vec()),
            b"whoami" => Ok(format!("{}/{}", ctx.entity_type(), ctx.entity_id()).into_bytes()),
            b"source" => Ok(format!("{} {}", kind.number(), ctx.sender()).into_bytes()),
            b"tell" => {
                let (t, m) = split(rest);
                let (typ, id) = target(t)?;
                ctx.tell(typ, id, m).map_err(coded)?;
                Ok(OK.to_vec())
            }
            b"ask" => {
                let (t, m) = split(rest);
                let (typ, id) = target(t)?;
                ctx.ask(typ, id, m, None).map_err(coded)
            }
            b"askms" => {
                let (n, rest) = split(rest);
                let timeout = ms(number(n)?);
                let (t, m) = split(rest);
                let (typ, id) = target(t)?;
                ctx.ask(typ, id, m, Some(timeout)).map_err(coded)
            }
            b"tellkey" | b"askkey" => {
                let (key, rest) = split(rest);
                let (t, m) = split(rest);
                let (key, (typ, id)) = (text(key)?, target(t)?);
                if cmd == b"askkey" {
                    return ctx.ask_with_key(typ, id, m, key, None).map_err(coded);
                }
                ctx.tell_with_key(typ, id, m, key).map_err(coded)?;
                Ok(OK.to_vec())
            }
            b"askself" => {
                let (typ, id) = (ctx.entity_type().to_string(), ctx.entity_id().to_string());
                ctx.ask(&typ, &id, b"echo x", None).map_err(coded)
            }
            b"fwd" => {
                let (t, r) = split(rest);
                let (typ, id) = target(t)?;
                if typ == ctx.entity_type() && id == ctx.entity_id() {
                    let mut out = b"got ".to_vec();
                    out.extend_from_slice(r);
                    out.extend_from_slice(b" from ");
                    out.extend_from_slice(ctx.sender().as_bytes());
                    return Ok(out);
                }
                ctx.forward(typ, id).map_err(coded)?;
                Ok(Vec::new())
            }
            b"ddget" => {
                let (k, c) = split(rest);
                ctx.ddata_get(text(k)?, cons(c)?, None).map(String::into_bytes).map_err(coded)
            }
            b"ddup" => {
                let (k, rest) = split(rest);
                let (t, rest) = split(rest);
                let (c, op) = split(rest);
                ctx.ddata_update(text(k)?, text(t)?, text(op)?, cons(c)?, None).map(String::into_bytes).map_err(coded)
            }
            b"dddel" => {
                let (k, c) = split(rest);
                ctx.ddata_delete(text(k)?, cons(c)?, None).map_err(coded)?;
                Ok(OK.to_vec())
            }
            b"sub" => {
                ctx.subscribe(text(rest)?).map_err(coded)?;
                Ok(OK.to_vec())
            }
            b"unsub" => {
                ctx.unsubscribe(text(rest)?).map_err(coded)?;
                Ok(OK.to_vec())
            }
            b"timer" => {
                let (name, rest) = split(rest);
                let (delay, rest) = split(rest);
                let (interval, m) = split(rest);
                let (name, delay, interval) = (text(name)?, number(delay)?, number(interval)?);
                let r = if interval > 0 {
                    ctx.start_repeating_timer(name, m, ms(delay), ms(interval))
                } else {
                    ctx.start_timer(name, m, ms(delay))
                };
                r.map_err(coded)?;
                Ok(OK.to_vec())
            }
            b"cancel" => Ok(if ctx.cancel_timer(text(rest)?) { b"1".to_vec() } else { b"0".to_vec() }),
            b"remind" => {
                let (name, rest) = split(rest);
                let (inms, rest) = split(rest);
                let (interval, m) = split(rest);
                let (name, inms, interval) = (text(name)?, number(inms)?, number(interval)?);
                let due = ctx.now_wall() / 1_000_000 + inms;
                ctx.set_reminder(name, due, interval, m).map_err(coded)?;
                Ok(OK.to_vec())
            }
            b"unremind" => Ok(if ctx.cancel_reminder(text(rest)?).map_err(coded)? { b"1".to_vec() } else { b"0".to_vec() }),
            b"reminders" => {
                let rs = ctx.reminders().map_err(coded)?;
                let lines: Vec<Vec<u8>> = rs
                    .iter()
                    .map(|r| {
                        let mut l = format!("{} {} {} ", r.name, r.due_unix_ms, r.interval_ms).into_bytes();
                        l.extend_from_slice(&r.payload);
                        l
                    })
                    .collect();
                Ok(lines.join(&b'\n'))
            }
            b"events" => Ok(self.events.join(&b'\n')),
            b"now" => {
                let wall = ctx.now_wall();
                let mono = ctx.now_monotonic();
                Ok(format!("{} {}", wall, mono).into_bytes())
            }
            b"random" => {
                let n = number(rest)?.max(0) as usize;
                let mut b = vec![0u8; n];
                ctx.random(&mut b);
                let mut hex = String::with_capacity(2 * n);
                for x in b {
                    hex.push_str(&format!("{:02x}", x));
                }
                Ok(hex.into_bytes())
            }
            b"trace" => {
                ctx.trace_event(&String::from_utf8_lossy(rest));
                Ok(OK.to_vec())
            }
            b"count" => {
                self.count += 1;
                Ok(self.count.to_string().into_bytes())
            }
            b"hooks" => Ok(format!("activations={} passivations={}", self.activations, self.passivations).into_bytes()),
            b"passivate" => {
                ctx.passivate();
                Ok(OK.to_vec())
            }
            b"budget" => {
                for _ in 0..number(rest)? {
                    ctx.now_monotonic();
                }
                Ok(OK.to_vec())
            }
            b"trap" => panic!("abitest: trap requested"),
            b"loop" => {
                let mut n = 0u64;
                loop {
                    // A volatile write: the loop is not optimised away.
                    unsafe { std::ptr::write_volatile(&mut n, n.wrapping_add(1)) };
                }
            }
            b"grow" => loop {
                let mut chunk: Vec<u8> = Vec::new();
                if chunk.try_reserve_exact(1 << 20).is_err() || self.hoard.try_reserve(1).is_err() {
                    // Out of memory (the instance's cap): free the hoard so that the panic
                    // can format its message, then trap with it.
                    let mib = self.hoard.len();
                    self.hoard = Vec::new();
                    panic!("abitest: grow: out of memory after {} MiB", mib);
                }
                chunk.resize(1 << 20, 0);
                for i in (0..chunk.len()).step_by(4096) {
                    unsafe { std::ptr::write_volatile(&mut chunk[i], 1) };
                }
                self.hoard.push(chunk);
            },
            // A memory bomb as Rust code usually is one: an allocation that cannot be
            // made ends in std's allocation error handler, which aborts (a trap) without
            // a word on wasm32-unknown-unknown.
            b"bomb" => loop {
                self.hoard.push(vec![1u8; 1 << 20]);
            },
            _ => Err(Error::new("unknown command")),
        }
    }

    fn on_activate(&mut self, _ctx: &mut Context) -> Result<(), Error> {
        self.activations += 1;
        Ok(())
    }

    fn on_passivate(&mut self, _ctx: &mut Context) {
        self.passivations += 1;
    }

    fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
        let mut s = vec![STATE_V1];
        for n in [self.count, self.activations, self.passivations] {
            s.extend_from_slice(&n.to_le_bytes());
        }
        s.extend_from_slice(&(self.events.len() as u32).to_le_bytes());
        for e in &self.events {
            s.extend_from_slice(&(e.len() as u32).to_le_bytes());
            s.extend_from_slice(e);
        }
        Some(Ok(s))
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), Error> {
        let bad = || Error::new("abitest: malformed state");
        let mut r = Reader(state);
        if r.take(1).ok_or_else(bad)? != [STATE_V1] {
            return Err(bad());
        }
        let u64_ = |r: &mut Reader| r.take(8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
        let u32_ = |r: &mut Reader| r.take(4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
        self.count = u64_(&mut r).ok_or_else(bad)?;
        self.activations = u64_(&mut r).ok_or_else(bad)?;
        self.passivations = u64_(&mut r).ok_or_else(bad)?;
        let n = u32_(&mut r).ok_or_else(bad)?;
        let mut events = Vec::new();
        for _ in 0..n {
            let len = u32_(&mut r).ok_or_else(bad)?;
            events.push(r.take(len).ok_or_else(bad)?.to_vec());
        }
        if !r.0.is_empty() {
            return Err(bad());
        }
        self.events = events;
        Ok(())
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
}

shardhost::entity!(AbiTest, |id: &str| AbiTest::new(id));

#[cfg(test)]
mod tests {
    use super::AbiTest;
    use shardhost::{Code, Error, Harness, MessageKind};
    use std::time::Duration;

    fn harness() -> Harness<AbiTest> {
        Harness::new("abitest-rust", "a1", |id: &str| AbiTest::new(id))
    }

    fn reply(h: &mut Harness<AbiTest>, msg: &str) -> String {
        match h.send(msg.as_bytes()) {
            Ok(b) => String::from_utf8(b).unwrap(),
            Err(e) => format!("ERR {}", e.message()),
        }
    }

    fn check(h: &mut Harness<AbiTest>, steps: &[(&str, &str)]) {
        for (msg, want) in steps {
            assert_eq!(reply(h, msg), *want, "{}", msg);
        }
    }

    #[test]
    fn basics() {
        let mut h = harness();
        check(
            &mut h,
            &[
                ("echo hello world", "hello world"),
                ("echo", ""),
                ("whoami", "abitest-rust/a1"),
                ("source", "0 "),
                ("count", "1"),
                ("count", "2"),
                ("trace step one", "ok"),
                ("nope", "ERR unknown command"),
                ("", "ERR unknown command"),
                ("events", ""),
            ],
        );
        assert_eq!(h.send_from("abitest-go/b", b"source").unwrap(), b"0 abitest-go/b");
        assert_eq!(h.trace_events(), ["step one"]);
        assert_eq!(h.send(b"\xff\xfe").unwrap_err().message(), "unknown command");
        assert_eq!(h.send(b"echo \xff").unwrap(), b"\xff");
    }

    #[test]
    fn tell_and_ask() {
        let mut h = harness();
        h.on_ask(|typ, id, msg| match id {
            "err" => Err("it failed".into()),
            "slow" => Err(Error::with_code(Code::Timeout, "ask timed out")),
            _ => Ok(format!("{}/{}: {}", typ, id, String::from_utf8_lossy(msg)).into_bytes()),
        });
        check(
            &mut h,
            &[
                ("tell other/x hello there", "ok"),
                ("tell other/ hi", "ERR code 7: shardhost: empty entity ID"),
                ("tell other", "ERR code 7: shardhost: empty entity ID"),
                ("ask other/y what now", "other/y: what now"),
                ("ask other/err x", "ERR code 9: it failed"),
                ("askms 250 other/slow x", "ERR code 4: ask timed out"),
                ("askms 250 other/z x", "other/z: x"),
                ("askms x other/z x", "ERR bad number \"x\""),
                ("askself", "ERR code 5: shardhost: ask cycle: abitest-rust/a1 asks itself"),
            ],
        );
        assert_eq!(h.tells().len(), 1);
        assert_eq!(h.tells()[0].to_string(), "other/x hello there");
        let asks: Vec<String> = h.asks().iter().map(|a| a.to_string()).collect();
        assert_eq!(asks, ["other/y what now", "other/err x", "other/slow x", "other/z x", "abitest-rust/a1 echo x"]);
        assert_eq!(h.asks()[3].timeout, Some(Duration::from_millis(250)));
        assert_eq!(h.asks()[0].timeout, None);
    }

    #[test]
    fn sends_with_keys() {
        let mut h = harness();
        h.on_ask(|typ, id, msg| Ok(format!("{}/{}: {}", typ, id, String::from_utf8_lossy(msg)).into_bytes()));
        let long = format!("tellkey {} other/x count", "k".repeat(257));
        check(
            &mut h,
            &[
                ("tellkey k1 other/x count", "ok"),
                ("askkey k2 other/y count now", "other/y: count now"),
                ("tellkey k1 other/ count", "ERR code 7: shardhost: empty entity ID"),
                (&long, "ERR code 7: shardhost: invalid idempotency key: 257 bytes (at most 256)"),
                ("askkey k3", "ERR code 7: shardhost: bad entity type \"\""),
            ],
        );
        let sent: Vec<(String, Option<String>)> = h.tells().iter().chain(h.asks()).map(|s| (s.to_string(), s.key.clone())).collect();
        assert_eq!(
            sent,
            [("other/x count".to_string(), Some("k1".to_string())), ("other/y count now".to_string(), Some("k2".to_string()))]
        );
    }

    #[test]
    fn forward() {
        let mut h = harness();
        assert_eq!(h.send_from("x/y", b"fwd abitest-rust/a1 some words").unwrap(), b"got some words from x/y");
        assert_eq!(h.forwarded(), None);
        assert_eq!(h.send_from("x/y", b"fwd abitest-go/b some words").unwrap(), b"");
        assert_eq!(h.forwarded(), Some("abitest-go/b"));
        assert_eq!(reply(&mut h, "fwd abitest-rust/a1"), "got  from ");
        assert_eq!(reply(&mut h, "fwd abitest-go/"), "ERR code 7: shardhost: empty entity ID");
    }

    #[test]
    fn ddata() {
        let mut h = harness();
        check(
            &mut h,
            &[
                ("ddget k local", "ERR code 2: shardhost: ddata key \"k\" not found"),
                ("ddup k pncounter majority incr 5", "5"),
                ("ddup k pncounter - decr", "4"),
                ("ddget k all", "4"),
                ("ddget k -", "4"),
                ("ddup k orset local add x", "ERR code 10: shardhost: ddata key \"k\" holds a pncounter, not a orset"),
                ("ddup s orset majority+1 add two words", "[\"two words\"]"),
                ("ddup s orset bogus add x", "ERR code 7: shardhost: consistency \"bogus\": want local, majority, majority+K, all or a number of replicas"),
                ("ddup r lwwregister 2 set v", "\"v\""),
                ("dddel k majority", "ok"),
                ("ddget k local", "ERR code 3: shardhost: ddata key \"k\" was deleted"),
                ("dddel k local", "ERR code 3: shardhost: ddata key \"k\" was deleted"),
                ("sub s", "ok"),
                ("sub ", "ERR code 7: shardhost: empty ddata key"),
                ("unsub s", "ok"),
                ("unsub s", "ok"),
            ],
        );
        h.send(b"sub s").unwrap();
        assert_eq!(h.subscriptions(), ["s"]);
        h.ddata_update("s", "orset", "add y").unwrap();
        assert_eq!(h.changed("s").unwrap(), b"", "no reply to a changed value");
        assert_eq!(reply(&mut h, "events"), "2 s [\"two words\",\"y\"]");
    }

    #[test]
    fn timers_and_events() {
        let mut h = harness();
        check(
            &mut h,
            &[
                ("timer once 50 0 one shot", "ok"),
                ("timer every 10 1000 tick", "ok"),
                ("timer x 10 0", "ok"),
                ("cancel x", "1"),
                ("cancel x", "0"),
            ],
        );
        let long = format!("timer {} 1 0 m", "n".repeat(257));
        assert_eq!(reply(&mut h, &long), "ERR code 7: shardhost: timer name of 257 bytes (want 1 to 256)");
        let timers = h.timers();
        assert_eq!(timers.len(), 2);
        assert_eq!(timers[0].interval, Some(Duration::from_secs(1)));
        assert_eq!(timers[1].delay, Duration::from_millis(50));
        assert_eq!(h.fire_timer("once").unwrap(), b"");
        assert_eq!(h.fire_timer("every").unwrap(), b"");
        assert_eq!(h.fire_timer("every").unwrap(), b"");
        assert_eq!(h.deliver(MessageKind::Changed, "k", b"true").unwrap(), b"");
        assert_eq!(reply(&mut h, "events"), "1 once one shot\n1 every tick\n1 every tick\n2 k true");
        assert_eq!(reply(&mut h, "cancel every"), "1");
        assert!(h.timers().is_empty());
    }

    #[test]
    fn time_random_budget() {
        let mut h = harness();
        h.set_wall(1_700_000_000_123_456_789);
        assert_eq!(reply(&mut h, "now"), "1700000000123456789 1000000000");
        h.advance(Duration::from_nanos(5));
        assert_eq!(reply(&mut h, "now"), "1700000000123456794 1000000005");
        h.set_seed(42);
        let r = reply(&mut h, "random 16");
        assert_eq!(r.len(), 32);
        assert!(r.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)), "{}", r);
        h.set_seed(42);
        assert_eq!(reply(&mut h, "random 16"), r, "seeded");
        assert_eq!(reply(&mut h, "random 0"), "");
        assert_eq!(reply(&mut h, "budget 100"), "ok");
        // Every message first asks whether it is a scheduled one (scheduled_due: the
        // sender and the due time), so a command's budget is three calls less.
        assert_eq!(h.host_calls(), 103, "the kind, the sender, the due time and 100 clock readings");
        assert_eq!(reply(&mut h, "budget 9997"), "ok");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.send(b"budget 9998")));
        assert!(r.is_err(), "the call past the budget traps");
    }

    #[test]
    #[should_panic(expected = "abitest: trap requested")]
    fn trap_panics() {
        let mut h = harness();
        let _ = h.send(b"trap");
    }

    #[test]
    fn hooks_passivate_and_state() {
        let mut h = harness();
        check(&mut h, &[("hooks", "activations=1 passivations=0"), ("count", "1"), ("passivate", "ok")]);
        assert!(h.passivated());
        h.deliver(MessageKind::Timer, "t", b"m").unwrap();
        h.reincarnate().unwrap();
        check(&mut h, &[("hooks", "activations=2 passivations=1"), ("count", "2"), ("events", "1 t m")]);

        let state = h.stop().unwrap().unwrap();
        let mut next = harness();
        next.restore(&state).unwrap();
        check(&mut next, &[("hooks", "activations=3 passivations=2"), ("count", "3"), ("events", "1 t m")]);
        assert_eq!(next.snapshot().unwrap().unwrap().len(), 1 + 24 + 4 + 4 + 5);
    }

    #[test]
    fn restore_refuses_malformed_state() {
        let good = {
            let mut h = harness();
            h.send(b"count").unwrap();
            h.snapshot().unwrap().unwrap()
        };
        let mut bad_cases: Vec<Vec<u8>> = vec![Vec::new(), vec![2], good[..good.len() - 1].to_vec()];
        let mut extra = good.clone();
        extra.push(0);
        bad_cases.push(extra);
        for state in bad_cases {
            let mut h = harness();
            assert_eq!(h.restore(&state).unwrap_err().message(), "abitest: malformed state", "{:?}", state);
        }
        let mut h = harness();
        h.restore(&good).unwrap();
        assert_eq!(h.send(b"count").unwrap(), b"2");
    }
}
