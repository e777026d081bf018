//! Tests of read-only queries (Entity::query) in the Harness.

use super::*;
use std::time::Duration;

struct Asked {
    n: i64,
}

impl Entity for Asked {
    fn receive(&mut self, _ctx: &mut Context, _msg: &[u8]) -> Result<Vec<u8>, Error> {
        self.n += 1;
        Ok(self.n.to_string().into_bytes())
    }

    fn query(&self, ctx: &mut Context, payload: &[u8]) -> Option<Result<Vec<u8>, Error>> {
        let r = match payload {
            b"get" => return Some(Ok(self.n.to_string().into_bytes())),
            b"tell" => ctx.tell("other", "x", b"hi"),
            b"ask" => ctx.ask("other", "x", b"hi", None).map(|_| ()),
            b"timer" => ctx.start_timer("t", b"x", Duration::from_millis(1)),
            b"update" => ctx.pn_counter("k").incr(1, Consistency::Local).map(|_| ()),
            b"log" => {
                ctx.log(LogLevel::Info, "query");
                Ok(())
            }
            _ => Err(Error::new("unknown query")),
        };
        Some(r.map(|()| b"done".to_vec()))
    }
}

struct Plain;

impl Entity for Plain {
    fn receive(&mut self, _ctx: &mut Context, _msg: &[u8]) -> Result<Vec<u8>, Error> {
        Ok(Vec::new())
    }
}

#[test]
fn query_answers_and_changes_nothing() {
    let mut h = Harness::new("q", "a", |_id: &str| Asked { n: 0 });
    assert_eq!(h.query(b"get").unwrap().unwrap(), b"0");
    h.send(b"inc").unwrap();
    h.send(b"inc").unwrap();
    assert_eq!(h.query(b"get").unwrap().unwrap(), b"2");
    for q in ["tell", "ask", "timer", "update"] {
        let err = h.query(q.as_bytes()).unwrap().unwrap_err();
        assert_eq!(err.code(), Code::ReadOnly, "{}: {}", q, err);
    }
    assert!(h.tells().is_empty() && h.asks().is_empty() && h.timers().is_empty());
    assert_eq!(h.ddata_value("k"), None);
    assert_eq!(h.query(b"log").unwrap().unwrap(), b"done");
    assert_eq!(h.query(b"nope").unwrap().unwrap_err().message(), "unknown query");
    assert_eq!(h.send(b"inc").unwrap(), b"3");
}

#[test]
fn no_query_by_default() {
    let mut h = Harness::new("p", "a", |_id: &str| Plain);
    assert!(h.query(b"get").is_none());
}

#[test]
fn read_only_code() {
    assert_eq!(Code::from_number(15), Some(Code::ReadOnly));
    assert_eq!(Code::ReadOnly.number(), 15);
    assert_eq!(Code::ReadOnly.name(), "ReadOnly");
}
