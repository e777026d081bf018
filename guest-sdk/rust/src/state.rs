//! Explicit state: [`State`], [`StateWriter`], [`StateReader`] and the
//! [`explicit_state!`](crate::explicit_state) macro. The encoding is the Go SDK's
//! (`StateWriter` and `StateReader` in guest-sdk/go/state.go), so a state saved by one
//! SDK reads in the other; docs/state.md describes it.

use std::collections::BTreeMap;

use crate::Error;

/// A value an entity keeps as its explicit state: it saves itself field by field into a
/// [`StateWriter`] and loads itself back from a [`StateReader`], in the same order.
///
/// With [`explicit_state!`](crate::explicit_state) in its `impl Entity`, an entity keeps
/// one `State` field as its state: the host saves it through `shardhost_snapshot` on
/// passivation, handoff, shutdown and checkpoints, and the next incarnation (perhaps of
/// newer code, after a redeploy) loads it in `shardhost_restore`.
///
/// ```
/// use shardhost::{Context, Entity, Error, Harness, State, StateReader, StateWriter};
///
/// #[derive(Default)]
/// struct Room { members: Vec<String>, topic: String }
///
/// impl State for Room {
///     fn save(&self, w: &mut StateWriter) {
///         w.u64(1); // the encoding's version: newer code may read older versions
///         w.strings(&self.members);
///         w.string(&self.topic);
///     }
///
///     fn load(r: &mut StateReader<'_>) -> Result<Self, Error> {
///         match r.u64()? {
///             1 => Ok(Room { members: r.strings()?, topic: r.string()? }),
///             v => Err(Error::new(format!("room: unknown state version {}", v))),
///         }
///     }
/// }
///
/// struct Chat { state: Room }
///
/// impl Entity for Chat {
///     fn receive(&mut self, _ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
///         self.state.members.push(String::from_utf8(msg.to_vec())?);
///         Ok(self.state.members.len().to_string().into_bytes())
///     }
///
///     shardhost::explicit_state!(state);
/// }
///
/// let mut h = Harness::new("room", "r1", |_id: &str| Chat { state: Room::default() });
/// h.send(b"ann").unwrap();
/// h.reincarnate().unwrap(); // saved and loaded into a new entity, as on a passivation
/// assert_eq!(h.send(b"bob").unwrap(), b"2");
/// ```
///
/// The SDK implements `State` for `i64`, `u64`, `bool`, `String`, `Vec<String>`,
/// `BTreeMap<String, String>` and `BTreeMap<String, i64>`; the first, the list and the
/// maps encode as the Go SDK's `Int64`, `Strings`, `StringMap` and their `Int64Map`.
pub trait State: Sized {
    /// Writes the state into `w`.
    fn save(&self, w: &mut StateWriter);

    /// Reads a state that [`save`](State::save) wrote (perhaps an older version's) from
    /// `r`. An `Err` refuses it: the host fails the activation and keeps the state.
    fn load(r: &mut StateReader<'_>) -> Result<Self, Error>;

    /// The state's bytes: what [`save`](State::save) writes.
    fn to_state(&self) -> Vec<u8> {
        let mut w = StateWriter::new();
        self.save(&mut w);
        w.into_bytes()
    }

    /// Loads a state from all of `state`: an error if [`load`](State::load) fails or
    /// leaves bytes unread.
    fn from_state(state: &[u8]) -> Result<Self, Error> {
        let mut r = StateReader::new(state);
        let s = Self::load(&mut r)?;
        r.done()?;
        Ok(s)
    }
}

/// Implements [`Entity::snapshot`](crate::Entity::snapshot) and
/// [`Entity::restore`](crate::Entity::restore) inside an `impl Entity` block, for an
/// entity whose explicit state is the named field, of a type that implements [`State`]:
/// `shardhost::explicit_state!(state);`. The snapshot is the field's
/// [`to_state`](State::to_state); a restore replaces the field with
/// [`from_state`](State::from_state) of the saved bytes, or fails with its error and
/// leaves the entity as the factory made it.
#[macro_export]
macro_rules! explicit_state {
    ($field:ident) => {
        fn snapshot(&self) -> ::std::option::Option<::std::result::Result<::std::vec::Vec<u8>, $crate::Error>> {
            ::std::option::Option::Some(::std::result::Result::Ok($crate::State::to_state(&self.$field)))
        }

        fn restore(&mut self, state: &[u8]) -> ::std::result::Result<(), $crate::Error> {
            self.$field = $crate::State::from_state(state)?;
            ::std::result::Result::Ok(())
        }
    };
}

/// Encodes a state field by field, in the compact binary form [`StateReader`] reads back
/// in the same order (the Go SDK's): signed integers as zig-zag varints, unsigned ones as
/// varints (LEB128, as Go's `encoding/binary`), booleans as one byte 0 or 1, strings and
/// bytes with their length (a varint) before them, lists with their count, maps with
/// their count and then key and value by key order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateWriter {
    buf: Vec<u8>,
}

