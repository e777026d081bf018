//! Distributed data: consistency levels and the typed handles on a key.

use crate::{Code, Context, Error, Json};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// How many replicas a distributed data read or write involves (Akka's ReadConsistency and
/// WriteConsistency). It renders as the ABI's consistency string (`Display`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Consistency {
    /// `local`: this member's replica only.
    #[default]
    Local,
    /// `majority`: a majority of the replicas.
    Majority,
    /// `majority+K`: a majority and K more (at most all).
    MajorityPlus(u32),
    /// `all`: every replica.
    All,
    /// `N`: N replicas.
    N(u32),
}

impl fmt::Display for Consistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Consistency::Local => f.write_str("local"),
            Consistency::Majority => f.write_str("majority"),
            Consistency::MajorityPlus(k) => write!(f, "majority+{}", k),
            Consistency::All => f.write_str("all"),
            Consistency::N(n) => write!(f, "{}", n),
        }
    }
}

// Typed handles on distributed data. Each holds the context and the key; its operations
// build the ABI's operation text, call ddata_update or ddata_get and read the JSON value.
macro_rules! ddata_handle {
    ($(#[$m:meta])* $name:ident, $typ:literal) => {
        $(#[$m])*
        ///
        /// Reads treat a key that does not exist ([`Code::NotFound`]) as the empty value.
        /// Every operation uses the host's default timeout unless
        /// [`timeout`](Self::timeout) sets one.
        pub struct $name<'a> {
            ctx: &'a mut Context,
            key: String,
            timeout: Option<Duration>,
        }

        impl<'a> $name<'a> {
            /// The data type's name in the ABI.
            pub const TYPE: &'static str = $typ;

            pub(crate) fn new(ctx: &'a mut Context, key: &str) -> Self {
                $name { ctx, key: key.to_string(), timeout: None }
            }

            /// Sets the timeout of this handle's reads and writes (at most the current
            /// message's deadline).
            pub fn timeout(mut self, timeout: Duration) -> Self {
                self.timeout = Some(timeout);
                self
            }

            /// The key.
            pub fn key(&self) -> &str {
                &self.key
            }

            /// Deletes the key for good (see [`Context::ddata_delete`]).
            pub fn delete(&mut self, cons: Consistency) -> Result<(), Error> {
                self.ctx.ddata_delete(&self.key, cons, self.timeout)
            }

            fn update(&mut self, op: &str, cons: Consistency) -> Result<Json, Error> {
                let v = self.ctx.ddata_update(&self.key, $typ, op, cons, self.timeout)?;
                Json::parse(&v)
            }

            /// The value as JSON, `None` if the key does not exist.
            fn read(&mut self, cons: Consistency) -> Result<Option<Json>, Error> {
                match self.ctx.ddata_get(&self.key, cons, self.timeout) {
                    Ok(v) => Json::parse(&v).map(Some),
                    Err(e) if e.code() == Code::NotFound => Ok(None),
                    Err(e) => Err(e),
                }
            }

            fn want<T>(&self, v: Option<T>, what: &str, json: &Json) -> Result<T, Error> {
                v.ok_or_else(|| {
                    Error::with_code(
                        Code::TypeMismatch,
                        format!("shardhost: ddata key {:?} ({}): want {}, got {}", self.key, $typ, what, json),
                    )
                })
            }
        }
    };
}

/// A map key in an operation is one word: not empty, without spaces.
fn map_key(key: &str) -> Result<&str, Error> {
    if key.is_empty() || key.contains(char::is_whitespace) {
        return Err(Error::with_code(Code::BadRequest, format!("shardhost: map key {:?}: want one word", key)));
    }
    Ok(key)
}

ddata_handle!(
    /// A grow-only counter (`gcounter`), from [`Context::g_counter`].
    GCounter,
    "gcounter"
);

impl GCounter<'_> {
    /// Adds `n` and returns the new value.
    pub fn incr(&mut self, n: u64, cons: Consistency) -> Result<i64, Error> {
        let v = self.update(&format!("incr {}", n), cons)?;
        self.want(v.as_i64(), "a number", &v)
    }

    /// The value (0 if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<i64, Error> {
        match self.read(cons)? {
            None => Ok(0),
            Some(v) => self.want(v.as_i64(), "a number", &v),
        }
    }
}

