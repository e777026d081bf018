//! bank-rust-v2 is the second version of bank-rust (examples/wasm/bank-rust), as
//! examples/wasm/bank-v2 is the Go bank's: the same messages and replies, plus
//! "version", which replies "bank 2", and a new encoding of the account's state, with
//! the migration that converts version 1's (docs/state.md, "Changing the state's
//! encoding").
//!
//! Version 1 saved the format number 1, then the balance and the number of operations.
//! Version 2 saves the format number 2, then a map of named integers ("balance",
//! "ops"). `State::load` reads format 2 only; `Entity::migrate`, which the host calls
//! when it moves an account from another version of the module, reads either. Version
//! 1's code refuses format 2, so moving an account back to version 1 fails, and the
//! account stays on version 2 with its balance.
//!
//! Build: as examples/wasm/counter-rust (make examples writes bin/wasm/v2/bank-rust.wasm).

use std::collections::BTreeMap;

use shardhost::{Consistency, Context, Entity, Error, State, StateReader, StateWriter};

/// The distributed data key of the sum of all balances.
pub const TOTAL_KEY: &str = "bank-total";

/// The formats of the encoded state, its first field: version 1's (the balance and the
/// ops) and version 2's (a map of named integers).
const FORMAT_V1: u64 = 1;
const FORMAT_V2: u64 = 2;

/// What an account keeps across incarnations.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    balance: i64,
    /// Deposits and withdrawals done.
    ops: i64,
}

impl Ledger {
    /// Decodes format 2, and with `v1` format 1 too.
    fn decode(r: &mut StateReader<'_>, v1: bool) -> Result<Ledger, Error> {
        match r.u64()? {
            FORMAT_V2 => {
                let m = r.i64_map()?;
                match m.get("balance") {
                    Some(&balance) if balance >= 0 => Ok(Ledger { balance, ops: m.get("ops").copied().unwrap_or(0) }),
                    _ => Err(Error::new("bank: a state without a balance, or a negative one")),
                }
            }
            FORMAT_V1 if v1 => Ok(Ledger { balance: r.i64()?, ops: r.i64()? }),
            f => Err(Error::new(format!("bank: unknown state format {}", f))),
        }
    }
}

impl State for Ledger {
    fn save(&self, w: &mut StateWriter) {
        w.u64(FORMAT_V2);
        let mut m = BTreeMap::new();
        m.insert("balance".to_string(), self.balance);
        m.insert("ops".to_string(), self.ops);
        w.i64_map(&m);
    }

    fn load(r: &mut StateReader<'_>) -> Result<Self, Error> {
        Ledger::decode(r, false)
    }
}

#[derive(Default)]
pub struct Account {
    state: Ledger,
}