impl StateWriter {
    /// An empty writer.
    pub fn new() -> StateWriter {
        StateWriter { buf: Vec::new() }
    }

    /// The bytes written so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The encoded state.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// Writes `n` (a zig-zag varint, 1 to 10 bytes).
    pub fn i64(&mut self, n: i64) {
        let mut u = (n as u64) << 1;
        if n < 0 {
            u = !u;
        }
        self.u64(u);
    }

    /// Writes `n` (a varint, 1 to 10 bytes).
    pub fn u64(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.buf.push(n as u8 | 0x80);
            n >>= 7;
        }
        self.buf.push(n as u8);
    }

    /// Writes `v` (one byte, 1 or 0).
    pub fn bool(&mut self, v: bool) {
        self.buf.push(v as u8);
    }

    /// Writes `s`: its length in bytes, then its UTF-8 bytes.
    pub fn string(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    /// Writes `b`: its length, then the bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    /// Writes a list of strings: its count, then each string.
    pub fn strings<S: AsRef<str>>(&mut self, list: &[S]) {
        self.u64(list.len() as u64);
        for s in list {
            self.string(s.as_ref());
        }
    }

    /// Writes a map of strings: its count, then each key and value in key order.
    pub fn string_map(&mut self, m: &BTreeMap<String, String>) {
        self.u64(m.len() as u64);
        for (k, v) in m {
            self.string(k);
            self.string(v);
        }
    }

    /// Writes a map of integers: its count, then each key and value in key order.
    pub fn i64_map(&mut self, m: &BTreeMap<String, i64>) {
        self.u64(m.len() as u64);
        for (k, v) in m {
            self.string(k);
            self.i64(*v);
        }
    }
}

/// Decodes what a [`StateWriter`] wrote, in the same order. Every read returns an
/// [`Error`] ("shardhost: bad state encoding: ...") when the bytes run out or do not
/// decode (a varint over 64 bits, a boolean other than 0 or 1, a string that is not
/// UTF-8, a count larger than the bytes left could hold), so a bad state cannot make a
/// reader allocate without bound. A state version that adds fields at the end can test
/// [`more`](StateReader::more) before reading them.
#[derive(Clone, Debug)]
pub struct StateReader<'a> {
    b: &'a [u8],
}

fn bad(what: &str) -> Error {
    Error::new(format!("shardhost: bad state encoding: {}", what))
}

impl<'a> StateReader<'a> {
    /// A reader of `b`.
    pub fn new(b: &'a [u8]) -> StateReader<'a> {
        StateReader { b }
    }

    /// Whether bytes are left to read.
    pub fn more(&self) -> bool {
        !self.b.is_empty()
    }

    /// `Ok` if every byte was read, an error if some are left over.
    pub fn done(&self) -> Result<(), Error> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(bad(&format!("{} bytes left over", self.b.len())))
        }
    }

    /// Reads an unsigned integer.
    pub fn u64(&mut self) -> Result<u64, Error> {
        let mut n: u64 = 0;
        for (i, &c) in self.b.iter().enumerate() {
            if i == 9 && c > 1 {
                return Err(bad("a varint over 64 bits"));
            }
            n |= u64::from(c & 0x7f) << (7 * i);
            if c < 0x80 {
                self.b = &self.b[i + 1..];
                return Ok(n);
            }
        }
        Err(bad("the bytes end inside a varint"))
    }

    /// Reads a signed integer.
    pub fn i64(&mut self) -> Result<i64, Error> {
        let u = self.u64()?;
        let n = (u >> 1) as i64;
        Ok(if u & 1 != 0 { !n } else { n })
    }

    /// Reads a boolean.
    pub fn bool(&mut self) -> Result<bool, Error> {
        match self.b.split_first() {
            Some((&c, rest)) if c <= 1 => {
                self.b = rest;
                Ok(c == 1)
            }
            Some((c, _)) => Err(bad(&format!("a boolean of {}", c))),
            None => Err(bad("the bytes end before a boolean")),
        }
    }

    /// Reads bytes (a copy).
    pub fn bytes(&mut self) -> Result<Vec<u8>, Error> {
        let n = self.length(1)?;
        let (out, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(out.to_vec())
    }

    /// Reads a string; an error if it is not UTF-8.
    pub fn string(&mut self) -> Result<String, Error> {
        String::from_utf8(self.bytes()?).map_err(|_| bad("a string that is not UTF-8"))
    }

    /// Reads a list of strings.
    pub fn strings(&mut self) -> Result<Vec<String>, Error> {
        let n = self.length(1)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.string()?);
        }
        Ok(out)
    }

    /// Reads a map of strings.
    pub fn string_map(&mut self) -> Result<BTreeMap<String, String>, Error> {
        let n = self.length(2)?;
        let mut out = BTreeMap::new();
        for _ in 0..n {
            let k = self.string()?;
            out.insert(k, self.string()?);
        }
        Ok(out)
    }

    /// Reads a map of integers.
    pub fn i64_map(&mut self) -> Result<BTreeMap<String, i64>, Error> {
        let n = self.length(2)?;
        let mut out = BTreeMap::new();
        for _ in 0..n {
            let k = self.string()?;
            out.insert(k, self.i64()?);
        }
        Ok(out)
    }

    /// Reads a count of items of at least `min` bytes each, checked against the bytes
    /// left.
    fn length(&mut self, min: usize) -> Result<usize, Error> {
        let n = self.u64()?;
        if n > (self.b.len() / min) as u64 {
            return Err(bad(&format!("a count of {} with {} bytes left", n, self.b.len())));
        }
        Ok(n as usize)
    }
}

