//! The synchronization facade: `std::sync` normally, `loom::sync` under `--cfg loom`.
//!
//! Hand-written concurrency in annal uses these names only, so the same source that ships is
//! the source `loom-tests` model-checks (it includes those files, and this facade itself).

#[cfg(loom)]
pub use loom::sync::Mutex;
#[cfg(not(loom))]
pub use std::sync::Mutex;
