//! Bench `capture`: latency of the capture hook, `CaptureHandle::action_started`, per call.
//!
//! Three scenarios, each with 1 and with [`MANY_THREADS`] producer threads, on a queue of
//! `CAPTURE_QUEUE_CAPACITY_EVENTS`:
//! - `accepted`: a tight loop of [`TIGHT_CALLS`] calls per thread while a drain thread spins;
//!   a producer waits, outside the timed region, while the queue is more than
//!   [`TIGHT_HEADROOM_DIVISOR`]-th full, so the queue does not fill (the drain, which frees
//!   every event's allocations, is slower per event than the hook; the real writer much more so);
//! - `accepted_paced`: [`PACED_CALLS`] calls per thread, one every [`PACE`], with the drain
//!   thread polling on a [`DRAIN_TICK`] tick and idle in between (how agents and the Ingress
//!   actor really behave: the producer's caches are cold, nothing is woken);
//! - `full`: [`TIGHT_CALLS`] calls per thread into a full queue with no drain (every call
//!   is counted as dropped).
//!
//! Each call is timed with `Instant` around it alone (building its `Capability` and dropping its
//! token happen outside), so the figures include one pair of clock reads, printed as
//! `capture.timer_overhead.p50_ns`. `accepted*` figures are over accepted calls and `full`
//! figures over dropped ones; how many calls of an `accepted*` run were dropped is printed as
//! `<scenario>.dropped_events`. After criterion's output (means) it prints
//! `FIGURE capture.<scenario>[.8threads].{p50,p99,p99_9}_ns <n> ns`.
#![allow(missing_docs)]

use annal_bench::quantile;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use annal_bench::print_figure;
use annal_engine::capture::{
    Admission, CAPTURE_QUEUE_CAPACITY_EVENTS, CaptureControl, CaptureDrain, CaptureHandle,
    CaptureSession, capture_channel,
};
use annal_engine::clock::SystemClock;
use annal_schema::{Application, BundleId, Capability, DisplayName};
use criterion::{BatchSize, Criterion, criterion_group};

/// Timed calls per producer thread in the tight-loop scenarios.
const TIGHT_CALLS: usize = 100_000;

/// Timed calls per producer thread in the paced scenarios (at [`PACE`], ~10 s per run). The
/// single-thread p99 is the 100th slowest call: with 3,000 calls (the 30th) one noisy second of
/// the host moved it by hundreds of nanoseconds between runs.
const PACED_CALLS: usize = 10_000;

/// Interval between two calls of one paced producer.
const PACE: Duration = Duration::from_millis(1);

/// The paced drain thread's polling tick (the Ingress actor's).
const DRAIN_TICK: Duration = Duration::from_millis(1);

/// A tight producer waits (untimed) while more than capacity / this many events are queued.
const TIGHT_HEADROOM_DIVISOR: usize = 2;

/// Producer threads of the contended variants (the machine has 2 cores).
const MANY_THREADS: usize = 8;

/// Drained entries kept between two clears of the drain thread's buffer.
const DRAIN_BUFFER_ENTRIES: usize = 4 * CAPTURE_QUEUE_CAPACITY_EVENTS;

/// What keeps the queue from filling while producers run.
#[derive(Debug, Clone, Copy)]
enum DrainMode {
    /// A thread draining in a loop, spinning when the queue is empty.
    Spin,
    /// A thread draining once per tick, asleep in between.
    Tick(Duration),
    /// No drain: the queue is filled first and stays full.
    Full,
}

/// A capture channel open for capture, with one session and a realistic start's arguments.
struct Rig {
    handle: CaptureHandle,
    drain: CaptureDrain,
    control: CaptureControl,
    session: Arc<CaptureSession>,
    capability: Capability,
    application: Option<Application>,
}

impl Rig {
    fn new() -> Self {
        let (handle, drain) = capture_channel(CAPTURE_QUEUE_CAPACITY_EVENTS, Arc::new(SystemClock))
            .unwrap_or_else(|e| panic!("{e}"));
        let control = drain.control();
        control.set_accepting(true);
        let session = Arc::new(handle.session_started("bench-session"));
        let capability = Capability::new("window.frame.set").unwrap_or_else(|e| panic!("{e}"));
        let application = Application::new(
            Some(BundleId::new("org.gnome.Settings").unwrap_or_else(|e| panic!("{e}"))),
            Some(DisplayName::new("Settings").unwrap_or_else(|e| panic!("{e}"))),
        );
        Self {
            handle,
            drain,
            control,
            session,
            capability,
            application,
        }
    }

