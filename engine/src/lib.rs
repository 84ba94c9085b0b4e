//! annal-engine: the functional core of annal.
//!
//! Everything here is synchronous and deterministic. The clock, the filesystem root and the
//! source of randomness are passed in, so every rule can be tested without threads or sleeps.
//! The imperative shell (`annal-actors`) owns threads, timers and supervision.
//!
//! # Layout
//!
//! - `profile`: the storage profile v1 codec (chunk header, COSE_Encrypt0 records), the
//!   plaintext check against the closed v0 event, and the classifying chunk reader (verdicts:
//!   complete, torn tail, corrupt with a reason). Pure: bytes in, bytes or verdicts out.
//! - `keys`: key custody. The `KeyProvider` trait, the OS credential-store providers
//!   (Secret Service, kernel keyutils), an in-memory provider for tests, and the type that owns
//!   the namespace root key and hands out only derived purpose keys. Design and failure table:
//!   `docs/key-custody.md`.
//! - `clock`, `entropy`: the injected clock and randomness.
//! - `sync`: the `std::sync` / `loom::sync` facade that hand-written concurrency uses.
//! - `store`: the on-disk chunk store: layout and ownership marker, permissions and no-follow
//!   opens, the writer lock, the chunk writer with rotation, and the store-wide reader that
//!   orders chunks by sequence and merges their events; and removing a store only with proof
//!   that its keys were destroyed.
//!
//! Later work adds seals, the derived index, the engine journal, state and health projections,
//! policy evaluation and the capture queue protocol.
#![forbid(unsafe_code)]

pub mod clock;
pub mod entropy;
pub mod keys;
pub mod profile;
pub mod store;
pub mod sync;
