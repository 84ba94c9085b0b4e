//! Bench `append`: durable append through the real `Engine` (capture hook -> Ingress -> Writer
//! with group commit) on a temporary store, and the CPU an enabled but idle engine burns.
//!
//! Scenarios, each on a fresh store (enabled, default `EngineConfig`; `annal_bench::engine`):
//! - `stream`: one producer thread captures [`STREAM_EVENTS`] `action_started` events (with an
//!   `Application` and a session, as an agent does) back to back. It never overflows the queue:
//!   before each call it yields while more than 3/4 of the queue is taken (the bench asserts `dropped_events == 0`). The clock runs from the
//!   first capture to the return of the `Engine::flush` that follows the last, so every event
//!   is durable when it stops. Durability comes from the engine's own group commit (a sync every
//!   `SYNC_INTERVAL_MS`) and that one final flush.
//! - `stream_with_flusher`: the same stream while a second thread calls `Engine::flush` back to
//!   back (each one drains the queue into the writer and syncs: one commit) and times each round
//!   trip: the commit latency under continuous load.
//! - `idle`: an engine enabled and left alone (no capture) for [`IDLE_WINDOW`] after
//!   [`IDLE_WARMUP`]: the process's CPU time (`CLOCK_PROCESS_CPUTIME_ID`, every thread's user +
//!   system time) over the wall time, in percent of one core.
//!
//! Each stream is read back after shutdown: exactly the captured events, one session start, no
//! drop marker, sequences strictly increasing.
//!
//! criterion (`append/stream_10000_events`) times a [`CRITERION_EVENTS`]-event stream, engine
//! start and shutdown outside the timing. After criterion's output, under `cargo bench` only, it
//! prints `FIGURE append.durable_events_per_s <n> events/s` (median of [`STREAM_ROUNDS`] runs of
//! `stream`), `FIGURE append.final_flush_ms <x> ms` (last capture to durable),
//! `FIGURE append.with_flusher.{durable_events_per_s,final_flush_ms}`,
//! `FIGURE append.commit_latency.{p50,p99,max}_us <n> us` (over every flush of
//! [`STREAM_ROUNDS`] runs of `stream_with_flusher`), `FIGURE append.commits <n> commits` and
//! `FIGURE capture.idle_cpu_percent <x> %`.
//!
//! And an engine left idle the way a long-running agent runtime leaves it (enabled, nothing
//! captured, called or flushed) for [`ENGINE_IDLE_WINDOW`], once the drain tick has backed off
//! (`DRAIN_IDLE_TICK_MAX_MS`): `FIGURE engine.idle_cpu_percent`, `engine.idle_wakeups_per_s`
//! (every thread's context switches, voluntary and not, from `/proc/self/task/*/status`: each
//! is a wake-up), `engine.start_ms` (`Engine::start` and `enable` to ready) and
//! `engine.idle_rss_bytes` (`VmRSS`).
#![allow(missing_docs)]

use annal_bench::quantile;
use std::thread;
use std::time::{Duration, Instant};

use annal_bench::engine::{EngineRig, Stream, run_stream};
use annal_bench::print_figure;
use criterion::{Criterion, Throughput, criterion_group};
use rustix::time::{ClockId, clock_gettime};

/// Events one `stream` or `stream_with_flusher` run captures for the FIGURE lines.
const STREAM_EVENTS: usize = 100_000;

/// Events of the criterion bench's stream (short enough for the debug smoke run of
/// `cargo test --all-targets`).
const CRITERION_EVENTS: usize = 10_000;

/// Criterion samples of the stream bench (each sample runs whole streams).
const CRITERION_SAMPLE_SIZE: usize = 10;

/// Runs of each stream scenario for the FIGURE lines.
const STREAM_ROUNDS: usize = 3;

/// How long an idle engine runs before its CPU time is measured.
const IDLE_WARMUP: Duration = Duration::from_secs(1);

/// How long an idle engine's CPU time is measured.
const IDLE_WINDOW: Duration = Duration::from_secs(3);

/// Percent in one.
const PERCENT: f64 = 100.0;

/// One checked stream (a failure is a bench failure).
fn run(events: usize, flusher: bool) -> Stream {
    run_stream(events, flusher).unwrap_or_else(|e| panic!("stream: {e}"))
}

