//! echo-rust is the example entity written in Rust, with the shardhost Rust guest SDK.
//!
//! Messages: "echo X" replies X (any bytes); "id" replies "TYPE/ID"; "count" replies the
//! number of messages this entity has seen so far, this one included (decimal text);
//! "panic" panics, which traps the instance. Anything else is an error.
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
            b"panic" => {
                ctx.log(LogLevel::Warn, "echo-rust: panicking as asked");
                panic!("echo-rust: panic requested")
            }
            _ => Err(Error::new(format!(
                "echo-rust: unknown message {:?} (want \"echo X\", \"id\", \"count\" or \"panic\")",
                String::from_utf8_lossy(msg)
            ))),
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
    fn panic_logs_first() {
        let mut h = harness();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.send(b"panic")));
        assert_eq!(h.logs(), ["WARN echo-rust: panicking as asked"]);
    }
}
