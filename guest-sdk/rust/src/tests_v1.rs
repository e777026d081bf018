//! Tests of ABI v1 in the Harness: messaging, distributed data, timers, hooks, clocks.

use super::*;
use crate::context::{duration_ms, timeout_ms};
use crate::harness::check_consistency;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

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
    assert_eq!(h.tells()[0], Sent { typ: "other".into(), id: "x".into(), msg: b"hi".to_vec(), timeout: None, key: None });
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

#[test]
fn sends_with_idempotency_keys() {
    let (mut h, _) = scripted(|ctx, msg| {
        let m = std::str::from_utf8(msg)?;
        let (cmd, key) = m.split_once(' ').unwrap_or((m, ""));
        match cmd {
            "tell" => ctx.tell_with_key("ledger", "l1", b"credit 5", key).map(|()| b"ok".to_vec()),
            "ask" => ctx.ask_with_key("ledger", "l1", b"debit 5", key, Some(Duration::from_secs(1))),
            "plain" => {
                ctx.tell("ledger", "l1", b"x")?;
                ctx.ask("ledger", "l1", b"y", None)
            }
            _ => Err("?".into()),
        }
    });
    h.on_ask(|typ, id, msg| Ok(format!("{}/{} {}", typ, id, String::from_utf8_lossy(msg)).into_bytes()));
    for _ in 0..2 {
        assert_eq!(text(h.send(b"tell pay-7")), "ok");
        assert_eq!(text(h.send(b"ask pay-8")), "ledger/l1 debit 5");
    }
    assert_eq!(text(h.send(b"tell ")), "ok");
    assert_eq!(text(h.send(b"plain")), "ledger/l1 y");
    let keys = |s: &[Sent]| s.iter().map(|x| x.key.clone()).collect::<Vec<_>>();
    let some = |k: &str| Some(k.to_string());
    assert_eq!(keys(h.tells()), vec![some("pay-7"), some("pay-7"), None, None]);
    assert_eq!(keys(h.asks()), vec![some("pay-8"), some("pay-8"), None]);
    assert_eq!(
        h.tells()[0],
        Sent { typ: "ledger".into(), id: "l1".into(), msg: b"credit 5".to_vec(), timeout: None, key: some("pay-7") }
    );
    assert_eq!(h.asks()[0].timeout, Some(Duration::from_secs(1)));

    // A key over the cap is refused as the host refuses it, and nothing is sent.
    let long = "k".repeat(MAX_IDEMPOTENCY_KEY + 1);
    for cmd in ["tell", "ask"] {
        let e = h.send(format!("{} {}", cmd, long).as_bytes()).unwrap_err();
        assert_eq!(e.code(), Code::BadRequest, "{}", e);
        assert!(e.message().contains("at most 256"), "{}", e);
    }
    assert_eq!((h.tells().len(), h.asks().len()), (4, 3));
    let max = "k".repeat(MAX_IDEMPOTENCY_KEY);
    assert_eq!(text(h.send(format!("tell {}", max).as_bytes())), "ok");
    assert_eq!(h.tells()[4].key, Some(max));
}

#[test]
fn sends_with_keys_are_not_allowed_in_on_passivate() {
    struct Stopping(Rc<RefCell<Vec<Code>>>);
    impl Entity for Stopping {
        fn receive(&mut self, _ctx: &mut Context, _msg: &[u8]) -> Result<Vec<u8>, Error> {
            Ok(Vec::new())
        }
        fn on_passivate(&mut self, ctx: &mut Context) {
            let mut got = self.0.borrow_mut();
            got.push(ctx.tell_with_key("a", "b", b"", "k").unwrap_err().code());
            got.push(ctx.ask_with_key("a", "b", b"", "k", None).unwrap_err().code());
        }
    }
    let got = Rc::new(RefCell::new(Vec::new()));
    let g = got.clone();
    let mut h = Harness::new("t", "me", move |_id: &str| Stopping(g.clone()));
    h.send(b"x").unwrap();
    h.stop();
    assert_eq!(*got.borrow(), vec![Code::NotAllowed, Code::NotAllowed]);
}

