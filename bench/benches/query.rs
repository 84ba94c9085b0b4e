//! Bench `query`: `history_query` pages on stores filled through the real `Engine`
//! (`annal_bench::query`: action pairs over 20 sessions, seals and index files as the engine
//! writes them), and the open of a full store by a fresh process.
//!
//! The reader is the engine's `QueryService` (what the Query actor answers every page with,
//! after the gate let it), opened read-only on the store: the planner over the lazily loaded
//! index, the hot cache, reads by location, events returned parsed. Per store (10,000 events,
//! 100,000 events, full at 100 MiB) and per query (newest 50; newest 10 of one session of 20;
//! a since/until slice of 50 in the middle):
//! - `query.<store>.<query>.{p50,p99}_us`: with the hot cache (after one page warmed it: the
//!   state of a running engine, whose writer hands it every event it appends);
//! - `query.<store>.<query>_cold.{p50,p99}_us`: with no cache at all: every returned event is
//!   read from its chunk, authenticated and parsed.
//!
//! On the full store only:
//! - `open.100mib.first_answer_ms`: a fresh process (this bench re-executed) opens the store
//!   read-only and answers newest-50, from its `main` to the answer (median of
//!   [`OPEN_RUNS`]; `open.100mib.first_answer_max_ms` the slowest), and
//!   `open.100mib.process_ms` from spawn to exit as the parent sees it;
//!   `open.100mib.engine_first_answer_ms`: the same through a whole `Engine` (start, the gate
//!   and its durable audit record, the Query actor).
//! - `query.100mib.newest50_gated.{p50,p99}_us`: newest-50 through `Engine::query` (the gate
//!   makes its pre-execution audit record durable, one `fdatasync`, before the read runs).
//! - `query.100mib.newest50_under_writer.{p50,p99}_us` (and `_cold`): the reader while an
//!   engine on the same store captures [`UNDER_WRITER_ACTIONS_PER_MS`] actions per millisecond
//!   and group-commits them (its quota raised so it keeps writing).
//!
//! criterion (`query/newest50_10000_events`) times hot newest-50 pages on a 10,000-event store
//! (also run once, in debug, by `cargo test --all-targets`).
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use annal_bench::engine::RigError;
use annal_bench::query::{
    BenchQuery, FULL_STORE_BYTES, FULL_STORE_HEADROOM_BYTES, Producer, fill_store, middle_slice,
    newest_sequence, open_reader, start_engine, time_pages,
};
use annal_bench::{print_figure, quantile};
use annal_engine::journal::OnQuota;
use annal_engine::query::{QueryService, RetentionCutoff};
use annal_schema::AccessOperation;
use criterion::{Criterion, criterion_group};

/// Pages timed per figure.
const ROUNDS: usize = 2_000;

/// Pages timed through the gate (each one syncs the journal).
const GATED_ROUNDS: usize = 300;

/// Fresh processes started for the open figures.
const OPEN_RUNS: usize = 11;

/// The under-writer engine's capture rate, in actions (two events each) per millisecond.
const UNDER_WRITER_ACTIONS_PER_MS: usize = 5;

/// The quota the under-writer engine gets, so it keeps writing past the full store.
const UNDER_WRITER_QUOTA_BYTES: u64 = 1024 * 1024 * 1024;

/// Events of the criterion bench's store.
const CRITERION_STORE_EVENTS: usize = 10_000;

/// Environment variable that makes this binary a child of the open figures: `reader` or
/// `engine`, with the store's directory in [`CHILD_DIR_ENV`].
const CHILD_MODE_ENV: &str = "ANNAL_QUERY_BENCH_CHILD";

/// See [`CHILD_MODE_ENV`].
const CHILD_DIR_ENV: &str = "ANNAL_QUERY_BENCH_DIR";

/// The line a child prints its figure on: `OPEN_MS <ms>`.
const CHILD_LINE: &str = "OPEN_MS";

/// Nanoseconds in a microsecond.
const NANOS_PER_MICRO: u64 = 1_000;