impl Entity for Account {
    fn receive(&mut self, ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
        let a = &mut self.state;
        let text = std::str::from_utf8(msg).map_err(|_| unknown(msg))?;
        let fields: Vec<&str> = text.split_whitespace().collect();
        match fields.as_slice() {
            ["balance"] => {}
            ["version"] => return Ok(b"bank 2".to_vec()),
            [op @ ("deposit" | "withdraw"), n] => {
                let n: i64 = match n.parse() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(Error::new(format!("bank: {} wants a positive integer, got {:?}", op, n))),
                };
                if *op == "deposit" {
                    ctx.pn_counter(TOTAL_KEY)
                        .incr(n as u64, Consistency::Majority)
                        .map_err(|e| Error::new(format!("bank: {} not updated: {}", TOTAL_KEY, e.message())))?;
                    a.balance += n;
                } else {
                    if n > a.balance {
                        return Err(Error::new(format!("bank: insufficient funds: the balance is {}", a.balance)));
                    }
                    ctx.pn_counter(TOTAL_KEY)
                        .decr(n as u64, Consistency::Majority)
                        .map_err(|e| Error::new(format!("bank: {} not updated: {}", TOTAL_KEY, e.message())))?;
                    a.balance -= n;
                }
                a.ops += 1;
            }
            ["trap"] => panic!("bank: trap requested"),
            ["loop"] => loop {
                std::hint::spin_loop();
            },
            ["spin"] => loop {
                ctx.now_monotonic();
            },
            _ => return Err(unknown(msg)),
        }
        Ok(a.balance.to_string().into_bytes())
    }

    /// Answers "get" (or "balance") with the balance and "ops" with the deposits and
    /// withdrawals done, as version 1 does.
    fn query(&self, _ctx: &mut Context, payload: &[u8]) -> Option<Result<Vec<u8>, Error>> {
        Some(match payload {
            b"get" | b"balance" => Ok(self.state.balance.to_string().into_bytes()),
            b"ops" => Ok(self.state.ops.to_string().into_bytes()),
            _ => Err(Error::new(format!(
                "bank: unknown query {:?} (want get, balance or ops)",
                String::from_utf8_lossy(payload)
            ))),
        })
    }

    /// Takes up a state another version of the module saved: format 1 converted, or
    /// format 2. `from_version` is the type's version number of that module, which says
    /// nothing of the format: the format is read from the state.
    fn migrate(&mut self, from_version: u64, state: &[u8]) -> Result<(), Error> {
        let mut r = StateReader::new(state);
        let ledger = Ledger::decode(&mut r, true)
            .and_then(|l| r.done().map(|_| l))
            .map_err(|e| Error::new(format!("bank: the state of version {}: {}", from_version, e.message())))?;
        self.state = ledger;
        Ok(())
    }

    shardhost::explicit_state!(state);
}

fn unknown(msg: &[u8]) -> Error {
    Error::new(format!(
        "bank: unknown message {:?} (want deposit N, withdraw N, balance or version)",
        String::from_utf8_lossy(msg)
    ))
}

shardhost::entity!(Account, |_id: &str| Account::default());

#[cfg(test)]
mod tests {
    use super::Account;
    use shardhost::Harness;

    fn harness() -> Harness<Account> {
        Harness::new("bank-rust", "alice", |_id: &str| Account::default())
    }

    /// Version 1's state (format 1: balance 42, 2 ops) migrates with its balance and
    /// ops, which version 2 then saves in format 2: the bytes of the Go bank-v2's.
    #[test]
    fn migrate_from_v1() {
        let mut h = harness();
        h.migrate(1, &[1, 84, 4]).unwrap();
        assert_eq!(h.send(b"balance").unwrap(), b"42");
        assert_eq!(h.send(b"deposit 8").unwrap(), b"50");
        assert_eq!(h.send(b"version").unwrap(), b"bank 2");
        let state = h.snapshot().unwrap().unwrap();
        assert_eq!(state, b"\x02\x02\x07balance\x64\x03ops\x06");
        h.reincarnate().unwrap();
        assert_eq!(h.send(b"balance").unwrap(), b"50");
        let mut next = harness();
        next.migrate(3, &state).unwrap();
        assert_eq!(next.send(b"balance").unwrap(), b"50");
    }

    /// Format 1 through restore (only a migration converts it), an unknown format,
    /// bytes that do not decode, a negative balance: each refused.
    #[test]
    fn refused_states() {
        let err = harness().restore(&[1, 84, 4]).unwrap_err();
        assert!(err.message().contains("unknown state format 1"), "{}", err.message());
        let bad: [&[u8]; 7] = [&[], &[3, 0], &[1, 84], &[1, 84, 4, 0], &[2, 1], &[2, 0], b"\x02\x01\x07balance\x01"];
        for b in bad {
            assert!(harness().migrate(1, b).is_err(), "{:?}", b);
        }
    }

    #[test]
    fn deposits_and_withdrawals() {
        let mut h = harness();
        for (msg, want) in [("balance", "0"), ("deposit 5", "5"), ("withdraw 2", "3")] {
            assert_eq!(h.send(msg.as_bytes()).unwrap(), want.as_bytes(), "{}", msg);
        }
        assert!(h.send(b"withdraw 4").is_err());
    }
}
