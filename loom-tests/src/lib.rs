//! annal-loom-tests: loom models of annal's hand-written concurrency.
//!
//! The engine as a whole cannot be compiled under `--cfg loom` (its credential-store
//! dependencies do not build there), so each concurrent piece of the engine lives in a file that
//! uses only the `crate::sync` facade, and this crate includes that very file beside the same
//! facade file. What is model-checked is the source that ships, not a copy.
//!
//! # Layout
//!
//! - [`sync`]: `engine/src/sync.rs`, the engine's own facade (`loom::sync` under `--cfg loom`,
//!   `std::sync` otherwise), included verbatim so there is one facade, not two.
//! - [`first_use`]: `engine/src/keys/first_use.rs` (load-or-create of a namespace key under one
//!   lock), included verbatim.
//! - `tests/first_use.rs`: its model: concurrent first uses create exactly one key and everyone
//!   gets that key; and a control model without the lock, which loom must catch.
//!
//! - [`capture_channel`]: `engine/src/capture/channel.rs`, the capture path's concurrent core
//!   (bounded queue, pending-drops counter and drop markers, admission gate, start/completion
//!   pairing and the pairs' numbers, the in-flight count behind close), included verbatim.
//! - `tests/capture.rs`: its models: markers (no drop lost or counted twice, a marker before the
//!   first item pushed after a drop), pairing (a completion is recorded iff its start was
//!   accepted, counted iff its start was dropped; concurrent starts get distinct numbers), close (nothing accepted is left undrained once
//!   the final drain settles); and two control models loom must catch (counter swapped before
//!   the pop; quiescence checked after the drain).
//!
//! - [`drain_wakeup`]: `engine/src/capture/wakeup.rs`, the ingress's one-pending-`Drain` flag,
//!   included verbatim.
//! - `tests/drain_wakeup.rs`: its models: never two `Drain` messages in flight, and items left
//!   queued always have one pending (no lost wake-up); a `Drain` that is lost after its claim is
//!   sent again by the ticker's `StallWatch` (never three in flight); and two controls loom must
//!   catch (the flag released only after a drain that found items; looks that never heal).
//!
//! Each model file is `#![cfg(loom)]`, so a plain `cargo test` compiles it away. Run them with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p annal-loom-tests --release`
//! (`.ci/test` does).
#![forbid(unsafe_code)]

#[path = "../../engine/src/sync.rs"]
pub mod sync;

#[path = "../../engine/src/keys/first_use.rs"]
pub mod first_use;

#[path = "../../engine/src/capture/channel.rs"]
pub mod capture_channel;

#[path = "../../engine/src/capture/wakeup.rs"]
pub mod drain_wakeup;
