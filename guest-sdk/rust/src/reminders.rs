//! Durable reminders (SPEC.md, "v1: reminders"): the reminder list encoding, shared by
//! the wasm32 host and the harness.

/// A durable reminder of the entity ([`Context::reminders`](crate::Context::reminders)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reminder {
    /// The reminder's name.
    pub name: String,
    /// When it comes next, in Unix milliseconds.
    pub due_unix_ms: i64,
    /// How often it comes again, in milliseconds; 0 for a reminder that comes once.
    pub interval_ms: i64,
    /// The bytes it delivers.
    pub payload: Vec<u8>,
}

/// Encodes reminders as `reminder_list` gives them: per reminder, little-endian, u32 name
/// length, name, i64 due, i64 interval, u32 payload length, payload.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))] // the harness's reminder_list
pub(crate) fn encode(rs: &[Reminder]) -> Vec<u8> {
    let mut b = Vec::new();
    for r in rs {
        b.extend_from_slice(&(r.name.len() as u32).to_le_bytes());
        b.extend_from_slice(r.name.as_bytes());
        b.extend_from_slice(&r.due_unix_ms.to_le_bytes());
        b.extend_from_slice(&r.interval_ms.to_le_bytes());
        b.extend_from_slice(&(r.payload.len() as u32).to_le_bytes());
        b.extend_from_slice(&r.payload);
    }
    b
}

/// Decodes `reminder_list`'s result; `None` if it is malformed.
pub(crate) fn decode(mut b: &[u8]) -> Option<Vec<Reminder>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (head, tail) = b.split_at(n);
        *b = tail;
        Some(head)
    }
    fn u32_le(b: &mut &[u8]) -> Option<usize> {
        let x = take(b, 4)?;
        Some(u32::from_le_bytes([x[0], x[1], x[2], x[3]]) as usize)
    }
    fn i64_le(b: &mut &[u8]) -> Option<i64> {
        let x = take(b, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(x);
        Some(i64::from_le_bytes(a))
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = u32_le(&mut b)?;
        let name = String::from_utf8(take(&mut b, n)?.to_vec()).ok()?;
        let due_unix_ms = i64_le(&mut b)?;
        let interval_ms = i64_le(&mut b)?;
        let p = u32_le(&mut b)?;
        let payload = take(&mut b, p)?.to_vec();
        out.push(Reminder { name, due_unix_ms, interval_ms, payload });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let rs = vec![
            Reminder { name: "a".into(), due_unix_ms: 5, interval_ms: 0, payload: b"pay".to_vec() },
            Reminder { name: "b".into(), due_unix_ms: -1, interval_ms: 1000, payload: Vec::new() },
        ];
        let b = encode(&rs);
        assert_eq!(decode(&b), Some(rs));
        for n in 1..b.len() {
            if n == 4 + 1 + 8 + 8 + 4 + 3 {
                continue; // the first reminder alone is a whole list
            }
            assert_eq!(decode(&b[..n]), None, "{} of {} bytes decoded", n, b.len());
        }
    }
}
