//! The facade the included engine sources compile against here: `loom::sync` under
//! `--cfg loom`, `std::sync` otherwise (mirrors `annal_engine::sync`).

#[cfg(loom)]
pub use loom::sync::Mutex;
#[cfg(not(loom))]
pub use std::sync::Mutex;
