//! cart is an example entity in Rust: a shopping cart per entity ID, which keeps
//! cluster-wide distributed data about all carts.
//!
//! Messages: "add ITEM" puts ITEM in the cart (a set: adding it twice keeps one) and
//! replies "ok"; "remove ITEM" takes it out and replies "ok"; "list" replies the items as a
//! JSON array of strings, sorted. Anything else is an error.
//!
//! Over HTTP, deployed with `--http-route /shop/{id}/...` (docs/http-routes.md):
//! `GET /shop/ID/` answers the items as that JSON array (`application/json`), and
//! `POST /shop/ID/items` with an item as its body adds it and answers 201 with the
//! items. Another path is 404, another method 405.
//!
//! Distributed data, written with WriteMajority ("majority"):
//! - `carts` (orset): the IDs of the carts that have items. A cart adds its ID when it goes
//!   from empty to non-empty and removes it when it becomes empty.
//! - `cart-items` (pncounter): the number of items in all carts: +1 for each add of an item
//!   the cart did not have, -1 for each remove of one it had.
//!
//! The cart changes its items only once its writes are applied: a write that fails leaves
//! the cart as it was and the message fails (sending it again is safe: the set operations
//! are idempotent and the counter changes only with the cart). A write that is applied
//! locally but not acknowledged by a majority in time (code Timeout) still counts: the
//! replicas converge later; the cart logs a warning.
//!
//! Its state is a guest-level snapshot: a version byte (1), then each item as its length
//! (4 bytes little-endian) and its UTF-8 bytes, so it survives passivation, handoff and
//! redeploys.
//!
//! Build: make bin/wasm/cart.wasm (see README.md).

use shardhost::{Code, Consistency, Context, Entity, Error, HttpResponse, IncomingRequest, Json, LogLevel};
use std::collections::BTreeSet;

/// The orset of the IDs of carts that have items.
pub const CARTS_KEY: &str = "carts";
/// The pncounter of the items in all carts.
pub const ITEMS_KEY: &str = "cart-items";

const WRITE: Consistency = Consistency::Majority;

/// The first byte of the state in the current encoding.
const STATE_V1: u8 = 1;

pub struct Cart {
    items: BTreeSet<String>,
}

impl Cart {
    pub fn new(_id: &str) -> Cart {
        Cart { items: BTreeSet::new() }
    }

    /// The items, sorted.
    pub fn items(&self) -> impl Iterator<Item = &str> {
        self.items.iter().map(String::as_str)
    }

    fn add(&mut self, ctx: &mut Context, item: &str) -> Result<(), Error> {
        if self.items.contains(item) {
            return Ok(());
        }
        if self.items.is_empty() {
            let id = ctx.entity_id().to_string();
            let r = ctx.or_set(CARTS_KEY).add(&id, WRITE).map(|_| ());
            applied(ctx, r, CARTS_KEY)?;
        }
        let r = ctx.pn_counter(ITEMS_KEY).incr(1, WRITE).map(|_| ());
        applied(ctx, r, ITEMS_KEY)?;
        self.items.insert(item.to_string());
        Ok(())
    }

    fn remove(&mut self, ctx: &mut Context, item: &str) -> Result<(), Error> {
        if !self.items.contains(item) {
            return Ok(());
        }
        if self.items.len() == 1 {
            let id = ctx.entity_id().to_string();
            let r = ctx.or_set(CARTS_KEY).remove(&id, WRITE).map(|_| ());
            applied(ctx, r, CARTS_KEY)?;
        }
        let r = ctx.pn_counter(ITEMS_KEY).decr(1, WRITE).map(|_| ());
        applied(ctx, r, ITEMS_KEY)?;
        self.items.remove(item);
        Ok(())
    }
}

/// Whether a write counts: done, or applied locally but not acknowledged in time (the
/// replicas converge later), which is logged.
fn applied(ctx: &mut Context, r: Result<(), Error>, key: &str) -> Result<(), Error> {
    match r {
        Err(e) if e.code() == Code::Timeout => {
            ctx.log(LogLevel::Warn, &format!("cart: write of {} not acknowledged by a majority in time: {}", key, e));
            Ok(())
        }
        Err(e) => Err(Error::new(format!("cart: write of {}: {}", key, e))),
        Ok(()) => Ok(()),
    }
}

