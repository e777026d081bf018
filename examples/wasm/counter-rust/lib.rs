//! counter-rust is the counter example written in Rust: the same messages and replies as
//! examples/wasm/counter (Go), for comparing the toolchains (bench/README.md).
//!
//! Messages: "inc" adds one, "inc N" adds N (a signed 64-bit integer); both reply with
//! the new count. "get" replies with the count. Counts are decimal text. Anything else
//! is an error.
//!
//! Like the Go counter its count is explicit state (`shardhost::explicit_state!`): an
//! `i64` saved as a zig-zag varint, the Go counter's encoding, which a redeploy's new code
//! loads at the entity's next activation. Built with `--cfg transparent` it keeps the
//! defaults of `Entity::snapshot`/`restore` instead, and the host snapshots the instance's
//! memory and globals: that state belongs to the module it was made by (docs/state.md).
//!
//! Build (make examples writes bin/wasm/counter-rust.wasm; see README.md):
//!
//!     /usr/bin/rustc --edition 2021 --crate-type rlib --crate-name shardhost \
//!         --target wasm32-unknown-unknown -C opt-level=3 -C panic=abort \
//!         -o bin/rust/wasm32/libshardhost.rlib guest-sdk/rust/src/lib.rs
//!     /usr/bin/rustc --edition 2021 --crate-type cdylib --crate-name counter_rust \
//!         --target wasm32-unknown-unknown -C opt-level=3 -C lto=yes -C panic=abort \
//!         -C strip=symbols -C link-arg=-zstack-size=65536 \
//!         --extern shardhost=bin/rust/wasm32/libshardhost.rlib -L bin/rust/wasm32 \
//!         -o bin/wasm/counter-rust.wasm examples/wasm/counter-rust/lib.rs

use shardhost::{Context, Entity, Error};

pub struct Counter {
    n: i64,
}

impl Entity for Counter {
    fn receive(&mut self, _ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
        let text = std::str::from_utf8(msg).map_err(|_| unknown(msg))?;
        let fields: Vec<&str> = text.split_whitespace().collect();
        match fields.as_slice() {
            ["get"] => {}
            ["inc"] => self.n = self.n.wrapping_add(1),
            ["inc", d] => {
                let d: i64 = d
                    .parse()
                    .map_err(|_| Error::new(format!("counter: inc wants an integer, got {:?}", d)))?;
                self.n = self.n.wrapping_add(d);
            }
            _ => return Err(unknown(msg)),
        }
        Ok(self.n.to_string().into_bytes())
    }

    /// Answers "get" with the count without a message (`shardhost query counter-rust/ID
    /// get`), on a throwaway copy of the entity's saved state: it never waits behind the
    /// counter's messages and changes nothing.
    fn query(&self, _ctx: &mut Context, payload: &[u8]) -> Option<Result<Vec<u8>, Error>> {
        Some(match payload {
            b"get" => Ok(self.n.to_string().into_bytes()),
            _ => Err(Error::new(format!("counter: unknown query {:?} (want get)", String::from_utf8_lossy(payload)))),
        })
    }

    #[cfg(not(transparent))]
    shardhost::explicit_state!(n);
}

fn unknown(msg: &[u8]) -> Error {
    Error::new(format!(
        "counter: unknown message {:?} (want inc, inc N or get)",
        String::from_utf8_lossy(msg)
    ))
}

shardhost::entity!(Counter, |_id: &str| Counter { n: 0 });

#[cfg(test)]
mod tests {
    use super::Counter;
    use shardhost::Harness;

    #[test]
    fn counts() {
        let mut h = Harness::new("counter-rust", "c1", |_id: &str| Counter { n: 0 });
        for (msg, want) in [("get", "0"), ("inc", "1"), ("inc 41", "42"), ("inc -2", "40"), ("get", "40")] {
            assert_eq!(h.send(msg.as_bytes()).unwrap(), want.as_bytes(), "{}", msg);
        }
        for bad in ["", "dec", "inc x", "inc 1 2"] {
            assert!(h.send(bad.as_bytes()).is_err(), "{:?}", bad);
        }
        assert_eq!(h.send(b"get").unwrap(), b"40");
    }

    #[test]
    fn query_get() {
        let mut h = Harness::new("counter-rust", "c1", |_id: &str| Counter { n: 0 });
        assert_eq!(h.query(b"get").unwrap().unwrap(), b"0");
        h.send(b"inc 41").unwrap();
        assert_eq!(h.query(b"get").unwrap().unwrap(), b"41");
        assert_eq!(h.query(b"inc").unwrap().unwrap_err().message(), "counter: unknown query \"inc\" (want get)");
        assert_eq!(h.send(b"get").unwrap(), b"41");
    }

    /// The count survives a passivation: as explicit state, unless built with
    /// `--cfg transparent`, when the host would copy the instance's memory.
    #[test]
    fn state() {
        let mut h = Harness::new("counter-rust", "c1", |_id: &str| Counter { n: 0 });
        h.send(b"inc 41").unwrap();
        let snapshot = h.snapshot();
        if cfg!(transparent) {
            assert!(snapshot.is_none(), "the host takes a transparent snapshot");
        } else {
            assert_eq!(snapshot.unwrap().unwrap(), [82], "41 as a zig-zag varint");
        }
        h.reincarnate().unwrap();
        assert_eq!(h.send(b"inc").unwrap(), b"42");
        if !cfg!(transparent) {
            let mut bad = Harness::new("counter-rust", "c1", |_id: &str| Counter { n: 0 });
            assert!(bad.restore(&[82, 0]).is_err(), "bytes left over");
        }
    }
}
