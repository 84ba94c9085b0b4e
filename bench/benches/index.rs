//! Bench `index`: loading a whole store's index (`annal_engine::index::load_index`) from the
//! chunks alone and from the derived index files, on a store of [`STORE_EVENTS`] events of the
//! ~650-byte [`annal_bench::EVENT_JSON`] in default-size (4 MiB) chunks.
//!
//! criterion (`index/load_with_files`): one `load_index` with every index file present. After
//! criterion's output, under `cargo bench` only, it prints the median of [`ROUNDS`] runs of:
//! - `FIGURE index.load.scan_ms`: `load_index` on the store opened read-only with no index file
//!   (every chunk read, decrypted and parsed: what a reference store without a sidecar costs);
//! - `FIGURE index.load.writing_files_ms`: the first writable `load_index`, which scans and
//!   writes every chunk's index file (one run: it happens once per store);
//! - `FIGURE index.load.files_ms`: `load_index` with every index file present;
//! - `FIGURE index.read_file.one_chunk_us`: `read_index_file` of the newest chunk;
//! - `FIGURE index.files_bytes_per_event`: the index files' size per event.
//!
//! Under `cargo test --all-targets` (a debug smoke run) the store holds
//! [`SMOKE_STORE_EVENTS`] events and no figure is printed.
#![allow(missing_docs)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use annal_bench::{BENCH_ROOT_KEY, bench_drafts, bench_keys, create_bench_writer, print_figure};
use annal_engine::index::{IndexKey, load_index, read_index_file};
use annal_engine::keys::RootKey;
use annal_engine::profile::ChunkId;
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::open_store;
use criterion::{Criterion, criterion_group};

/// Events in the measured store.
const STORE_EVENTS: usize = 100_000;

/// Events in the store of the debug smoke run.
const SMOKE_STORE_EVENTS: usize = 2_000;

/// Events per append while the store is filled.
const FILL_BATCH_EVENTS: usize = 1_000;

/// Runs per FIGURE (the median is printed).
const ROUNDS: usize = 5;

/// The store's namespace directory name inside the temporary directory.
const NAMESPACE: &str = "bench";

fn index_key() -> IndexKey {
    IndexKey::new(&RootKey::from_bytes(BENCH_ROOT_KEY).index_key())
}

fn open(layout: &StoreLayout, access: Access) -> Arc<dyn Storage> {
    Arc::new(open_store(layout, access).unwrap_or_else(|e| panic!("open store: {e}")))
}

/// A fresh store of `events` events, synced, its writer closed.
fn filled_store(events: usize) -> (tempfile::TempDir, StoreLayout) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let namespace = dir.path().join(NAMESPACE);
    let mut bench = create_bench_writer(&namespace).unwrap_or_else(|e| panic!("create store: {e}"));
    let mut written = 0;
    while written < events {
        let batch = FILL_BATCH_EVENTS.min(events - written);
        bench
            .writer
            .append(bench_drafts(batch))
            .unwrap_or_else(|e| panic!("append: {e}"));
        written += batch;
    }
    bench.writer.sync().unwrap_or_else(|e| panic!("sync: {e}"));
    (dir, StoreLayout::in_namespace_dir(&namespace))
}

/// The store's chunks with their lengths, oldest id first.
fn chunks(layout: &StoreLayout) -> Vec<(ChunkId, u64)> {
    let dir = layout.history_root().join("chunks");
    let mut chunks: Vec<(ChunkId, u64)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("list chunks: {e}"))
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name().into_string().ok()?;
            let id = ChunkId::from_hex(name.strip_suffix(".cborseq")?)?;
            Some((id, entry.metadata().ok()?.len()))
        })
        .collect();
    chunks.sort_by_key(|(id, _)| id.0);
    chunks
}

/// Total size of the files in `dir`, in bytes.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// One `load_index`, checked to hold `events` entries; returns its duration.
fn timed_load(storage: &Arc<dyn Storage>, events: usize) -> Duration {
    let start = Instant::now();
    let (index, _) = load_index(storage, &bench_keys(), &index_key())
        .unwrap_or_else(|e| panic!("load_index: {e}"));
    let took = start.elapsed();
    assert_eq!(index.len(), events, "the index holds every event");
    took
}

/// The median of `runs` runs of `f`, in milliseconds.
fn median_ms(runs: usize, mut f: impl FnMut() -> Duration) -> f64 {
    let mut times: Vec<f64> = (0..runs).map(|_| f().as_secs_f64() * 1e3).collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn bench_index(c: &mut Criterion) {
    let events = if annal_bench::under_cargo_bench() {
        STORE_EVENTS
    } else {
        SMOKE_STORE_EVENTS
    };
    let (_dir, layout) = filled_store(events);
    let storage = open(&layout, Access::Write);
    // The first writable load writes every index file.
    timed_load(&storage, events);
    let mut group = c.benchmark_group("index");
    group.sample_size(10);
    group.bench_function("load_with_files", |b| {
        b.iter(|| timed_load(&storage, events))
    });
    group.finish();
}

criterion_group!(benches, bench_index);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if !annal_bench::under_cargo_bench() {
        return;
    }
    let (_dir, layout) = filled_store(STORE_EVENTS);
    let scan = {
        let read = open(&layout, Access::Read);
        median_ms(ROUNDS, || timed_load(&read, STORE_EVENTS))
    };
    let storage = open(&layout, Access::Write);
    let writing = timed_load(&storage, STORE_EVENTS).as_secs_f64() * 1e3;
    let with_files = median_ms(ROUNDS, || timed_load(&storage, STORE_EVENTS));
    let (newest, newest_len) = *chunks(&layout)
        .last()
        .unwrap_or_else(|| panic!("the store has chunks"));
    let one_chunk_us = 1e3
        * median_ms(ROUNDS, || {
            let start = Instant::now();
            read_index_file(storage.as_ref(), &index_key(), newest, newest_len)
                .unwrap_or_else(|e| panic!("read_index_file: {e}"));
            start.elapsed()
        });
    let index_dir = layout
        .sidecar()
        .unwrap_or_else(|| panic!("an annal store has a sidecar"))
        .join("index");
    print_figure("index.load.scan_ms", format!("{scan:.1}"), "ms");
    print_figure("index.load.writing_files_ms", format!("{writing:.1}"), "ms");
    print_figure("index.load.files_ms", format!("{with_files:.2}"), "ms");
    print_figure(
        "index.read_file.one_chunk_us",
        format!("{one_chunk_us:.0}"),
        "us",
    );
    print_figure(
        "index.files_bytes_per_event",
        dir_bytes(&index_dir) / STORE_EVENTS as u64,
        "bytes",
    );
}
