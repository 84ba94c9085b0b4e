//! Bench `append`: durable append through the real [`Engine`] (capture hook -> Ingress -> Writer
//! with group commit) on a temporary store, and the CPU an enabled but idle engine burns.
//!
//! Scenarios, each on a fresh store (enabled, default [`EngineConfig`]):
//! - `stream`: one producer thread captures [`STREAM_EVENTS`] `action_started` events (with an
//!   `Application` and a session, as an agent does) back to back. It never overflows the queue:
//!   before each call it yields while more than [`HEADROOM_NUMERATOR`] / [`HEADROOM_DENOMINATOR`]
//!   of the queue is taken (the bench asserts `dropped_events == 0`). The clock runs from the
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
//! `stream`), `FIGURE append.with_flusher.durable_events_per_s <n> events/s`,
//! `FIGURE append.commit_latency.{p50,p99,max}_us <n> us` (over every flush of
//! [`STREAM_ROUNDS`] runs of `stream_with_flusher`), `FIGURE append.commits <n> commits` and
//! `FIGURE capture.idle_cpu_percent <x> %`.
#![allow(missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use annal_actors::{Engine, EngineConfig};
use annal_bench::{BENCH_ROOT_KEY, bench_keys, print_figure};
use annal_engine::capture::Admission;
use annal_engine::entropy::OsEntropy;
use annal_engine::keys::{InMemoryProvider, KeyProvider, Namespace};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{History, StoreReader, open_store};
use annal_schema::{
    Application, BundleId, Capability, DisplayName, Event, HealthCategory, Payload, SessionPhase,
};
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

/// The producer yields while more than capacity * this / [`HEADROOM_DENOMINATOR`] events wait.
const HEADROOM_NUMERATOR: usize = 3;

/// See [`HEADROOM_NUMERATOR`].
const HEADROOM_DENOMINATOR: usize = 4;

/// How long an idle engine runs before its CPU time is measured.
const IDLE_WARMUP: Duration = Duration::from_secs(1);

/// How long an idle engine's CPU time is measured.
const IDLE_WINDOW: Duration = Duration::from_secs(3);

/// Percent in one.
const PERCENT: f64 = 100.0;

/// Name of the store's namespace directory (and namespace) inside a bench temp dir.
const NAMESPACE: &str = "work";

/// A running, enabled engine on a fresh store in a temporary directory.
struct Rig {
    /// Keeps the store's directory alive until the rig is dropped.
    _dir: tempfile::TempDir,
    /// Where the store is (read back after shutdown).
    layout: StoreLayout,
    /// The engine.
    engine: Engine,
    /// Capacity of the engine's capture queue, in events.
    capacity_events: usize,
}

impl Rig {
    /// Starts an engine with the default configuration on a fresh store whose root key is
    /// [`BENCH_ROOT_KEY`] (so the bench can read the history back), and enables it.
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let layout = StoreLayout::in_namespace_dir(&dir.path().join(NAMESPACE));
        let namespace = Namespace::new(NAMESPACE).unwrap_or_else(|e| panic!("{e}"));
        let provider = InMemoryProvider::new(Box::new(OsEntropy)).unwrap_or_else(|e| panic!("{e}"));
        provider
            .put_raw(&namespace, &namespace.primary_reference(), &BENCH_ROOT_KEY)
            .unwrap_or_else(|e| panic!("{e}"));
        let config = EngineConfig::new(layout.clone(), namespace);
        let capacity_events = config.capture_capacity_events;
        let keys: Arc<dyn KeyProvider> = Arc::new(provider);
        let engine = Engine::start(config, keys).unwrap_or_else(|e| panic!("start: {e}"));
        engine.enable().unwrap_or_else(|e| panic!("enable: {e}"));
        Self {
            _dir: dir,
            layout,
            engine,
            capacity_events,
        }
    }

    /// Shuts the engine down (drained), asserts nothing was dropped, reads the history back and
    /// checks it holds exactly `events` action starts (see [`check_history`]).
    fn finish(self, events: usize) {
        let status = self
            .engine
            .status()
            .unwrap_or_else(|e| panic!("status: {e}"));
        assert_eq!(
            status.dropped_events, 0,
            "the producer overflowed the queue"
        );
        assert_eq!(status.health, HealthCategory::Ready, "{status:?}");
        let report = self.engine.shutdown();
        assert!(report.drained, "shutdown did not drain: {report:?}");
        check_history(&self.layout, events);
    }
}

/// Reads every history event of the store at `layout` and asserts: no corruption, exactly
/// `events` action starts and one session start, no drop marker, sequences strictly increasing.
fn check_history(layout: &StoreLayout, events: usize) {
    let storage: Arc<dyn Storage> =
        Arc::new(open_store(layout, Access::Read).unwrap_or_else(|e| panic!("open: {e}")));
    let report = StoreReader::<History>::new(storage)
        .read(&bench_keys())
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert!(!report.has_corruption(), "{report:#?}");
    let read: Vec<&Event> = report.records().map(|r| &r.event).collect();
    let starts = read
        .iter()
        .filter(|e| matches!(e.data.payload, Payload::ActionStarted))
        .count();
    assert_eq!(starts, events, "action starts read back");
    let sessions = read
        .iter()
        .filter(|e| {
            matches!(
                e.data.payload,
                Payload::Session {
                    phase: SessionPhase::Started
                }
            )
        })
        .count();
    assert_eq!(sessions, 1, "session starts read back");
    assert!(
        !read.iter().any(|e| matches!(
            e.data.payload,
            Payload::Health {
                category: HealthCategory::EventsDropped,
                ..
            }
        )),
        "a drop marker was written"
    );
    assert!(
        read.windows(2)
            .all(|w| w[0].data.sequence.get() < w[1].data.sequence.get()),
        "sequences not strictly increasing"
    );
}

