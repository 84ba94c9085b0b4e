//! annal-bench: criterion benches and the helpers they share.
//!
//! # Layout
//!
//! - `benches/profile.rs`: encode+encrypt and decode+decrypt+validate of one ~700-byte event;
//!   the whole append of a batch through `StoreWriter::append` (with and without its sync); a
//!   record read by offset through `ChunkHandle::read_at`.
//! - `benches/capture.rs`: per-call latency quantiles of the capture hook (`action_started`),
//!   accepted (tight and paced) and on a full queue, with 1 and 8 producer threads.
//! - `benches/append.rs`: durable append through the real `annal_actors::Engine` (events per
//!   second, commit latency under load) and the CPU of an enabled idle engine.
//! - `benches/query.rs`: `history_query` pages (hot and cold) on stores of 10,000 and 100,000
//!   events and a full 100 MiB store, alone, beside a committing writer and through the gate,
//!   and a fresh process's open to its first answer.
//! - `examples/engine_stream.rs`: one engine stream with a per-commit trace, for profiling.
//! - `examples/query_counts.rs`: cold newest-50 pages N times, for callgrind counts.
//! - `src/query.rs`: stores filled through the engine (20 sessions), the reader opened on them,
//!   the bench queries and their timing.
//! - `src/engine.rs`: an enabled engine on a fresh store, the producer (and flusher) of a
//!   stream, and the read-back check.
//! - `examples/profile_counts.rs`: drives the profile codec, the writer or the reader N times
//!   for callgrind counts.
//! - `src/lib.rs`: shared helpers: the bench event and chunk header, a fresh store with a
//!   history writer on it, and printing `FIGURE <name> <value> <unit>` lines after criterion's
//!   own output.
#![forbid(unsafe_code)]

pub mod engine;
pub mod query;

use std::num::NonZeroU64;
use std::path::Path;
use std::sync::Arc;

use annal_engine::clock::{Clock, SystemClock};
use annal_engine::keys::{HistoryKeys, KeyReference, RootKey};
use annal_engine::profile::{ChunkHeader, ChunkId};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{History, StoreWriter, WriterConfig, create_store, open_store};
use annal_schema::{Event, EventDraft};

/// A 664-byte `action_started` event from the reference fixture (`records.json`, record 10):
/// the ~650-byte event the profile budgets are stated for.
pub const EVENT_JSON: &str = r#"{"specversion":"1.0","id":"43b3ae612880fe657c86f7ce72a14ed7","source":"urn:cua-driver:history:6dd3aa1eef99854a9a3d39ba1e2315f1","type":"cua-driver.history.action_started.v0","subject":"action/10e85c46f566ae135664e26c48092373","time":"2026-11-30T22:14:04.271158134Z","datacontenttype":"application/json","dataschema":"urn:cua-driver:schema:history-event:v0","data":{"session_id":"b11ddce8dbd1872c9250e3f67dad2d9d","action_id":"10e85c46f566ae135664e26c48092373","sequence":11,"platform":"linux","process_model":"in_daemon","capability":"window.frame.set","caller_category":"cua_runtime","application":{"display_name":"Settings"},"payload":{"kind":"action_started"}}}"#;

/// Length of [`EVENT_JSON`] in bytes.
pub const EVENT_JSON_LEN_BYTES: usize = 664;

const _: () = assert!(EVENT_JSON.len() == EVENT_JSON_LEN_BYTES);

/// Events per batch the append benches hand the writer (one writer dequeue; one sync in the
/// synced figure).
pub const APPEND_BATCH_EVENTS: usize = 1_000;

/// The key reference written into the headers of the bench writer's chunks.
pub const BENCH_KEY_REFERENCE: &str = "bench.history.v1";

/// The fixed root key of the benches (never a real key): the bench writer's, and the one the
/// engine benches put into their in-memory credential store.
pub const BENCH_ROOT_KEY: [u8; 32] = [0x42; 32];

/// The history keys of the benches, from [`BENCH_ROOT_KEY`].
pub fn bench_keys() -> HistoryKeys {
    HistoryKeys::from_root(RootKey::from_bytes(BENCH_ROOT_KEY))
}

/// The chunk header of the benches.
///
/// # Panics
/// Never: the fields are within the contract (a failure is a bug in this function).
pub fn bench_header() -> ChunkHeader {
    ChunkHeader::new(
        1,
        "bench.history.v1",
        "6dd3aa1eef99854a9a3d39ba1e2315f1",
        ChunkId([0x11; 16]),
        [1, 2, 3, 4],
    )
    .unwrap_or_else(|e| panic!("bench header: {e}"))
}

/// `count` drafts of [`EVENT_JSON`] (what capture hands the writer: no id, source or sequence).
///
/// # Panics
/// Never: [`EVENT_JSON`] is a valid v0 event (a failure is a bug in this crate).
pub fn bench_drafts(count: usize) -> Vec<EventDraft> {
    let draft = Event::from_json_slice(EVENT_JSON.as_bytes())
        .unwrap_or_else(|e| panic!("bench event: {e}"))
        .to_draft();
    vec![draft; count]
}

/// A store the benches write to, opened for writing, with its history writer.
pub struct BenchWriter {
    /// The store, opened for writing (it holds the writer lock); readers may share it.
    pub storage: Arc<dyn Storage>,
    /// The history writer, with the OS random source and the system clock.
    pub writer: StoreWriter<History>,
}

/// Creates a fresh store in `namespace_dir` (missing or empty), opens it for writing and opens
/// a history writer on it with [`bench_keys`] and the default limits (4 MiB chunks).
pub fn create_bench_writer(
    namespace_dir: &Path,
) -> Result<BenchWriter, Box<dyn std::error::Error + Send + Sync>> {
    let layout = StoreLayout::in_namespace_dir(namespace_dir);
    create_store(&layout)?;
    let storage: Arc<dyn Storage> = Arc::new(open_store(&layout, Access::Write)?);
    let config = WriterConfig::new(KeyReference::new(BENCH_KEY_REFERENCE)?, NonZeroU64::MIN);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let writer = StoreWriter::<History>::open(Arc::clone(&storage), bench_keys(), config, clock)?;
    Ok(BenchWriter { storage, writer })
}

/// The `FIGURE <name> <value> <unit>` line for one figure.
pub fn figure_line(name: &str, value: impl std::fmt::Display, unit: &str) -> String {
    format!("FIGURE {name} {value} {unit}")
}

/// Prints one [`figure_line`] on stdout, after criterion's own output, so a script can collect
/// the figures without parsing criterion's report.
pub fn print_figure(name: &str, value: impl std::fmt::Display, unit: &str) {
    println!("{}", figure_line(name, value, unit));
}

/// Whether this bench runs under `cargo bench` (which passes `--bench`), where it prints its
/// FIGURE lines. `cargo test --all-targets` runs each bench once in a debug build as a smoke
/// test: there timed figures would be slow and meaningless, so they are skipped.
pub fn under_cargo_bench() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

/// The one quantile definition, shared with `annal demo`.
pub use annal_actors::figures::quantile;

#[cfg(test)]
mod tests {
    #[test]
    fn figure_line_shape() {
        assert_eq!(
            super::figure_line("profile.seal_ns", 4409, "ns"),
            "FIGURE profile.seal_ns 4409 ns"
        );
    }
}