    /// Fills the queue until a start is dropped.
    fn fill(&self) {
        loop {
            let token = self
                .handle
                .action_started(self.capability.clone(), None, None);
            if token.admission() == Admission::Dropped {
                return;
            }
        }
    }
}

/// Runs `drain` until `stop`, as `mode` says; hands the drain back.
fn spawn_drain(
    mut drain: CaptureDrain,
    mode: DrainMode,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<CaptureDrain> {
    thread::spawn(move || {
        let mut out = Vec::with_capacity(DRAIN_BUFFER_ENTRIES);
        while !stop.load(Ordering::Acquire) {
            let n = drain.drain(usize::MAX, &mut out);
            // As the writer does: every drained item consumed (its strings freed) on this thread.
            for entry in out.drain(..) {
                black_box(entry);
            }
            match mode {
                DrainMode::Spin if n == 0 => std::hint::spin_loop(),
                DrainMode::Tick(tick) => thread::sleep(tick),
                DrainMode::Spin | DrainMode::Full => {}
            }
        }
        drain
    })
}

/// Latencies of one scenario, split by how each call went.
#[derive(Default)]
struct Sample {
    accepted_ns: Vec<u64>,
    dropped_ns: Vec<u64>,
}

/// How a producer spaces its calls.
#[derive(Debug, Clone, Copy)]
enum Spacing {
    /// Back to back, waiting (untimed) only while the queue is over its headroom.
    Tight,
    /// Back to back into a full queue.
    Flat,
    /// One call per interval.
    Paced(Duration),
}

/// One producer: `calls` timed starts, spaced as `spacing` says.
fn produce(rig: &RigShared, calls: usize, spacing: Spacing) -> Sample {
    let mut sample = Sample {
        accepted_ns: Vec::with_capacity(calls),
        dropped_ns: Vec::with_capacity(calls),
    };
    let begin = Instant::now();
    for call in 0..calls {
        match spacing {
            Spacing::Paced(pace) => {
                let due = begin + pace * u32::try_from(call).unwrap_or(u32::MAX);
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
            }
            Spacing::Tight => {
                let headroom = CAPTURE_QUEUE_CAPACITY_EVENTS / TIGHT_HEADROOM_DIVISOR;
                while rig.control.queued_events() > headroom {
                    thread::yield_now();
                }
            }
            Spacing::Flat => {}
        }
        let capability = rig.capability.clone();
        let application = rig.application.clone();
        let start = Instant::now();
        let token = rig
            .handle
            .action_started(capability, application, Some(&rig.session));
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        match token.admission() {
            Admission::Accepted => sample.accepted_ns.push(ns),
            Admission::Dropped => sample.dropped_ns.push(ns),
            Admission::NotAdmitted => panic!("the bench channel is open"),
        }
    }
    sample
}

/// What producer threads share of a [`Rig`].
#[derive(Clone)]
struct RigShared {
    handle: CaptureHandle,
    control: CaptureControl,
    session: Arc<CaptureSession>,
    capability: Capability,
    application: Option<Application>,
}

/// Runs one scenario on a fresh channel with `threads` producers.
fn run(threads: usize, calls: usize, spacing: Spacing, mode: DrainMode) -> Sample {
    let rig = Rig::new();
    let shared = RigShared {
        handle: rig.handle.clone(),
        control: rig.control.clone(),
        session: Arc::clone(&rig.session),
        capability: rig.capability.clone(),
        application: rig.application.clone(),
    };
    if let DrainMode::Full = mode {
        rig.fill();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let drainer = match mode {
        DrainMode::Full => None,
        DrainMode::Spin | DrainMode::Tick(_) => Some(spawn_drain(rig.drain, mode, stop.clone())),
    };
    let producers: Vec<_> = (0..threads)
        .map(|_| {
            let shared = shared.clone();
            thread::spawn(move || produce(&shared, calls, spacing))
        })
        .collect();
    let mut all = Sample::default();
    for producer in producers {
        let sample = producer.join().unwrap_or_else(|_| panic!("producer"));
        all.accepted_ns.extend(sample.accepted_ns);
        all.dropped_ns.extend(sample.dropped_ns);
    }
    stop.store(true, Ordering::Release);
    if let Some(drainer) = drainer {
        drainer.join().unwrap_or_else(|_| panic!("drain"));
    }
    drop(rig.control);
    all
}

fn print_quantiles(name: &str, mut ns: Vec<u64>) {
    ns.sort_unstable();
    print_figure(&format!("{name}.p50_ns"), quantile(&ns, 0.50), "ns");
    print_figure(&format!("{name}.p99_ns"), quantile(&ns, 0.99), "ns");
    print_figure(&format!("{name}.p99_9_ns"), quantile(&ns, 0.999), "ns");
}

/// The p50 of an empty timed region: what each figure carries from the clock reads.
fn timer_overhead_p50_ns() -> u64 {
    let mut ns: Vec<u64> = (0..TIGHT_CALLS)
        .map(|_| {
            let start = Instant::now();
            black_box(());
            u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
        })
        .collect();
    ns.sort_unstable();
    quantile(&ns, 0.5)
}

fn bench_capture(c: &mut Criterion) {
    let mut group = c.benchmark_group("capture");

    let rig = Rig::new();
    let stop = Arc::new(AtomicBool::new(false));
    let drainer = spawn_drain(rig.drain, DrainMode::Spin, stop.clone());
    group.bench_function("action_started/accepted", |b| {
        b.iter_batched(
            || (rig.capability.clone(), rig.application.clone()),
            |(capability, application)| {
                rig.handle
                    .action_started(capability, application, Some(&rig.session))
            },
            BatchSize::SmallInput,
        )
    });
    stop.store(true, Ordering::Release);
    let drain = drainer.join().unwrap_or_else(|_| panic!("drain"));

    let full = Rig::new();
    full.fill();
    group.bench_function("action_started/full", |b| {
        b.iter_batched(
            || (full.capability.clone(), full.application.clone()),
            |(capability, application)| {
                full.handle
                    .action_started(capability, application, Some(&full.session))
            },
            BatchSize::SmallInput,
        )
    });

    rig.control.set_accepting(false);
    group.bench_function("action_started/not_admitted", |b| {
        b.iter_batched(
            || (rig.capability.clone(), rig.application.clone()),
            |(capability, application)| {
                rig.handle
                    .action_started(capability, application, Some(&rig.session))
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
    drop(drain);
}

criterion_group!(benches, bench_capture);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if !annal_bench::under_cargo_bench() {
        return;
    }
    print_figure(
        "capture.timer_overhead.p50_ns",
        timer_overhead_p50_ns(),
        "ns",
    );
    let scenarios: [(&str, usize, Spacing, DrainMode); 3] = [
        (
            "capture.accepted",
            TIGHT_CALLS,
            Spacing::Tight,
            DrainMode::Spin,
        ),
        (
            "capture.accepted_paced",
            PACED_CALLS,
            Spacing::Paced(PACE),
            DrainMode::Tick(DRAIN_TICK),
        ),
        ("capture.full", TIGHT_CALLS, Spacing::Flat, DrainMode::Full),
    ];
    for (name, calls, spacing, mode) in scenarios {
        for threads in [1, MANY_THREADS] {
            let name = if threads == 1 {
                name.to_owned()
            } else {
                format!("{name}.{threads}threads")
            };
            let sample = run(threads, calls, spacing, mode);
            match mode {
                DrainMode::Full => {
                    assert!(
                        sample.accepted_ns.is_empty(),
                        "a full queue accepted a start"
                    );
                    print_quantiles(&name, sample.dropped_ns);
                }
                DrainMode::Spin | DrainMode::Tick(_) => {
                    print_figure(
                        &format!("{name}.dropped_events"),
                        sample.dropped_ns.len(),
                        "events",
                    );
                    print_quantiles(&name, sample.accepted_ns);
                }
            }
        }
    }
}