/// What one stream measured.
struct Stream {
    /// First capture to the return of the flush after the last.
    elapsed: Duration,
    /// Round trips of the flusher thread's flushes (empty without one), in microseconds.
    commit_us: Vec<u64>,
}

impl Stream {
    /// Durable events per second of this stream.
    fn events_per_s(&self, events: usize) -> f64 {
        events as f64 / self.elapsed.as_secs_f64()
    }
}

/// One producer captures `events` action starts into `engine` as fast as the queue's headroom
/// allows, then flushes; with `flusher`, a second thread flushes back to back meanwhile.
fn stream(engine: &Engine, capacity_events: usize, events: usize, flusher: bool) -> Stream {
    let capture = engine.capture();
    let capability = Capability::new("window.frame.set").unwrap_or_else(|e| panic!("{e}"));
    let application = Application::new(
        Some(BundleId::new("org.gnome.Settings").unwrap_or_else(|e| panic!("{e}"))),
        Some(DisplayName::new("Settings").unwrap_or_else(|e| panic!("{e}"))),
    );
    let headroom = capacity_events * HEADROOM_NUMERATOR / HEADROOM_DENOMINATOR;
    let session = capture.session_started("bench-agent-session");
    assert_eq!(session.started(), Admission::Accepted);
    let done = AtomicBool::new(false);
    let (elapsed, commit_us) = thread::scope(|scope| {
        let flushes = flusher.then(|| {
            scope.spawn(|| {
                let mut commit_us = Vec::new();
                while !done.load(Ordering::Acquire) {
                    let start = Instant::now();
                    engine.flush().unwrap_or_else(|e| panic!("flush: {e}"));
                    commit_us.push(u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX));
                }
                commit_us
            })
        });
        let start = Instant::now();
        for _ in 0..events {
            while engine.queued_events() > headroom {
                thread::yield_now();
            }
            let token =
                capture.action_started(capability.clone(), application.clone(), Some(&session));
            assert_eq!(token.admission(), Admission::Accepted);
            drop(token);
        }
        engine.flush().unwrap_or_else(|e| panic!("flush: {e}"));
        let elapsed = start.elapsed();
        done.store(true, Ordering::Release);
        let commit_us = flushes
            .map(|f| f.join().unwrap_or_else(|_| panic!("flusher")))
            .unwrap_or_default();
        (elapsed, commit_us)
    });
    // Ended after the measurement (its event is drained by the shutdown).
    capture.session_ended(session);
    Stream { elapsed, commit_us }
}

/// Starts a rig, runs one stream of `events` on it, checks the history.
fn run(events: usize, flusher: bool) -> Stream {
    let rig = Rig::start();
    let measured = stream(&rig.engine, rig.capacity_events, events, flusher);
    rig.finish(events);
    measured
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
    let rig = Rig::start();
    thread::sleep(IDLE_WARMUP);
    let cpu_before = process_cpu_time();
    let wall_before = Instant::now();
    thread::sleep(IDLE_WINDOW);
    let cpu = process_cpu_time().saturating_sub(cpu_before);
    let wall = wall_before.elapsed();
    rig.finish(0);
    PERCENT * cpu.as_secs_f64() / wall.as_secs_f64()
}

/// The `q` quantile (0..=1) of `sorted`, nearest rank.
fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.clamp(1, sorted.len()) - 1)
        .copied()
        .unwrap_or(0)
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
                .map(|_| run(CRITERION_EVENTS, false).elapsed)
                .sum()
        })
    });
    group.finish();
}

criterion_group!(benches, bench_append);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not, and there (a debug
    // build, each bench run once as a smoke test) timed figures would be slow and meaningless.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let rates: Vec<f64> = (0..STREAM_ROUNDS)
        .map(|_| run(STREAM_EVENTS, false).events_per_s(STREAM_EVENTS))
        .collect();
    print_figure(
        "append.durable_events_per_s",
        format!("{:.0}", median(rates)),
        "events/s",
    );
    let mut rates = Vec::with_capacity(STREAM_ROUNDS);
    let mut commit_us = Vec::new();
    for _ in 0..STREAM_ROUNDS {
        let measured = run(STREAM_EVENTS, true);
        rates.push(measured.events_per_s(STREAM_EVENTS));
        commit_us.extend(measured.commit_us);
    }
    commit_us.sort_unstable();
    print_figure(
        "append.with_flusher.durable_events_per_s",
        format!("{:.0}", median(rates)),
        "events/s",
    );
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
}