/// The item of an "add"/"remove" message: the rest of the text, trimmed, not empty.
fn item(rest: &[u8]) -> Result<&str, Error> {
    let item = std::str::from_utf8(rest).map_err(|_| Error::new("cart: an item is UTF-8 text"))?.trim();
    if item.is_empty() {
        return Err(Error::new("cart: empty item"));
    }
    Ok(item)
}

impl Entity for Cart {
    fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
        if let Some(rest) = msg.strip_prefix(b"add ") {
            self.add(ctx, item(rest)?)?;
            return Ok(b"ok".to_vec());
        }
        if let Some(rest) = msg.strip_prefix(b"remove ") {
            self.remove(ctx, item(rest)?)?;
            return Ok(b"ok".to_vec());
        }
        if msg == b"list" {
            return Ok(Json::string_array(&self.items).to_string().into_bytes());
        }
        Err(Error::new(format!(
            "cart: unknown message {:?} (want \"add ITEM\", \"remove ITEM\" or \"list\")",
            String::from_utf8_lossy(msg)
        )))
    }

    fn serve_http(&mut self, ctx: &mut Context, req: &IncomingRequest) -> Option<Result<HttpResponse, Error>> {
        let items = |c: &Cart, status: u16| {
            HttpResponse::new(status, Json::string_array(&c.items).to_string().into_bytes()).with_header("Content-Type", "application/json")
        };
        let text = |status: u16, body: &str| HttpResponse::new(status, body.as_bytes().to_vec()).with_header("Content-Type", "text/plain");
        Some(match (req.method.as_str(), req.rest.as_str()) {
            ("GET", "") | ("GET", "/") | ("HEAD", "") | ("HEAD", "/") => Ok(items(self, 200)),
            ("POST", "/items") => match item(&req.body) {
                Ok(it) => self.add(ctx, it).map(|()| items(self, 201)),
                Err(e) => Ok(text(400, e.message())),
            },
            (_, "") | (_, "/") | (_, "/items") => Ok(text(405, "cart: GET /shop/ID/ or POST /shop/ID/items").with_header("Allow", "GET, HEAD, POST")),
            (_, rest) => Ok(text(404, &format!("cart: no {} here", rest))),
        })
    }

    fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
        let mut state = vec![STATE_V1];
        for item in &self.items {
            state.extend_from_slice(&(item.len() as u32).to_le_bytes());
            state.extend_from_slice(item.as_bytes());
        }
        Some(Ok(state))
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), Error> {
        let malformed = |why: &str| Error::new(format!("cart: malformed state: {}", why));
        let mut rest = match state.split_first() {
            Some((&STATE_V1, rest)) => rest,
            Some((v, _)) => return Err(malformed(&format!("unknown version {} (this code reads version {})", v, STATE_V1))),
            None => return Err(malformed("empty")),
        };
        let mut items = BTreeSet::new();
        while !rest.is_empty() {
            if rest.len() < 4 {
                return Err(malformed("truncated length"));
            }
            let (len, tail) = rest.split_at(4);
            let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            if tail.len() < len {
                return Err(malformed("truncated item"));
            }
            let (item, tail) = tail.split_at(len);
            items.insert(String::from_utf8(item.to_vec()).map_err(|_| malformed("item not UTF-8"))?);
            rest = tail;
        }
        self.items = items;
        Ok(())
    }
}

shardhost::entity!(Cart, |id: &str| Cart::new(id));

#[cfg(test)]
mod tests {
    use super::{Cart, CARTS_KEY, ITEMS_KEY};
    use shardhost::{Code, Error, Harness, IncomingRequest};

    fn cart(id: &str) -> Harness<Cart> {
        Harness::new("cart", id, |id: &str| Cart::new(id))
    }

    fn list(h: &mut Harness<Cart>) -> String {
        String::from_utf8(h.send(b"list").unwrap()).unwrap()
    }