/// The process's CPU time so far, all threads, user + system.
fn process_cpu_time() -> Duration {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// CPU of an enabled, idle engine over [`IDLE_WINDOW`], in percent of one core.
fn idle_cpu_percent() -> f64 {
    let rig = EngineRig::start().unwrap_or_else(|e| panic!("start: {e}"));
    thread::sleep(IDLE_WARMUP);
    let cpu_before = process_cpu_time();
    let wall_before = Instant::now();
    thread::sleep(IDLE_WINDOW);
    let cpu = process_cpu_time().saturating_sub(cpu_before);
    let wall = wall_before.elapsed();
    rig.finish(0, 0).unwrap_or_else(|e| panic!("idle: {e}"));
    PERCENT * cpu.as_secs_f64() / wall.as_secs_f64()
}

/// How long the engine idle figures watch an idle engine.
const ENGINE_IDLE_WINDOW: Duration = Duration::from_secs(60);

/// How long an idle engine is left before the engine idle figures start: past the drain
/// tick's back-off to its ceiling (`DRAIN_IDLE_TICK_MAX_MS`, reached in about 2 s).
const ENGINE_IDLE_SETTLE: Duration = Duration::from_secs(5);

/// Context switches of every thread of this process so far (each is a wake-up).
fn context_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|line| line.contains("ctxt_switches:"))
                .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// This process's resident set, in bytes.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1_024)
}

/// The engine idle figures (module doc).
fn print_engine_idle_figures() {
    let started = Instant::now();
    let rig = EngineRig::start().unwrap_or_else(|e| panic!("start: {e}"));
    let start_ms = started.elapsed().as_secs_f64() * 1_000.0;
    thread::sleep(ENGINE_IDLE_SETTLE);
    let cpu_before = process_cpu_time();
    let switches_before = context_switches();
    let wall_before = Instant::now();
    thread::sleep(ENGINE_IDLE_WINDOW);
    let cpu = process_cpu_time().saturating_sub(cpu_before);
    // This thread's own wake-up at the end of its sleep is not the engine's.
    let switches = context_switches()
        .saturating_sub(switches_before)
        .saturating_sub(1);
    let wall = wall_before.elapsed().as_secs_f64();
    let rss = rss_bytes();
    rig.finish(0, 0).unwrap_or_else(|e| panic!("idle: {e}"));
    print_figure(
        "engine.idle_cpu_percent",
        format!("{:.3}", PERCENT * cpu.as_secs_f64() / wall),
        "%",
    );
    print_figure(
        "engine.idle_wakeups_per_s",
        format!("{:.2}", switches as f64 / wall),
        "wakeups/s",
    );
    print_figure("engine.start_ms", format!("{start_ms:.1}"), "ms");
    print_figure("engine.idle_rss_bytes", rss, "bytes");
}

/// The median of `values` (upper median for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn bench_append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    group.sample_size(CRITERION_SAMPLE_SIZE);
    group.throughput(Throughput::Elements(CRITERION_EVENTS as u64));
    group.bench_function(format!("stream_{CRITERION_EVENTS}_events"), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| run(CRITERION_EVENTS, false).durable)
                .sum()
        })
    });
    group.finish();
}

criterion_group!(benches, bench_append);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if !annal_bench::under_cargo_bench() {
        return;
    }
    let streams: Vec<Stream> = (0..STREAM_ROUNDS)
        .map(|_| run(STREAM_EVENTS, false))
        .collect();
    print_stream_figures("append", &streams);
    let streams: Vec<Stream> = (0..STREAM_ROUNDS)
        .map(|_| run(STREAM_EVENTS, true))
        .collect();
    print_stream_figures("append.with_flusher", &streams);
    let mut commit_us: Vec<u64> = streams
        .iter()
        .flat_map(|s| s.commits.iter())
        .map(|c| u64::try_from(c.took.as_micros()).unwrap_or(u64::MAX))
        .collect();
    commit_us.sort_unstable();
    print_figure("append.commits", commit_us.len(), "commits");
    print_figure(
        "append.commit_latency.p50_us",
        quantile(&commit_us, 0.50),
        "us",
    );
    print_figure(
        "append.commit_latency.p99_us",
        quantile(&commit_us, 0.99),
        "us",
    );
    print_figure(
        "append.commit_latency.max_us",
        commit_us.last().copied().unwrap_or(0),
        "us",
    );
    print_figure(
        "capture.idle_cpu_percent",
        format!("{:.2}", idle_cpu_percent()),
        "%",
    );
    print_engine_idle_figures();
}

/// `<prefix>.durable_events_per_s` (median of `streams`) and `<prefix>.final_flush_ms`: the
/// median time from the last capture to the return of the flush after it (what was still in
/// flight when the producer stopped).
fn print_stream_figures(prefix: &str, streams: &[Stream]) {
    print_figure(
        &format!("{prefix}.durable_events_per_s"),
        format!(
            "{:.0}",
            median(streams.iter().map(Stream::events_per_s).collect())
        ),
        "events/s",
    );
    print_figure(
        &format!("{prefix}.final_flush_ms"),
        format!(
            "{:.1}",
            median(
                streams
                    .iter()
                    .map(|s| (s.durable - s.captured).as_secs_f64() * 1_000.0)
                    .collect()
            )
        ),
        "ms",
    );
}