ddata_handle!(
    /// A counter that goes up and down (`pncounter`), from [`Context::pn_counter`].
    PNCounter,
    "pncounter"
);

impl PNCounter<'_> {
    /// Adds `n` and returns the new value.
    pub fn incr(&mut self, n: u64, cons: Consistency) -> Result<i64, Error> {
        let v = self.update(&format!("incr {}", n), cons)?;
        self.want(v.as_i64(), "a number", &v)
    }

    /// Subtracts `n` and returns the new value.
    pub fn decr(&mut self, n: u64, cons: Consistency) -> Result<i64, Error> {
        let v = self.update(&format!("decr {}", n), cons)?;
        self.want(v.as_i64(), "a number", &v)
    }

    /// The value (0 if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<i64, Error> {
        match self.read(cons)? {
            None => Ok(0),
            Some(v) => self.want(v.as_i64(), "a number", &v),
        }
    }
}

ddata_handle!(
    /// A grow-only set of strings (`gset`), from [`Context::g_set`]. The host trims an
    /// element's surrounding whitespace; an empty element is a bad request.
    GSet,
    "gset"
);

impl GSet<'_> {
    /// Adds `elem` and returns the new elements, sorted.
    pub fn add(&mut self, elem: &str, cons: Consistency) -> Result<Vec<String>, Error> {
        let v = self.update(&format!("add {}", elem), cons)?;
        self.want(v.as_string_array(), "an array of strings", &v)
    }

    /// The elements, sorted (none if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<Vec<String>, Error> {
        match self.read(cons)? {
            None => Ok(Vec::new()),
            Some(v) => self.want(v.as_string_array(), "an array of strings", &v),
        }
    }
}

ddata_handle!(
    /// An observed-remove set of strings (`orset`), from [`Context::or_set`]. The host
    /// trims an element's surrounding whitespace; an empty element is a bad request.
    ORSet,
    "orset"
);

impl ORSet<'_> {
    /// Adds `elem` and returns the new elements, sorted.
    pub fn add(&mut self, elem: &str, cons: Consistency) -> Result<Vec<String>, Error> {
        let v = self.update(&format!("add {}", elem), cons)?;
        self.want(v.as_string_array(), "an array of strings", &v)
    }

    /// Removes `elem` and returns the new elements, sorted.
    pub fn remove(&mut self, elem: &str, cons: Consistency) -> Result<Vec<String>, Error> {
        let v = self.update(&format!("remove {}", elem), cons)?;
        self.want(v.as_string_array(), "an array of strings", &v)
    }

    /// Removes every element.
    pub fn clear(&mut self, cons: Consistency) -> Result<(), Error> {
        self.update("clear", cons).map(|_| ())
    }

    /// The elements, sorted (none if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<Vec<String>, Error> {
        match self.read(cons)? {
            None => Ok(Vec::new()),
            Some(v) => self.want(v.as_string_array(), "an array of strings", &v),
        }
    }
}

ddata_handle!(
    /// A last-writer-wins map from words to strings (`lwwmap`), from [`Context::lww_map`].
    /// A map key is one word (no spaces); a value is the rest of the operation's text.
    LWWMap,
    "lwwmap"
);

impl LWWMap<'_> {
    /// Sets `k` to `v` and returns the new map.
    pub fn put(&mut self, k: &str, v: &str, cons: Consistency) -> Result<BTreeMap<String, String>, Error> {
        let v = self.update(&format!("put {} {}", map_key(k)?, v), cons)?;
        self.want(v.as_string_map(), "an object of strings", &v)
    }

    /// Removes `k` and returns the new map.
    pub fn remove(&mut self, k: &str, cons: Consistency) -> Result<BTreeMap<String, String>, Error> {
        let v = self.update(&format!("remove {}", map_key(k)?), cons)?;
        self.want(v.as_string_map(), "an object of strings", &v)
    }

    /// The map (empty if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<BTreeMap<String, String>, Error> {
        match self.read(cons)? {
            None => Ok(BTreeMap::new()),
            Some(v) => self.want(v.as_string_map(), "an object of strings", &v),
        }
    }
}

ddata_handle!(
    /// A map from words to counters (`pncountermap`), from [`Context::pn_counter_map`].
    PNCounterMap,
    "pncountermap"
);

