//! ledger is an example entity in Rust: a ledger per entity ID that the subscription
//! example (examples/wasm/subscription, in Go) charges once per period billed.
//!
//! Messages (replies are decimal text): "charge SUB PERIOD AMOUNT" (PERIOD a positive
//! integer, AMOUNT a positive 64-bit integer) adds AMOUNT to the total and one to the
//! count of (SUB, PERIOD), and replies with the total; "total" replies with the total;
//! "charges SUB" replies with one line "PERIOD COUNT" per period charged to SUB, by
//! period (nothing if none). Anything else, or a total that would overflow, fails with
//! an error quoting the message and changes nothing.
//!
//! The ledger counts each (SUB, PERIOD) rather than keeping a set: a charge handled twice
//! would show as a count of 2, which the effectively-once delivery of the subscription's
//! tells (docs/delivery.md) must never produce. Its state is explicit (`Book`, saved
//! with `shardhost::State`: a version, 1, the total, then per subscription its name and
//! per period the period and its count), which a redeploy's new code loads at the
//! entity's next activation. It grows by one entry per period charged: a real ledger
//! would archive closed periods.
//!
//! Build: as examples/wasm/counter-rust (make examples writes bin/wasm/ledger.wasm).

use std::collections::BTreeMap;

use shardhost::{Context, Entity, Error, State, StateReader, StateWriter};

/// The version of the state's encoding, its first field.
const STATE_VERSION: u64 = 1;

/// What a ledger keeps across incarnations.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Book {
    total: i64,
    /// Per subscription, per period, the charges counted.
    charges: BTreeMap<String, BTreeMap<u64, u64>>,
}

impl State for Book {
    fn save(&self, w: &mut StateWriter) {
        w.u64(STATE_VERSION);
        w.i64(self.total);
        w.u64(self.charges.len() as u64);
        for (sub, periods) in &self.charges {
            w.string(sub);
            w.u64(periods.len() as u64);
            for (period, count) in periods {
                w.u64(*period);
                w.u64(*count);
            }
        }
    }

    fn load(r: &mut StateReader<'_>) -> Result<Self, Error> {
        match r.u64()? {
            STATE_VERSION => {}
            v => return Err(Error::new(format!("ledger: unknown state version {}", v))),
        }
        let mut b = Book { total: r.i64()?, charges: BTreeMap::new() };
        for _ in 0..r.u64()? {
            let sub = r.string()?;
            let mut periods = BTreeMap::new();
            for _ in 0..r.u64()? {
                let period = r.u64()?;
                periods.insert(period, r.u64()?);
            }
            b.charges.insert(sub, periods);
        }
        Ok(b)
    }
}

#[derive(Default)]
pub struct Ledger {
    state: Book,
}

impl Entity for Ledger {
    fn receive(&mut self, _ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
        let b = &mut self.state;
        let text = std::str::from_utf8(msg).map_err(|_| unknown(msg))?;
        let fields: Vec<&str> = text.split_whitespace().collect();
        match fields.as_slice() {
            ["total"] => Ok(b.total.to_string().into_bytes()),
            ["charges", sub] => {
                let mut out = String::new();
                for (period, count) in b.charges.get(*sub).into_iter().flatten() {
                    if !out.is_empty() {
                        out.push('\n');
                    }
                    out.push_str(&format!("{} {}", period, count));
                }
                Ok(out.into_bytes())
            }
            ["charge", sub, period, amount] => {
                let period: u64 = match period.parse() {
                    Ok(p) if p > 0 => p,
                    _ => return Err(Error::new(format!("ledger: charge wants PERIOD, a positive integer, got {:?}", period))),
                };
                let amount: i64 = match amount.parse() {
                    Ok(a) if a > 0 => a,
                    _ => return Err(Error::new(format!("ledger: charge wants AMOUNT, a positive integer, got {:?}", amount))),
                };
                let total = b
                    .total
                    .checked_add(amount)
                    .ok_or_else(|| Error::new(format!("ledger: a charge of {} would overflow the total {}", amount, b.total)))?;
                b.total = total;
                *b.charges.entry(sub.to_string()).or_default().entry(period).or_insert(0) += 1;
                Ok(total.to_string().into_bytes())
            }
            _ => Err(unknown(msg)),
        }
    }

    shardhost::explicit_state!(state);
}

fn unknown(msg: &[u8]) -> Error {
    Error::new(format!(
        "ledger: unknown message {:?} (want charge SUB PERIOD AMOUNT, total or charges SUB)",
        String::from_utf8_lossy(msg)
    ))
}

shardhost::entity!(Ledger, |_id: &str| Ledger::default());

#[cfg(test)]
mod tests {
    use super::{Book, Ledger};
    use shardhost::{Harness, State};

    fn harness() -> Harness<Ledger> {
        Harness::new("ledger", "main", |_id: &str| Ledger::default())
    }

    fn send(h: &mut Harness<Ledger>, msg: &str) -> String {
        String::from_utf8(h.send_from("subscription/s1", msg.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn counts_charges_per_subscription_and_period() {
        let mut h = harness();
        assert_eq!(send(&mut h, "charge s1 1 7"), "7");
        assert_eq!(send(&mut h, "charge s1 2 7"), "14");
        assert_eq!(send(&mut h, "charge s2 1 5"), "19");
        // A doubled charge shows as a count of 2.
        assert_eq!(send(&mut h, "charge s1 2 7"), "26");
        assert_eq!(send(&mut h, "total"), "26");
        assert_eq!(send(&mut h, "charges s1"), "1 1\n2 2");
        assert_eq!(send(&mut h, "charges s2"), "1 1");
        assert_eq!(send(&mut h, "charges nobody"), "");
    }

    #[test]
    fn state_survives_a_reincarnation() {
        let mut h = harness();
        send(&mut h, "charge s1 1 7");
        send(&mut h, "charge s2 3 5");
        h.reincarnate().unwrap();
        assert_eq!(send(&mut h, "total"), "12");
        assert_eq!(send(&mut h, "charges s2"), "3 1");
        let saved = h.snapshot().unwrap().unwrap();
        let book = Book::from_state(&saved).unwrap();
        assert_eq!(book.total, 12);
        assert_eq!(book.to_state(), saved);
    }

    #[test]
    fn bad_input_changes_nothing() {
        let mut h = harness();
        send(&mut h, "charge s1 1 7");
        for bad in [
            "",
            "charge",
            "charge s1 1",
            "charge s1 0 7",
            "charge s1 -1 7",
            "charge s1 x 7",
            "charge s1 2 0",
            "charge s1 2 -3",
            "charge s1 2 y",
            "charge s1 2 9223372036854775807",
            "charges",
            "total now",
        ] {
            assert!(h.send(bad.as_bytes()).is_err(), "{:?}: no error", bad);
        }
        assert_eq!(send(&mut h, "total"), "7");
        assert_eq!(send(&mut h, "charges s1"), "1 1");
    }
}
