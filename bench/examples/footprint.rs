//! What an engine embedded in an agent runtime costs in memory, in a process of its own
//! (issue 30, item 3): nothing else (no criterion, no other bench) shares its resident set.
//!
//! `cargo run --release -p annal-bench --example footprint` prints:
//! - `engine.process_rss_bytes`: this process before the engine starts (the baseline);
//! - `engine.start_ms`: `Engine::start` and `enable` until the engine answers;
//! - `engine.idle_rss_bytes`: the process with the engine enabled and idle for
//!   [`IDLE_SETTLE`];
//! - `engine.rss_after_1m_events`: after [`EVENTS`] events were captured (half a million
//!   actions over 20 sessions) and made durable, with the engine's caches at their bounds;
//! - `engine.peak_rss_bytes`: the process's high-water mark (`VmHWM`) by then.
//!
//! The bounds it holds (it exits 1 when one is passed): [`IDLE_RSS_MAX_BYTES`] and
//! [`RSS_AFTER_EVENTS_MAX_BYTES`] (docs/benchmarks.md says why these).
#![allow(missing_docs)]

use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use annal_bench::engine::RigError;
use annal_bench::print_figure;
use annal_bench::query::{Producer, start_engine};
use annal_engine::journal::OnQuota;

/// Events captured for the loaded figure.
const EVENTS: usize = 1_000_000;

/// How long the engine is left alone before the idle figure.
const IDLE_SETTLE: Duration = Duration::from_secs(3);

/// The quota for the run (the default 100 MiB would stop capture before a million events).
const QUOTA_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// Most events waiting in the capture queue before the producer yields.
const QUEUE_HEADROOM_EVENTS: usize = 256;

/// The bound on an idle enabled engine's process, in bytes: the runtime, the actor tree, the
/// keys and an empty index (7 MB measured; docs/benchmarks.md).
const IDLE_RSS_MAX_BYTES: u64 = 32 * 1024 * 1024;

/// The bound after a million events, in bytes: the in-memory index grows with the events the
/// store holds (about 120 bytes each, measured); the hot and read caches stop at their own
/// bounds (128 MB measured; docs/benchmarks.md).
const RSS_AFTER_EVENTS_MAX_BYTES: u64 = 256 * 1024 * 1024;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("footprint: {error}");
            ExitCode::FAILURE
        }
    }
}

/// A `/proc/self/status` field, in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with(field))
                .and_then(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1_024)
}

fn run() -> Result<bool, RigError> {
    let dir = tempfile::tempdir()?;
    print_figure("engine.process_rss_bytes", status_bytes("VmRSS:"), "bytes");
    let started = Instant::now();
    let engine = start_engine(dir.path())?;
    engine.enable()?;
    engine.status()?;
    print_figure(
        "engine.start_ms",
        format!("{:.1}", started.elapsed().as_secs_f64() * 1_000.0),
        "ms",
    );
    thread::sleep(IDLE_SETTLE);
    let idle = status_bytes("VmRSS:");
    print_figure("engine.idle_rss_bytes", idle, "bytes");

    engine
        .set_quota(QUOTA_BYTES, OnQuota::StopCapture)
        .map_err(|e| format!("quota: {e:?}"))?;
    let mut producer = Producer::new(&engine)?;
    let mut actions = 0;
    while actions * 2 < EVENTS {
        while engine.queued_events() > QUEUE_HEADROOM_EVENTS {
            thread::sleep(Duration::from_micros(50));
        }
        if !producer.action() {
            return Err("an action start was not accepted".into());
        }
        actions += 1;
    }
    producer.finish();
    engine.flush()?;
    let status = engine.status()?;
    if status.dropped_events != 0 {
        return Err(format!("{} events dropped", status.dropped_events).into());
    }
    let loaded = status_bytes("VmRSS:");
    print_figure("engine.rss_after_1m_events", loaded, "bytes");
    print_figure("engine.peak_rss_bytes", status_bytes("VmHWM:"), "bytes");
    engine.shutdown();
    let mut held = true;
    for (what, value, bound) in [
        ("idle", idle, IDLE_RSS_MAX_BYTES),
        ("after a million events", loaded, RSS_AFTER_EVENTS_MAX_BYTES),
    ] {
        if value > bound {
            eprintln!("footprint: {what}: {value} bytes, over the bound of {bound}");
            held = false;
        }
    }
    Ok(held)
}