impl State for i64 {
    fn save(&self, w: &mut StateWriter) {
        w.i64(*self);
    }
    fn load(r: &mut StateReader<'_>) -> Result<Self, Error> {
        r.i64()
    }
}

impl State for u64 {
    fn save(&self, w: &mut StateWriter) {
        w.u64(*self);
    }
    fn load(r: &mut StateReader<'_>) -> Result<Self, Error> {
        r.u64()
    }
}

impl State for bool {
    fn save(&self, w: &mut StateWriter) {
        w.bool(*self);
    }
    fn load(r: &mut StateReader<'_>) -> Result<Self, Error> {
        r.bool()
    }
}

impl State for String {
    fn save(&self, w: &mut StateWriter) {
        w.string(self);
    }
    fn load(r: &mut StateReader<'_>) -> Result<Self, Error> {
        r.string()
    }
}

impl State for Vec<String> {
    fn save(&self, w: &mut StateWriter) {
        w.strings(self);
    }
    fn load(r: &mut StateReader<'_>) -> Result<Self, Error> {
        r.strings()
    }
}

impl State for BTreeMap<String, String> {
    fn save(&self, w: &mut StateWriter) {
        w.string_map(self);
    }
    fn load(r: &mut StateReader<'_>) -> Result<Self, Error> {
        r.string_map()
    }
}

impl State for BTreeMap<String, i64> {
    fn save(&self, w: &mut StateWriter) {
        w.i64_map(self);
    }
    fn load(r: &mut StateReader<'_>) -> Result<Self, Error> {
        r.i64_map()
    }
}

#[cfg(test)]
mod tests {
    use super::{State, StateReader, StateWriter};
    use crate::{Context, Entity, Error, Harness};
    use std::collections::BTreeMap;

    /// The Go SDK's state_test.go (TestStateEncodingVector) checks the same bytes: a state
    /// saved by one SDK reads in the other.
    const VECTOR: &str = "0105d804010668c3a96c6c6f0201610002016101310162013201017801ffffffffffffffffff01ffffffffffffffffff01";

