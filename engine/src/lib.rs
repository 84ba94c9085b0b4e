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
//! - `capture`: the capture hook agent runtimes call on every tool dispatch (`CaptureHandle`:
//!   no lock, I/O, syscall or wake; a bounded lock-free queue, counted drops, an admission gate,
//!   a race-free close) and the drain side the Ingress actor empties (`CaptureDrain`, with drop
//!   markers). Its concurrent core is loom-checked.
//! - `clock`, `entropy`: the injected clock (wall and monotonic) and randomness; `boot`: the
//!   boot id the shell reads, journaled with sequence reservations.
//! - `sync`: the `std::sync` / `loom::sync` facade that hand-written concurrency uses.
//! - `test_support` (feature `simulation`): what the `harness = false` proof suites share.
//! - `storage`: the filesystem seam. The `Storage` trait over held directory descriptors, the
//!   real `FsStorage`, and `FaultyStorage`, which fails writes and syncs on purpose and
//!   simulates crashes for tests.
//! - `store`: the on-disk store. It is a contract store the reference opens in place, with
//!   annal's sidecar beside it. This module holds creation and adoption, the `Stream` trait
//!   (history, and later the journal), the writer, the reader, and delete (plan, destroy,
//!   remove). The writer assigns sequences, rotates, and abandons a chunk on any error. The
//!   reader gives per-chunk verdicts and reads records by location.
//!
//! - `journal`: the engine journal's closed schema (`urn:annal:schema:engine-journal:v1`) and
//!   its `Journal` stream binding, the engine state projected from it (`State::apply`,
//!   `State::replay`) and the command decisions (`decide`). Pure.
//! - `health`: supervisor and store signals and the health fold (`health::replay`), with the
//!   documented precedence among the 13 categories (`docs/health.md`). Pure.
//! - `history`: the history writer's rules as a pure state machine: drafts from drained
//!   captures, drop accounting and markers, the sequence reservation, store and key failure
//!   signals, capture admission and the quota, the group-commit tick, settings and control
//!   decisions, the contract's on/off state at open, seal chaining and what the seal jobs
//!   found. The Writer actor interprets the effects and plans it returns. Pure.
//! - `supervision`: the restart decision, OTP restart intensity as a sliding window over
//!   injected time, and the restart history derived from persisted signals. Pure.
//!
//! - `query`: the derived index's in-memory form and the one planner of `history_query`
//!   (every filter, the newest `limit`, ascending; retention exact by event time). Pure.
//! - `index`: the derived index files (`engine/index/<chunk_id>.idx`: an rkyv archive of a
//!   chunk's entries under XChaCha20-Poly1305 with the index purpose key; rebuildable, never
//!   authoritative) and `load_index`, which builds the in-memory `Index` from them, scanning
//!   only the chunks whose file is missing, stale or invalid. Format: `docs/format.md`.
//!
//! - `seal`: chunk seals (canonical CBOR and a keyed BLAKE3 MAC under the seal purpose key, a
//!   BLAKE3 chain digest over the chunk's exact bytes, chained to the previous seal) in
//!   `engine/seals/`, the checkpoint of the newest seal, and `verify` with its typed findings
//!   (`docs/format.md` "Seals", `docs/design.md` "Verify"). Pure rules over the storage seam.
//!
//! - `policy`: the policy gate's rules (deny by default; per-actor grants with expiry and idle
//!   timeout; bounded-mode manifests; revocation and the global agents switch; the `ReadGrant`
//!   proof only a decision mints) and single-use paging cursors (`docs/policy.md`). Pure.
#![forbid(unsafe_code)]

pub mod boot;
pub mod capture;
pub mod clock;
pub mod consultation;
pub mod entropy;
pub mod health;
pub mod history;
pub mod index;
pub mod journal;
pub mod keys;
pub mod policy;
pub mod profile;
pub mod query;
pub mod seal;
pub mod storage;
pub mod store;
pub mod supervision;
pub mod sync;
#[cfg(feature = "simulation")]
pub mod test_support;

#[cfg(test)]
mod test_strategies;
