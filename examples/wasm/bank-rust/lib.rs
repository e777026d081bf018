//! bank-rust is the bank example (examples/wasm/bank, in Go) written in Rust: an account
//! per entity ID with a cluster-wide total, the same messages and replies.
//!
//! Messages (replies are decimal text): "deposit N" adds N (> 0) to the balance and to
//! the PNCounter "bank-total", written at majority, and replies with the new balance;
//! "withdraw N" takes N off, or fails with "insufficient funds" and changes nothing;
//! "balance" replies with the balance; "trap" panics (a trap), "loop" runs forever (the
//! message deadline), "spin" calls the host until the host call budget is spent.
//! Anything else fails with an error quoting the message: a message near the size cap
//! makes a reply over the cap.
//!
//! The balance changes only after bank-total took the amount. The account is explicit
//! state (`Ledger`, saved with `shardhost::State` in the Go bank's encoding: a version, 1,
//! then the balance and the number of operations), which a redeploy's new code loads at
//! the entity's next activation. Built with `--cfg transparent` it keeps the defaults of
//! `Entity::snapshot`/`restore`, and the host snapshots the instance's memory instead:
//! that state belongs to the module it was made by (docs/state.md).
//!
//! Build: as examples/wasm/counter-rust (make examples writes bin/wasm/bank-rust.wasm).
//! Built with `--cfg bank_limit`, the bank refuses deposits over 1,000: a changed
//! version to try on an account's real history with `shardhost replay --module`
//! (docs/cli.md, "Replay and trial upgrades"). Built with `--cfg bank_trap`, every
//! deposit traps: a broken version, the canary that e2e/bank_upgrade_test.go rolls back.

use shardhost::{Consistency, Context, Entity, Error, State, StateReader, StateWriter};

/// The distributed data key of the sum of all balances.
pub const TOTAL_KEY: &str = "bank-total";

/// The largest deposit an account takes; 0: any.
#[cfg(not(bank_limit))]
const MAX_DEPOSIT: i64 = 0;
/// The largest deposit an account takes: this build (`--cfg bank_limit`) is the changed
/// bank whose trial upgrade e2e/replay_test.go runs.
#[cfg(bank_limit)]
const MAX_DEPOSIT: i64 = 1000;

/// Whether every deposit traps: only in the broken build (`--cfg bank_trap`), the canary
/// that e2e/bank_upgrade_test.go rolls back.
const TRAP_DEPOSITS: bool = cfg!(bank_trap);

/// The version of the state's encoding, its first field.
const STATE_VERSION: u64 = 1;

/// What an account keeps across incarnations.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    balance: i64,
    /// Deposits and withdrawals done.
    ops: i64,
}

impl State for Ledger {
    fn save(&self, w: &mut StateWriter) {
        w.u64(STATE_VERSION);
        w.i64(self.balance);
        w.i64(self.ops);
    }

    fn load(r: &mut StateReader<'_>) -> Result<Self, Error> {
        match r.u64()? {
            STATE_VERSION => Ok(Ledger { balance: r.i64()?, ops: r.i64()? }),
            v => Err(Error::new(format!("bank: unknown state version {}", v))),
        }
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
            [op @ ("deposit" | "withdraw"), n] => {
                let n: i64 = match n.parse() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(Error::new(format!("bank: {} wants a positive integer, got {:?}", op, n))),
                };
                if *op == "deposit" && MAX_DEPOSIT > 0 && n > MAX_DEPOSIT {
                    return Err(Error::new(format!("bank: a deposit is at most {}", MAX_DEPOSIT)));
                }
                if *op == "deposit" {
                    if TRAP_DEPOSITS {
                        panic!("bank: this build traps on every deposit");
                    }
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
    /// withdrawals done, without a message (`shardhost query bank-rust/ID get`), on a
    /// throwaway copy of the account's saved state: it never waits behind the account's
    /// messages and changes nothing.
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

    #[cfg(not(transparent))]
    shardhost::explicit_state!(state);
}

fn unknown(msg: &[u8]) -> Error {
    Error::new(format!(
        "bank: unknown message {:?} (want deposit N, withdraw N or balance)",
        String::from_utf8_lossy(msg)
    ))
}

shardhost::entity!(Account, |_id: &str| Account::default());

#[cfg(test)]
mod tests {
    use super::{Account, Ledger};
    use shardhost::State;
    use shardhost::Harness;

    #[test]
    fn deposits_and_withdrawals() {
        let mut h = Harness::new("bank-rust", "alice", |_id: &str| Account::default());
        for (msg, want) in [("balance", "0"), ("deposit 5", "5"), ("deposit 7", "12"), ("withdraw 2", "10")] {
            assert_eq!(h.send(msg.as_bytes()).unwrap(), want.as_bytes(), "{}", msg);
        }
        for bad in ["withdraw 11", "deposit -1", "deposit x", "rob"] {
            assert!(h.send(bad.as_bytes()).is_err(), "{:?}", bad);
        }
        assert_eq!(h.send(b"balance").unwrap(), b"10");
    }

    #[test]
    fn query_get() {
        let mut h = Harness::new("bank-rust", "alice", |_id: &str| Account::default());
        h.send(b"deposit 70").unwrap();
        h.send(b"withdraw 20").unwrap();
        for (q, want) in [("get", "50"), ("balance", "50"), ("ops", "2")] {
            assert_eq!(h.query(q.as_bytes()).unwrap().unwrap(), want.as_bytes(), "{}", q);
        }
        assert!(h.query(b"deposit 5").unwrap().is_err());
        assert_eq!(h.send(b"balance").unwrap(), b"50");
    }

    /// The account survives a passivation: as explicit state, unless built with
    /// `--cfg transparent`, when the host would copy the instance's memory. Explicit
    /// state refuses a state it cannot read.
    #[test]
    fn state() {
        let mut h = Harness::new("bank-rust", "alice", |_id: &str| Account::default());
        h.send(b"deposit 50").unwrap();
        h.send(b"withdraw 8").unwrap();
        let snapshot = h.snapshot();
        h.reincarnate().unwrap();
        assert_eq!(h.send(b"balance").unwrap(), b"42");
        if cfg!(transparent) {
            assert!(snapshot.is_none(), "the host takes a transparent snapshot");
            return;
        }
        let state = snapshot.unwrap().unwrap();
        assert_eq!(state, [1, 84, 4], "version 1, balance 42 and 2 ops as zig-zag varints (the Go bank's)");
        assert_eq!(Ledger::from_state(&state).unwrap(), Ledger { balance: 42, ops: 2 });
        for bad in [&[][..], &[2, 84, 4], &[1, 84], &[1, 84, 4, 0]] {
            let mut next = Harness::new("bank-rust", "alice", |_id: &str| Account::default());
            assert!(next.restore(bad).is_err(), "{:?}", bad);
        }
    }

    /// The changed bank (`--cfg bank_limit`) refuses a deposit over 1,000 and changes
    /// nothing for it.
    #[cfg(bank_limit)]
    #[test]
    fn deposit_limit() {
        let mut h = Harness::new("bank-rust", "alice", |_id: &str| Account::default());
        assert_eq!(h.send(b"deposit 1000").unwrap(), b"1000");
        let err = h.send(b"deposit 1001").unwrap_err();
        assert!(err.message().contains("at most 1000"), "{}", err.message());
        assert_eq!(h.send(b"balance").unwrap(), b"1000");
    }
}