impl PNCounterMap<'_> {
    /// Adds `n` to the counter `k` and returns the new map.
    pub fn incr(&mut self, k: &str, n: u64, cons: Consistency) -> Result<BTreeMap<String, i64>, Error> {
        let v = self.update(&format!("incr {} {}", map_key(k)?, n), cons)?;
        self.want(v.as_number_map(), "an object of numbers", &v)
    }

    /// Subtracts `n` from the counter `k` and returns the new map.
    pub fn decr(&mut self, k: &str, n: u64, cons: Consistency) -> Result<BTreeMap<String, i64>, Error> {
        let v = self.update(&format!("decr {} {}", map_key(k)?, n), cons)?;
        self.want(v.as_number_map(), "an object of numbers", &v)
    }

    /// Removes the counter `k` and returns the new map.
    pub fn remove(&mut self, k: &str, cons: Consistency) -> Result<BTreeMap<String, i64>, Error> {
        let v = self.update(&format!("remove {}", map_key(k)?), cons)?;
        self.want(v.as_number_map(), "an object of numbers", &v)
    }

    /// The map (empty if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<BTreeMap<String, i64>, Error> {
        match self.read(cons)? {
            None => Ok(BTreeMap::new()),
            Some(v) => self.want(v.as_number_map(), "an object of numbers", &v),
        }
    }
}

ddata_handle!(
    /// A map from words to sets of strings (`ormultimap`), from [`Context::or_multi_map`].
    ORMultiMap,
    "ormultimap"
);

impl ORMultiMap<'_> {
    /// Adds `v` to the set of `k` and returns the new map.
    pub fn add(&mut self, k: &str, v: &str, cons: Consistency) -> Result<BTreeMap<String, Vec<String>>, Error> {
        let v = self.update(&format!("add {} {}", map_key(k)?, v), cons)?;
        self.want(v.as_set_map(), "an object of arrays of strings", &v)
    }

    /// Removes `v` from the set of `k` and returns the new map.
    pub fn remove(&mut self, k: &str, v: &str, cons: Consistency) -> Result<BTreeMap<String, Vec<String>>, Error> {
        let v = self.update(&format!("remove {} {}", map_key(k)?, v), cons)?;
        self.want(v.as_set_map(), "an object of arrays of strings", &v)
    }

    /// Removes `k` and its set, and returns the new map.
    pub fn delete_key(&mut self, k: &str, cons: Consistency) -> Result<BTreeMap<String, Vec<String>>, Error> {
        let v = self.update(&format!("delete {}", map_key(k)?), cons)?;
        self.want(v.as_set_map(), "an object of arrays of strings", &v)
    }

    /// The map (empty if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<BTreeMap<String, Vec<String>>, Error> {
        match self.read(cons)? {
            None => Ok(BTreeMap::new()),
            Some(v) => self.want(v.as_set_map(), "an object of arrays of strings", &v),
        }
    }
}

ddata_handle!(
    /// A last-writer-wins register holding a string (`lwwregister`), from
    /// [`Context::lww_register`].
    LWWRegister,
    "lwwregister"
);

impl LWWRegister<'_> {
    /// Sets the value and returns the new one.
    pub fn set(&mut self, value: &str, cons: Consistency) -> Result<Option<String>, Error> {
        let v = self.update(&format!("set {}", value), cons)?;
        self.want(v.as_optional_string(), "a string or null", &v)
    }

    /// The value: `None` if it was never set (or the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<Option<String>, Error> {
        match self.read(cons)? {
            None => Ok(None),
            Some(v) => self.want(v.as_optional_string(), "a string or null", &v),
        }
    }
}

ddata_handle!(
    /// A flag that can only be switched on (`flag`), from [`Context::flag`].
    Flag,
    "flag"
);

impl Flag<'_> {
    /// Switches the flag on (it stays on) and returns the new value, `true`.
    pub fn enable(&mut self, cons: Consistency) -> Result<bool, Error> {
        let v = self.update("enable", cons)?;
        self.want(v.as_bool(), "a boolean", &v)
    }

    /// Whether the flag is on (`false` if the key does not exist).
    pub fn get(&mut self, cons: Consistency) -> Result<bool, Error> {
        match self.read(cons)? {
            None => Ok(false),
            Some(v) => self.want(v.as_bool(), "a boolean", &v),
        }
    }
}