    #[test]
    fn add_remove_list() {
        let mut h = cart("alice");
        assert_eq!(list(&mut h), "[]");
        assert_eq!(h.send(b"add pear").unwrap(), b"ok");
        assert_eq!(h.send(b"add apple").unwrap(), b"ok");
        assert_eq!(h.send(b"add apple").unwrap(), b"ok", "a set: twice keeps one");
        assert_eq!(h.send(b"add  green \"tea\" ").unwrap(), b"ok");
        assert_eq!(list(&mut h), r#"["apple","green \"tea\"","pear"]"#);
        assert_eq!(h.send(b"remove pear").unwrap(), b"ok");
        assert_eq!(h.send(b"remove plum").unwrap(), b"ok", "removing what is not there is fine");
        assert_eq!(list(&mut h), r#"["apple","green \"tea\""]"#);
    }

    #[test]
    fn keeps_carts_and_item_count() {
        let mut h = cart("alice");
        assert_eq!(h.ddata_value(CARTS_KEY), None);
        h.send(b"add apple").unwrap();
        assert_eq!(h.ddata_value(CARTS_KEY).unwrap(), r#"["alice"]"#);
        assert_eq!(h.ddata_value(ITEMS_KEY).unwrap(), "1");
        h.send(b"add apple").unwrap();
        h.send(b"add pear").unwrap();
        assert_eq!(h.ddata_value(ITEMS_KEY).unwrap(), "2", "only new items count");
        h.send(b"remove plum").unwrap();
        h.send(b"remove apple").unwrap();
        assert_eq!(h.ddata_value(CARTS_KEY).unwrap(), r#"["alice"]"#, "still has a pear");
        assert_eq!(h.ddata_value(ITEMS_KEY).unwrap(), "1");
        h.send(b"remove pear").unwrap();
        assert_eq!(h.ddata_value(CARTS_KEY).unwrap(), "[]", "empty: out of carts");
        assert_eq!(h.ddata_value(ITEMS_KEY).unwrap(), "0");
        h.send(b"remove pear").unwrap();
        assert_eq!(h.ddata_value(ITEMS_KEY).unwrap(), "0");
    }

    #[test]
    fn other_carts_share_the_data() {
        // Another cart's writes, as they reach this replica.
        let mut h = cart("bob");
        h.ddata_update(CARTS_KEY, "orset", "add alice").unwrap();
        h.ddata_update(ITEMS_KEY, "pncounter", "incr 3").unwrap();
        h.send(b"add milk").unwrap();
        assert_eq!(h.ddata_value(CARTS_KEY).unwrap(), r#"["alice","bob"]"#);
        assert_eq!(h.ddata_value(ITEMS_KEY).unwrap(), "4");
    }

    #[test]
    fn writes_with_majority_timeouts_count() {
        let mut h = cart("alice");
        h.fail_next(Error::with_code(Code::Timeout, "not acknowledged by 2 of 3 replicas"));
        assert_eq!(h.send(b"add apple").unwrap(), b"ok");
        assert_eq!(list(&mut h), r#"["apple"]"#);
        assert_eq!(h.ddata_value(CARTS_KEY).unwrap(), r#"["alice"]"#);
        assert_eq!(h.ddata_value(ITEMS_KEY).unwrap(), "1");
        assert_eq!(
            h.logs(),
            ["WARN cart: write of carts not acknowledged by a majority in time: not acknowledged by 2 of 3 replicas"]
        );
    }

    #[test]
    fn failed_writes_leave_the_cart_as_it_was() {
        let mut h = cart("alice");
        h.ddata_update(ITEMS_KEY, "orset", "add x").unwrap(); // someone broke the key
        let err = h.send(b"add apple").unwrap_err();
        assert_eq!(err.message(), "cart: write of cart-items: shardhost: ddata key \"cart-items\" holds a orset, not a pncounter");
        assert_eq!(list(&mut h), "[]");

        let mut h = cart("bob");
        h.send(b"add apple").unwrap();
        h.fail_next(Error::with_code(Code::Unavailable, "replicator stopping"));
        assert!(h.send(b"remove apple").is_err());
        assert_eq!(list(&mut h), r#"["apple"]"#);
        assert_eq!(h.ddata_value(CARTS_KEY).unwrap(), r#"["bob"]"#);
        h.send(b"remove apple").unwrap();
        assert_eq!(h.ddata_value(CARTS_KEY).unwrap(), "[]");
        assert_eq!(h.ddata_value(ITEMS_KEY).unwrap(), "0");
    }

    #[test]
    fn bad_messages() {
        let mut h = cart("alice");
        for (msg, want) in [
            (&b"add "[..], "cart: empty item"),
            (b"add   ", "cart: empty item"),
            (b"remove \xff", "cart: an item is UTF-8 text"),
            (b"add", "cart: unknown message \"add\" (want \"add ITEM\", \"remove ITEM\" or \"list\")"),
            (b"LIST", "cart: unknown message \"LIST\" (want \"add ITEM\", \"remove ITEM\" or \"list\")"),
        ] {
            assert_eq!(h.send(msg).unwrap_err().message(), want);
        }
    }

    fn request(method: &str, rest: &str, body: &[u8]) -> IncomingRequest {
        IncomingRequest {
            method: method.into(),
            path: format!("/shop/alice{}", rest),
            rest: rest.into(),
            body: body.to_vec(),
            ..IncomingRequest::default()
        }
    }

    #[test]
    fn over_http() {
        let mut h = cart("alice");
        let r = h.serve_http(&request("GET", "/", b"")).unwrap().unwrap();
        assert_eq!((r.status, r.body.as_slice(), r.header("content-type")), (200, &b"[]"[..], Some("application/json")));
        let r = h.serve_http(&request("POST", "/items", b"apple")).unwrap().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (201, &br#"["apple"]"#[..]));
        assert_eq!(list(&mut h), r#"["apple"]"#, "the same cart as the messages'");
        assert_eq!(h.ddata_value(ITEMS_KEY).unwrap(), "1");
        let r = h.serve_http(&request("POST", "/items", b"  ")).unwrap().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (400, &b"cart: empty item"[..]));
        let r = h.serve_http(&request("DELETE", "/items", b"")).unwrap().unwrap();
        assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD, POST")));
        let r = h.serve_http(&request("GET", "/other", b"")).unwrap().unwrap();
        assert_eq!((r.status, r.body.as_slice()), (404, &b"cart: no /other here"[..]));
    }

    #[test]
    fn snapshot_round_trip() {
        let mut h = cart("alice");
        h.send(b"add apple").unwrap();
        h.send("add p\u{e9}ar".as_bytes()).unwrap();
        let state = h.stop().unwrap().unwrap();
        assert_eq!(state, b"\x01\x05\x00\x00\x00apple\x05\x00\x00\x00p\xc3\xa9ar");
        let mut next = cart("alice");
        next.restore(&state).unwrap();
        assert_eq!(list(&mut next), "[\"apple\",\"p\u{e9}ar\"]");

        let mut empty = cart("alice");
        empty.restore(b"\x01").unwrap();
        assert_eq!(list(&mut empty), "[]");

        h.reincarnate().unwrap();
        h.send(b"remove apple").unwrap();
        assert_eq!(list(&mut h), "[\"p\u{e9}ar\"]");
        assert_eq!(h.ddata_value(ITEMS_KEY).unwrap(), "1");
    }

    #[test]
    fn restore_refuses_malformed_state() {
        for (state, want) in [
            (&b""[..], "cart: malformed state: empty"),
            (b"\x02", "cart: malformed state: unknown version 2 (this code reads version 1)"),
            (b"\x01\x05\x00", "cart: malformed state: truncated length"),
            (b"\x01\x05\x00\x00\x00abc", "cart: malformed state: truncated item"),
            (b"\x01\x01\x00\x00\x00\xff", "cart: malformed state: item not UTF-8"),
        ] {
            let mut h = cart("alice");
            assert_eq!(h.restore(state).unwrap_err().message(), want, "{:?}", state);
        }
    }
}
