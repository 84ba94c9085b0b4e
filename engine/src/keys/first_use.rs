//! First use of a namespace key: load it, or create it if absent, exactly once per process.
//!
//! A credential store has no "create if absent". Without serialization two threads could both
//! find no key, both write one, and one of them would go on using a key the store no longer
//! holds: every chunk it writes would be unreadable afterwards. [`load_or_create`] runs the
//! check and the creation under one lock, so later callers always see the first caller's key.
//!
//! This file uses only `crate::sync` and `core`/`std` items that loom does not replace:
//! `loom-tests` includes it verbatim and model-checks it (`loom-tests/tests/first_use.rs`).
//! Across processes the store's writer lock must be held (docs/key-custody.md).

use crate::sync::Mutex;

/// Runs `load`, and `create` only if `load` found nothing, all under `lock`. Returns the value
/// and whether this call created it. A poisoned lock only means an earlier caller panicked
/// mid-way; the store is still the source of truth, so the check simply runs again.
pub fn load_or_create<T, E>(
    lock: &Mutex<()>,
    load: impl FnOnce() -> Result<Option<T>, E>,
    create: impl FnOnce() -> Result<T, E>,
) -> Result<(T, bool), E> {
    let _serialized = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match load()? {
        Some(existing) => Ok((existing, false)),
        None => Ok((create()?, true)),
    }
}