fn must<T>(what: &str, result: Result<T, RigError>) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn bench_query(c: &mut Criterion) {
    let dir = must("tempdir", tempfile::tempdir().map_err(Into::into));
    must(
        "fill",
        fill_store(dir.path(), u64::MAX, CRITERION_STORE_EVENTS),
    );
    let mut reader = must("open", open_reader(dir.path()));
    let request = must("request", BenchQuery::Newest50.request((0, 0)));
    let mut group = c.benchmark_group("query");
    group.bench_function(format!("newest50_{CRITERION_STORE_EVENTS}_events"), |b| {
        b.iter(|| {
            reader
                .page(&request, RetentionCutoff::NONE, None)
                .unwrap_or_else(|e| panic!("query: {e:?}"))
        })
    });
    group.finish();
}

criterion_group!(benches, bench_query);

fn main() {
    if let Ok(mode) = std::env::var(CHILD_MODE_ENV) {
        child(&mode);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    if !annal_bench::under_cargo_bench() {
        return;
    }
    for (name, target_bytes, max_events) in [
        ("10k", u64::MAX, 10_000),
        ("100k", u64::MAX, 100_000),
        (
            "100mib",
            FULL_STORE_BYTES - FULL_STORE_HEADROOM_BYTES,
            usize::MAX,
        ),
    ] {
        let dir = must("tempdir", tempfile::tempdir().map_err(Into::into));
        let events = must("fill", fill_store(dir.path(), target_bytes, max_events));
        println!("store {name}: {events} events");
        let mut reader = must("open", open_reader(dir.path()));
        let slice = middle_slice(must("newest", newest_sequence(&mut reader)));
        print_page_figures(&format!("query.{name}"), &mut reader, slice, "");
        if name == "100mib" {
            print_open_figures(dir.path());
            print_gated_figures(dir.path());
            print_under_writer_figures(dir.path(), slice);
        }
    }
}

/// Hot and cold figures of every bench query on `reader`.
fn print_page_figures(prefix: &str, reader: &mut QueryService, slice: (u64, u64), suffix: &str) {
    for query in BenchQuery::ALL {
        let request = must("request", query.request(slice));
        // One page warms the cache (and loads what the index defers), as in a running engine.
        must(
            "warm",
            time_pages(reader, &request, 1, query.expected_events()),
        );
        let hot = must(
            "hot",
            time_pages(reader, &request, ROUNDS, query.expected_events()),
        );
        print_quantiles(&format!("{prefix}.{}{suffix}", query.name()), &hot);
    }
    reader.set_hot_cache_max_bytes(0);
    for query in BenchQuery::ALL {
        let request = must("request", query.request(slice));
        let cold = must(
            "cold",
            time_pages(reader, &request, ROUNDS, query.expected_events()),
        );
        print_quantiles(&format!("{prefix}.{}{suffix}_cold", query.name()), &cold);
    }
    reader.set_hot_cache_max_bytes(annal_engine::query::service::HOT_CACHE_MAX_BYTES);
}

fn print_quantiles(name: &str, sorted_ns: &[u64]) {
    for (label, q) in [("p50", 0.50), ("p99", 0.99)] {
        let us = quantile(sorted_ns, q) as f64 / NANOS_PER_MICRO as f64;
        print_figure(&format!("{name}.{label}_us"), format!("{us:.1}"), "us");
    }
}

/// The child of the open figures: opens the store and answers newest-50, printing the time
/// from its `main` to the answer.
fn child(mode: &str) {
    let start = Instant::now();
    let dir = PathBuf::from(std::env::var(CHILD_DIR_ENV).unwrap_or_default());
    let request = must("request", BenchQuery::Newest50.request((0, 0)));
    let events = match mode {
        "reader" => {
            let mut reader = must("open", open_reader(&dir));
            must("page", time_pages(&mut reader, &request, 1, 50));
            let took = start.elapsed();
            println!("{CHILD_LINE} {:.3}", took.as_secs_f64() * 1e3);
            return;
        }
        "engine" => {
            let engine = must("start", start_engine(&dir));
            let answer = engine
                .query(request, AccessOperation::LocalCli)
                .unwrap_or_else(|e| panic!("query: {e:?}"));
            let took = start.elapsed();
            println!("{CHILD_LINE} {:.3}", took.as_secs_f64() * 1e3);
            engine.shutdown();
            answer.events.len()
        }
        other => panic!("unknown child mode {other}"),
    };
    assert_eq!(events, 50);
}

/// Runs `mode` children [`OPEN_RUNS`] times: their own figures (sorted) and the parent's view.
fn open_runs(dir: &Path, mode: &str) -> (Vec<f64>, Vec<f64>) {
    let exe = must("current_exe", std::env::current_exe().map_err(Into::into));
    let mut inside = Vec::new();
    let mut outside = Vec::new();
    for _ in 0..OPEN_RUNS {
        let start = Instant::now();
        let output = must(
            "child",
            Command::new(&exe)
                .env(CHILD_MODE_ENV, mode)
                .env(CHILD_DIR_ENV, dir)
                .output()
                .map_err(Into::into),
        );
        outside.push(start.elapsed().as_secs_f64() * 1e3);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let ms = stdout
            .lines()
            .find_map(|l| l.strip_prefix(CHILD_LINE))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| {
                panic!(
                    "child {mode} printed no figure: {stdout} {}",
                    String::from_utf8_lossy(&output.stderr)
                )
            });
        inside.push(ms);
    }
    inside.sort_by(f64::total_cmp);
    outside.sort_by(f64::total_cmp);
    (inside, outside)
}