    fn hex(b: &[u8]) -> String {
        b.iter().map(|c| format!("{:02x}", c)).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn maps() -> (BTreeMap<String, String>, BTreeMap<String, i64>) {
        let mut sm = BTreeMap::new();
        sm.insert("b".to_string(), "2".to_string());
        sm.insert("a".to_string(), "1".to_string());
        let mut im = BTreeMap::new();
        im.insert("x".to_string(), -1);
        (sm, im)
    }

    #[test]
    fn encoding_is_the_go_sdks() {
        let (sm, im) = maps();
        let mut w = StateWriter::new();
        w.u64(1);
        w.i64(-3);
        w.i64(300);
        w.bool(true);
        w.string("héllo");
        w.strings(&["a", ""]);
        w.string_map(&sm);
        w.i64_map(&im);
        w.i64(i64::MIN);
        w.u64(u64::MAX);
        assert_eq!(hex(w.as_bytes()), VECTOR);

        let b = unhex(VECTOR);
        let mut r = StateReader::new(&b);
        assert_eq!(r.u64().unwrap(), 1);
        assert_eq!(r.i64().unwrap(), -3);
        assert_eq!(r.i64().unwrap(), 300);
        assert!(r.bool().unwrap());
        assert_eq!(r.string().unwrap(), "héllo");
        assert_eq!(r.strings().unwrap(), vec!["a".to_string(), String::new()]);
        assert_eq!(r.string_map().unwrap(), sm);
        assert_eq!(r.i64_map().unwrap(), im);
        assert_eq!(r.i64().unwrap(), i64::MIN);
        assert!(r.more());
        assert_eq!(r.u64().unwrap(), u64::MAX);
        assert!(!r.more());
        r.done().unwrap();
    }

    #[test]
    fn integers_round_trip() {
        for n in [0, 1, -1, 63, -64, 64, -65, i64::MAX, i64::MIN, 1 << 40] {
            assert_eq!(i64::from_state(&n.to_state()).unwrap(), n, "{}", n);
        }
        for n in [0, 127, 128, 16383, 16384, u64::MAX] {
            assert_eq!(u64::from_state(&n.to_state()).unwrap(), n, "{}", n);
        }
    }

    #[test]
    fn bad_encodings_are_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "the bytes end inside a varint"),
            (&[0x80], "the bytes end inside a varint"),
            (&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02], "a varint over 64 bits"),
            (&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81, 0x00], "a varint over 64 bits"),
        ];
        for (b, want) in cases {
            let err = StateReader::new(b).u64().unwrap_err();
            assert_eq!(err.message(), format!("shardhost: bad state encoding: {}", want), "{:?}", b);
        }
        assert!(StateReader::new(&[2]).bool().unwrap_err().message().contains("a boolean of 2"));
        assert!(StateReader::new(&[]).bool().is_err());
        // A count larger than the bytes left: refused before allocating.
        assert!(StateReader::new(&[0xff, 0xff, 0xff, 0xff, 0x0f]).strings().unwrap_err().message().contains("a count of"));
        assert!(StateReader::new(&[3, b'a', b'b']).string().is_err());
        assert!(StateReader::new(&[2, 0xff, 0xfe]).string().unwrap_err().message().contains("not UTF-8"));
        assert!(StateReader::new(&[1, 1, b'a']).string_map().is_err());
        // from_state wants every byte read.
        let err = i64::from_state(&[2, 0]).unwrap_err();
        assert_eq!(err.message(), "shardhost: bad state encoding: 1 bytes left over");
        assert!(bool::from_state(&[]).is_err());
    }

    #[test]
    fn ready_types_round_trip() {
        let (sm, im) = maps();
        assert_eq!(BTreeMap::<String, String>::from_state(&sm.to_state()).unwrap(), sm);
        assert_eq!(BTreeMap::<String, i64>::from_state(&im.to_state()).unwrap(), im);
        let list = vec!["x".to_string(), "yz".to_string()];
        assert_eq!(Vec::<String>::from_state(&list.to_state()).unwrap(), list);
        assert_eq!(String::from_state(&"s".to_string().to_state()).unwrap(), "s");
        assert!(bool::from_state(&true.to_state()).unwrap());
    }

    struct Tally {
        total: i64,
    }

    impl Entity for Tally {
        fn receive(&mut self, _ctx: &mut Context, msg: &[u8]) -> Result<Vec<u8>, Error> {
            self.total += std::str::from_utf8(msg)?.parse::<i64>()?;
            Ok(self.total.to_string().into_bytes())
        }

        crate::explicit_state!(total);
    }

    #[test]
    fn explicit_state_saves_and_restores_the_field() {
        let mut h = Harness::new("tally", "t1", |_id: &str| Tally { total: 0 });
        h.send(b"40").unwrap();
        assert_eq!(h.snapshot().unwrap().unwrap(), 40i64.to_state());
        h.reincarnate().unwrap();
        assert_eq!(h.send(b"2").unwrap(), b"42");

        // A state it cannot read fails the restore and leaves no entity behind.
        let mut bad = Harness::new("tally", "t1", |_id: &str| Tally { total: 0 });
        let err = bad.restore(&[0x80]).unwrap_err();
        assert!(err.message().starts_with("shardhost: bad state encoding"), "{}", err);
        assert!(bad.entity().is_none());
        assert_eq!(bad.send(b"1").unwrap(), b"1");
    }
}
