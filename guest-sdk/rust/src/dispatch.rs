//! What the wasm exports and the Harness share: the instance's one entity, the
//! message buffer, the panic line.

// Inbox and panic_line serve the wasm exports; natively only the tests use them.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use crate::{Context, Entity, Error, MAX_SNAPSHOT_SIZE};
#[cfg(doc)] // names the docs link to
use crate::Harness;

/// Holds the one entity of an instance and its context, creating it when first needed.
/// The wasm exports and the [`Harness`] both go through it.
pub(crate) struct Dispatcher<E> {
    pub(crate) live: Option<(E, Context)>,
}

impl<E: Entity> Dispatcher<E> {
    pub(crate) const fn new() -> Self {
        Dispatcher { live: None }
    }

    /// The entity and its context; `create` makes them first if there are none yet.
    pub(crate) fn ensure(&mut self, create: impl FnOnce() -> (E, Context)) -> (&mut E, &mut Context) {
        let (e, ctx) = self.live.get_or_insert_with(create);
        (e, ctx)
    }

    /// The entity's guest-level snapshot: `None` if it keeps none or does not exist yet (no
    /// message and no restore), an error if it fails or is over [`MAX_SNAPSHOT_SIZE`].
    pub(crate) fn snapshot(&self) -> Option<Result<Vec<u8>, Error>> {
        let (entity, _) = self.live.as_ref()?;
        match entity.snapshot()? {
            Ok(state) if state.len() > MAX_SNAPSHOT_SIZE => Some(Err(Error::new(format!(
                "shardhost: snapshot of {} bytes is over the cap of {} bytes (4 MiB)",
                state.len(),
                MAX_SNAPSHOT_SIZE
            )))),
            r => Some(r),
        }
    }

    /// Creates the entity with `create` and has it take up `state`. Only before the entity
    /// exists; if it refuses the state, there is still no entity afterwards.
    pub(crate) fn restore(&mut self, state: &[u8], create: impl FnOnce() -> (E, Context)) -> Result<(), Error> {
        if self.live.is_some() {
            return Err(Error::new(
                "shardhost: restore after the entity was created: state is restored once, before the first message",
            ));
        }
        let (mut entity, ctx) = create();
        entity.restore(state)?;
        self.live = Some((entity, ctx));
        Ok(())
    }

    /// As [`restore`](Dispatcher::restore), for a state another version of the module
    /// saved: the entity's [`Entity::migrate`] takes it up.
    pub(crate) fn migrate(&mut self, from_version: u64, state: &[u8], create: impl FnOnce() -> (E, Context)) -> Result<(), Error> {
        if self.live.is_some() {
            return Err(Error::new(
                "shardhost: migration after the entity was created: state is taken up once, before the first message",
            ));
        }
        let (mut entity, ctx) = create();
        entity.migrate(from_version, state)?;
        self.live = Some((entity, ctx));
        Ok(())
    }
}

/// The buffer `shardhost_alloc` hands out: one `Vec`, grown when a larger message comes
/// and reused otherwise.

pub(crate) struct Inbox {
    buf: Vec<u8>,
}

impl Inbox {
    pub(crate) const fn new() -> Self {
        Inbox { buf: Vec::new() }
    }

    /// Returns the address of a buffer of at least `size` bytes, or null when memory
    /// cannot grow (the ABI's "out of memory").
    pub(crate) fn alloc(&mut self, size: u32) -> *mut u8 {
        let size = (size as usize).max(1);
        if self.buf.len() < size {
            self.buf.clear();
            if self.buf.try_reserve_exact(size).is_err() {
                return std::ptr::null_mut();
            }
            self.buf.resize(size, 0);
        }
        self.buf.as_mut_ptr()
    }

    /// The message of `len` bytes at `ptr`, if that lies in the buffer alloc returned.
    pub(crate) fn message(&self, ptr: *const u8, len: u32) -> Option<&[u8]> {
        let len = len as usize;
        if len > self.buf.len() || (len > 0 && ptr != self.buf.as_ptr()) {
            return None;
        }
        Some(&self.buf[..len])
    }
}

/// Turns a panic's payload and location into one line: "panic: MESSAGE at FILE:LINE:COL".

pub(crate) fn panic_line(payload: &(dyn std::any::Any + Send), location: Option<&std::panic::Location<'_>>) -> String {
    let msg = if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.as_str()
    } else {
        "(no message)"
    };
    match location {
        Some(l) => format!("panic: {} at {}:{}:{}", msg, l.file(), l.line(), l.column()),
        None => format!("panic: {}", msg),
    }
}