#[test]
fn reminders_in_the_harness() {
    let (mut h, _) = scripted(|ctx, msg| {
        if ctx.kind() == MessageKind::Reminder {
            let late = ctx.now_wall() / 1_000_000 - ctx.reminder_due().unwrap();
            return Ok(format!("{} {} late {}", ctx.sender(), String::from_utf8_lossy(msg), late).into_bytes());
        }
        assert_eq!(ctx.reminder_due(), None);
        let now_ms = ctx.now_wall() / 1_000_000;
        match msg {
            b"set" => {
                ctx.set_reminder("once", now_ms + 60_000, 0, b"p")?;
                ctx.set_reminder("every", now_ms + 1000, 3_600_000, b"")?;
                Ok(Vec::new())
            }
            b"list" => {
                let rs = ctx.reminders()?;
                Ok(rs.iter().map(|r| format!("{}+{}/{}", r.name, r.due_unix_ms - now_ms, r.interval_ms)).collect::<Vec<_>>().join(" ").into_bytes())
            }
            b"cancel" => Ok(format!("{} {}", ctx.cancel_reminder("every")?, ctx.cancel_reminder("every")?).into_bytes()),
            b"short" => ctx.set_reminder("s", now_ms, 999, b"").map(|_| Vec::new()),
            b"long" => ctx.set_reminder(&"n".repeat(MAX_REMINDER_NAME + 1), now_ms, 0, b"").map(|_| Vec::new()),
            b"big" => ctx.set_reminder("b", now_ms, 0, &vec![0u8; MAX_REMINDER_PAYLOAD + 1]).map(|_| Vec::new()),
            _ => Err("unknown".into()),
        }
    });
    assert_eq!(text(h.send(b"set")), "");
    assert_eq!(text(h.send(b"list")), "every+1000/3600000 once+60000/0");
    h.advance(Duration::from_secs(90));
    assert_eq!(text(h.fire_reminder("once")), "once p late 30000");
    assert_eq!(text(h.fire_reminder("every")), "every  late 89000");
    // The one-shot is gone; the interval moved on to its first due after the clock.
    assert_eq!(text(h.send(b"list")), "every+3511000/3600000");
    assert_eq!(h.reminders().len(), 1);
    assert_eq!(text(h.send(b"cancel")), "true false");
    for bad in [&b"short"[..], b"long", b"big"] {
        assert!(text(h.send(bad)).starts_with("error 7: "), "{:?}", String::from_utf8_lossy(bad));
    }
    assert!(h.reminders().is_empty());
    assert_eq!(MessageKind::from_number(10), MessageKind::Reminder);
}

#[test]
fn scheduled_due_in_the_harness() {
    let (mut h, _) = scripted(|ctx, msg| {
        let line = match ctx.scheduled_due() {
            Some(due) => format!("{} late {}", String::from_utf8_lossy(msg), ctx.now_wall() / 1_000_000 - due),
            None => format!("{} none", String::from_utf8_lossy(msg)),
        };
        if msg == b"set" {
            let now_ms = ctx.now_wall() / 1_000_000;
            ctx.set_reminder("r", now_ms, 0, b"rem")?;
        }
        Ok(line.into_bytes())
    });
    let now_ms = Harness::<()>::DEFAULT_WALL / 1_000_000;
    assert_eq!(text(h.send_scheduled(b"charge", now_ms - 90_000)), "charge late 90000");
    assert_eq!(text(h.send(b"plain")), "plain none");
    assert_eq!(text(h.send_from("other/x", b"from")), "from none");
    assert_eq!(text(h.send(b"set")), "set none");
    assert_eq!(text(h.fire_reminder("r")), "rem none");
}