fn print_open_figures(dir: &Path) {
    let (inside, outside) = open_runs(dir, "reader");
    let median = |v: &[f64]| v.get(v.len() / 2).copied().unwrap_or(0.0);
    print_figure(
        "open.100mib.first_answer_ms",
        format!("{:.2}", median(&inside)),
        "ms",
    );
    print_figure(
        "open.100mib.first_answer_max_ms",
        format!("{:.2}", inside.last().copied().unwrap_or(0.0)),
        "ms",
    );
    print_figure(
        "open.100mib.process_ms",
        format!("{:.2}", median(&outside)),
        "ms",
    );
    let (inside, _) = open_runs(dir, "engine");
    print_figure(
        "open.100mib.engine_first_answer_ms",
        format!("{:.2}", median(&inside)),
        "ms",
    );
}

fn print_gated_figures(dir: &Path) {
    let engine = must("start", start_engine(dir));
    let request = must("request", BenchQuery::Newest50.request((0, 0)));
    let mut took = Vec::with_capacity(GATED_ROUNDS);
    for _ in 0..GATED_ROUNDS {
        let start = Instant::now();
        let answer = engine
            .query(request.clone(), AccessOperation::LocalCli)
            .unwrap_or_else(|e| panic!("gated query: {e:?}"));
        took.push(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
        assert_eq!(answer.events.len(), 50);
    }
    engine.shutdown();
    took.sort_unstable();
    print_quantiles("query.100mib.newest50_gated", &took);
}

fn print_under_writer_figures(dir: &Path, slice: (u64, u64)) {
    let mut reader = must("open", open_reader(dir));
    let engine = must("start", start_engine(dir));
    engine
        .set_quota(UNDER_WRITER_QUOTA_BYTES, OnQuota::StopCapture)
        .unwrap_or_else(|e| panic!("quota: {e:?}"));
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        let writer = scope.spawn(|| -> Result<usize, RigError> {
            let mut producer = Producer::new(&engine)?;
            let mut actions = 0;
            while !stop.load(Ordering::Acquire) {
                for _ in 0..UNDER_WRITER_ACTIONS_PER_MS {
                    if !producer.action() {
                        return Err("an action start was not accepted".into());
                    }
                    actions += 1;
                }
                thread::sleep(Duration::from_millis(1));
            }
            producer.finish();
            Ok(actions)
        });
        // Let the writer reach its steady state (group commits every few ms).
        thread::sleep(Duration::from_millis(200));
        let request = must("request", BenchQuery::Newest50.request(slice));
        must("warm", time_pages(&mut reader, &request, 1, 50));
        let hot = must("hot", time_pages(&mut reader, &request, ROUNDS, 50));
        reader.set_hot_cache_max_bytes(0);
        let cold = must("cold", time_pages(&mut reader, &request, ROUNDS, 50));
        stop.store(true, Ordering::Release);
        let actions = writer
            .join()
            .unwrap_or_else(|_| panic!("the writer thread panicked"));
        let actions = must("writer", actions);
        println!("under writer: {actions} actions captured meanwhile");
        print_quantiles("query.100mib.newest50_under_writer", &hot);
        print_quantiles("query.100mib.newest50_under_writer_cold", &cold);
    });
    let status = engine.status().unwrap_or_else(|e| panic!("status: {e:?}"));
    assert_eq!(status.dropped_events, 0, "the writer dropped events");
    engine.shutdown();
}
