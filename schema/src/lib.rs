//! annal-schema: the v0 history event contract and the history tools' I/O, as closed types.
//!
//! Nothing here does I/O. Every type rejects what the contract forbids at deserialization, so
//! an event that breaks the contract cannot be built, read or returned.
//!
//! # Layout
//!
//! - [`health`]: the 13 fixed health categories.
//! - [`error_code`]: the fixed structured error codes of the tools.
#![forbid(unsafe_code)]

pub mod error_code;
pub mod health;

pub use error_code::ErrorCode;
pub use health::HealthCategory;
