//! echo-rust is the example entity written in Rust, with the shardhost Rust guest SDK.
//!
//! Messages: "echo X" replies X (any bytes); "id" replies "TYPE/ID"; "count" replies the
//! number of messages this entity has seen so far, this one included (decimal text);
//! "passivate" replies "ok" and asks the host to passivate the entity after it; "panic"
//! panics, which traps the instance. Anything else is an error.
//!
//! Its state, the count, is a guest-level snapshot (`Entity::snapshot`/`restore`): a version
//! byte (1) and the count as 8 bytes little-endian, so it survives passivation, handoff and
//! redeploys of newer code.
//!
//! Build (make examples writes bin/wasm/echo-rust.wasm; see README.md):
//!
//!     /usr/bin/rustc --edition 2021 --crate-type rlib --crate-name shardhost \
//!         --target wasm32-unknown-unknown -C opt-level=3 -C panic=abort \
//!         -o bin/rust/wasm32/libshardhost.rlib guest-sdk/rust/src/lib.rs
//!     /usr/bin/rustc --edition 2021 --crate-type cdylib --crate-name echo_rust \
//!         --target wasm32-unknown-unknown -C opt-level=3 -C lto=yes -C panic=abort \
//!         -C strip=symbols -C link-arg=-zstack-size=65536 \
//!         --extern shardhost=bin/rust/wasm32/libshardhost.rlib -L bin/rust/wasm32 \
//!         -o bin/wasm/echo-rust.wasm examples/wasm/echo-rust/lib.rs

use shardhost::{Context, Entity, Error, LogLevel};

pub struct Echo {
    /// Messages seen so far, the current one included.
    seen: u64,
}

/// The first byte of the state in the current encoding: version 1 is this byte and `seen`
/// as 8 bytes little-endian.
const STATE_V1: u8 = 1;

impl Echo {
    pub fn new(_id: &str) -> Echo {
        Echo { seen: 0 }
    }
}

impl Entity for Echo {
    fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
        self.seen += 1;
        if let Some(rest) = msg.strip_prefix(b"echo ") {
            return Ok(rest.to_vec());
        }
        match msg {
            b"id" => Ok(format!("{}/{}", ctx.entity_type(), ctx.entity_id()).into_bytes()),
            b"count" => Ok(self.seen.to_string().into_bytes()),
            b"passivate" => {
                ctx.passivate();
                Ok(b"ok".to_vec())
            }
            b"panic" => {
                ctx.log(LogLevel::Warn, "echo-rust: panicking as asked");
                panic!("echo-rust: panic requested")
            }
            _ => Err(Error::new(format!(
                "echo-rust: unknown message {:?} (want \"echo X\", \"id\", \"count\", \"passivate\" or \"panic\")",
                String::from_utf8_lossy(msg)
            ))),
        }
    }

    fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
        let mut state = vec![STATE_V1];
        state.extend_from_slice(&self.seen.to_le_bytes());
        Some(Ok(state))
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), Error> {
        match state.split_first() {
            Some((&STATE_V1, seen)) => {
                let seen: [u8; 8] = seen.try_into().map_err(|_| {
                    Error::new(format!(
                        "echo-rust: malformed state: version 1 is 9 bytes, got {}",
                        state.len()
                    ))
                })?;
                self.seen = u64::from_le_bytes(seen);
                Ok(())
            }
            Some((v, _)) => Err(Error::new(format!(
                "echo-rust: malformed state: unknown version {} (this code reads version {})",
                v, STATE_V1
            ))),
            None => Err(Error::new("echo-rust: malformed state: empty")),
        }
    }
}

shardhost::entity!(Echo, |id: &str| Echo::new(id));

#[cfg(test)]
mod tests {
    use super::Echo;
    use shardhost::Harness;

    fn harness() -> Harness<Echo> {
        Harness::new("echo-rust", "e1", |id: &str| Echo::new(id))
    }

    #[test]
    fn replies() {
        let mut h = harness();
        let steps: &[(&[u8], &[u8])] = &[
            (b"echo hello", b"hello"),
            (b"echo ", b""),
            (b"echo \xff\x00bytes", b"\xff\x00bytes"),
            (b"id", b"echo-rust/e1"),
            (b"count", b"5"),
        ];
        for (msg, want) in steps {
            assert_eq!(h.send(msg).unwrap(), *want, "{:?}", String::from_utf8_lossy(msg));
        }
    }

    #[test]
    fn unknown_messages_are_errors_and_count() {
        let mut h = harness();
        for bad in [&b""[..], b"echo", b"ID", b"count 2", b"\xff"] {
            let err = h.send(bad).unwrap_err();
            assert!(err.message().starts_with("echo-rust: unknown message"), "{}", err);
        }
        assert_eq!(h.send(b"count").unwrap(), b"6");
    }

    #[test]
    #[should_panic(expected = "echo-rust: panic requested")]
    fn panic_panics() {
        let mut h = harness();
        let _ = h.send(b"panic");
    }

    #[test]
    fn snapshot_round_trip() {
        let mut h = harness();
        assert!(h.snapshot().is_none(), "no entity yet");
        for _ in 0..3 {
            h.send(b"echo x").unwrap();
        }
        let state = h.snapshot().unwrap().unwrap();
        assert_eq!(state, [1, 3, 0, 0, 0, 0, 0, 0, 0]);

        let mut next = harness();
        next.restore(&state).unwrap();
        assert_eq!(next.send(b"count").unwrap(), b"4", "counting goes on");

        let mut big = harness();
        big.restore(&[1, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).unwrap();
        assert_eq!(big.send(b"count").unwrap(), u64::MAX.to_string().as_bytes());
        assert_eq!(big.snapshot().unwrap().unwrap(), [1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn restore_refuses_malformed_state() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "echo-rust: malformed state: empty"),
            (&[1], "echo-rust: malformed state: version 1 is 9 bytes, got 1"),
            (&[1, 0, 0, 0, 0, 0, 0, 0], "echo-rust: malformed state: version 1 is 9 bytes, got 8"),
            (&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0], "echo-rust: malformed state: version 1 is 9 bytes, got 10"),
            (&[2, 0, 0, 0, 0, 0, 0, 0, 0], "echo-rust: malformed state: unknown version 2 (this code reads version 1)"),
            (&[0], "echo-rust: malformed state: unknown version 0 (this code reads version 1)"),
        ];
        for (state, want) in cases {
            let mut h = harness();
            assert_eq!(h.restore(state).unwrap_err().message(), *want, "{:?}", state);
            assert!(h.entity().is_none());
        }
    }

    #[test]
    fn restore_only_before_the_first_message() {
        let mut h = harness();
        h.send(b"id").unwrap();
        assert!(h.restore(&[1, 9, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert_eq!(h.send(b"count").unwrap(), b"2");
    }

    #[test]
    fn passivate_asks_the_host() {
        let mut h = harness();
        assert_eq!(h.send(b"echo a").unwrap(), b"a");
        assert!(!h.passivated());
        assert_eq!(h.send(b"passivate").unwrap(), b"ok");
        assert!(h.passivated());
        // What the host does next: snapshot, and a new incarnation from it.
        let state = h.snapshot().unwrap().unwrap();
        let mut next = harness();
        next.restore(&state).unwrap();
        assert_eq!(next.send(b"count").unwrap(), b"3");
        assert!(!next.passivated());
        assert!(next.send(b"passivate 2").is_err());
        assert!(!next.passivated());
    }

    #[test]
    fn panic_logs_first() {
        let mut h = harness();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.send(b"panic")));
        assert_eq!(h.logs(), ["WARN echo-rust: panicking as asked"]);
    }
}
