//! annal-loom-tests: loom models of annal's hand-written concurrency.
//!
//! # Layout
//!
//! - `sync` (later): a facade that maps to `loom::sync` under `--cfg loom` and to `std::sync`
//!   otherwise, so the same code is model-checked and shipped.
//! - `tests/` (later): one model file per concurrent structure, each `#![cfg(loom)]` so a plain
//!   `cargo test` compiles them away.
//!
//! Run the models with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p annal-loom-tests --release`.
//! No hand-written concurrency exists yet, so there is nothing to model.
#![forbid(unsafe_code)]
