//! What annal tells an operator about how it is doing, never about what an agent did: spans
//! named by action and phase, and metrics, both from closed sets defined here and nowhere else
//! (`docs/observability.md` lists them).
//!
//! # Spans
//!
//! Made with `tracing`; nothing is recorded unless the embedder (or `annal serve`) installs a
//! subscriber, and a span nobody subscribes to costs a cached check. Every span is built by one
//! function of [`span`], so its name and its fields are fixed here: a span can carry only an
//! [`Attribute`] of the closed list (operation, decision and refusal code, health category,
//! supervised child, counts of events, commits and chunks). No function here takes event
//! content, a session label or id, an application or capability name, an argument value, a
//! cursor, a path or an actor name, so no span can hold one. The capture hook has no span; a
//! writer batch has one.
//!
//! # Metrics
//!
//! Made with the OpenTelemetry metrics API from the [`Meter`] an [`EngineConfig`] carries
//! ([`Telemetry::from_global`] by default: the process's global `MeterProvider`, a no-op until
//! an embedder or `annal serve --metrics-listen` installs one). Counters and histograms are
//! recorded where the thing happens, at most once per batch or tool call (capture is counted
//! by the ingress per drained batch, never by the hook); the gauges (queue depth, bytes,
//! health) are observed at collection from readings the engine keeps current ([`Readings`]):
//! the ingress after each drain, the supervisor whenever it answers a status.
//! Their attributes come from [`Attribute`] too.
//!
//! [`EngineConfig`]: crate::EngineConfig

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use annal_engine::health::Child;
use annal_schema::HealthCategory;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, ObservableGauge};

/// The instrumentation scope annal's metrics carry (`otel_scope_name` in Prometheus).
pub const METER_NAME: &str = "annal";

/// Bucket bounds of the latency histograms, in seconds: 100 µs to 10 s.
pub const LATENCY_BUCKETS_SECS: [f64; 14] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0,
];

/// The closed list of attribute keys a span or a metric may carry, each with its one type.
/// A key that is not here cannot be written: [`span`] and [`Telemetry`] are the only writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attribute {
    /// `annal.operation`: a daemon request's op or a tool's operation (`status`, `query`), from
    /// annal's closed lists.
    Operation,
    /// `annal.decision`: `allowed` or `refused`.
    Decision,
    /// `annal.refusal`: a refusal's fixed code.
    Refusal,
    /// `annal.health`: a fixed health category.
    Health,
    /// `annal.child`: a supervised child's fixed name.
    Child,
    /// `annal.events`: a count of events.
    Events,
    /// `annal.commits`: how many journal commits shared one sync.
    Commits,
    /// `annal.chunks`: a count of chunks.
    Chunks,
}

impl Attribute {
    /// Every key, in the order above.
    pub const ALL: [Attribute; 8] = [
        Self::Operation,
        Self::Decision,
        Self::Refusal,
        Self::Health,
        Self::Child,
        Self::Events,
        Self::Commits,
        Self::Chunks,
    ];

    /// The key as exported.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Operation => "annal.operation",
            Self::Decision => "annal.decision",
            Self::Refusal => "annal.refusal",
            Self::Health => "annal.health",
            Self::Child => "annal.child",
            Self::Events => "annal.events",
            Self::Commits => "annal.commits",
            Self::Chunks => "annal.chunks",
        }
    }
}

/// The spans, one function each. Names are stable: dashboards and tests depend on them.
pub mod span {
    use tracing::Span;
    use tracing::field::Empty;

    /// `annal.daemon.request`: one request on the daemon's socket; `op` is the request's op
    /// from the protocol's closed list.
    pub fn daemon_request(op: &'static str) -> Span {
        tracing::info_span!(target: "annal", "annal.daemon.request", annal.operation = op)
    }

    /// `annal.mcp.call`: one MCP `tools/call` in `annal mcp`; `operation` is `status` or
    /// `query` (never the tool's arguments). Its decision is recorded when the answer comes.
    pub fn mcp_call(operation: &'static str) -> Span {
        tracing::info_span!(
            target: "annal",
            "annal.mcp.call",
            annal.operation = operation,
            annal.decision = Empty,
            annal.refusal = Empty,
        )
    }

    /// `annal.gate.call`: a tool call the policy gate owns end to end (decide, audit, read).
    pub fn gate_call(operation: &'static str) -> Span {
        tracing::info_span!(
            target: "annal",
            "annal.gate.call",
            annal.operation = operation,
            annal.decision = Empty,
            annal.refusal = Empty,
            annal.events = Empty,
        )
    }

    /// `annal.query.read`: the read of one page; `events` is recorded when it answered.
    pub fn query_read() -> Span {
        tracing::info_span!(target: "annal", "annal.query.read", annal.events = Empty)
    }

    /// `annal.journal.commit`: one group commit of the journal: `commits` commits (a tool
    /// call's pre-execution record, a policy change) made durable by one sync.
    pub fn journal_commit(commits: usize) -> Span {
        tracing::info_span!(target: "annal", "annal.journal.commit", annal.commits = commits)
    }

    /// `annal.writer.commit`: one batch appended to the history (`events` events).
    pub fn writer_commit(events: usize) -> Span {
        tracing::info_span!(target: "annal", "annal.writer.commit", annal.events = events)
    }

    /// `annal.writer.sync`: the history's group-commit `fdatasync`.
    pub fn writer_sync() -> Span {
        tracing::info_span!(target: "annal", "annal.writer.sync")
    }

    /// `annal.seal`: sealing `chunks` closed chunks into the seal chain.
    pub fn seal(chunks: usize) -> Span {
        tracing::info_span!(target: "annal", "annal.seal", annal.chunks = chunks)
    }

    /// Records a gated call's decision on `span`: `allowed`, or `refused` with its fixed code.
    pub fn record_decision(span: &Span, refusal: Option<&'static str>) {
        match refusal {
            None => {
                span.record("annal.decision", "allowed");
            }
            Some(code) => {
                span.record("annal.decision", "refused");
                span.record("annal.refusal", code);
            }
        }
    }
}

/// The gauges' readings, kept current by the engine and observed at collection.
#[derive(Debug, Default)]
pub struct Readings {
    /// Captured events waiting for the ingress.
    queue_depth: AtomicU64,
    /// The contract's `bytes_used`.
    bytes_used: AtomicU64,
    /// The quota, in bytes.
    quota_bytes: AtomicU64,
    /// Index in [`HealthCategory::ALL`] of the last health answered, plus one (0: none yet).
    health: AtomicU8,
}

/// annal's instruments: clone it freely (one `Arc`).
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

struct Inner {
    capture_accepted: Counter<u64>,
    capture_dropped: Counter<u64>,
    events_durable: Counter<u64>,
    commit_seconds: Histogram<f64>,
    query_seconds: Histogram<f64>,
    restarts: Counter<u64>,
    tool_calls: Counter<u64>,
    readings: Arc<Readings>,
    /// Kept so the observed gauges stay registered as long as these instruments live.
    _gauges: Vec<ObservableGauge<u64>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("readings", &self.inner.readings)
            .finish_non_exhaustive()
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::from_global()
    }
}

impl Telemetry {
    /// Instruments made with the process's global `MeterProvider` as it is now (install yours
    /// before building the [`EngineConfig`](crate::EngineConfig)).
    pub fn from_global() -> Self {
        Self::new(&opentelemetry::global::meter(METER_NAME))
    }

    /// Instruments made with `meter`.
    pub fn new(meter: &Meter) -> Self {
        let readings = Arc::new(Readings::default());
        let gauge = |name: &'static str,
                     description: &'static str,
                     unit: &'static str,
                     read: fn(&Readings) -> u64| {
            let readings = Arc::downgrade(&readings);
            meter
                .u64_observable_gauge(name)
                .with_description(description)
                .with_unit(unit)
                .with_callback(move |observer| {
                    if let Some(readings) = readings.upgrade() {
                        observer.observe(read(&readings), &[]);
                    }
                })
                .build()
        };
        let health = {
            let readings = Arc::downgrade(&readings);
            meter
                .u64_observable_gauge("annal.health.category")
                .with_description(
                    "1 for the health category the engine last answered, 0 for every other",
                )
                .with_callback(move |observer| {
                    let Some(readings) = readings.upgrade() else {
                        return;
                    };
                    let current = readings.health.load(Ordering::Relaxed);
                    if current == 0 {
                        return;
                    }
                    for (index, category) in HealthCategory::ALL.iter().enumerate() {
                        let value = u64::from(usize::from(current) == index + 1);
                        observer.observe(
                            value,
                            &[KeyValue::new(Attribute::Health.key(), category.as_str())],
                        );
                    }
                })
                .build()
        };
        let gauges = vec![
            gauge(
                "annal.capture.queue_depth",
                "Captured events waiting for the ingress",
                "{event}",
                |r| r.queue_depth.load(Ordering::Relaxed),
            ),
            gauge(
                "annal.store.used",
                "Encrypted bytes of the history's chunks (the contract's bytes_used)",
                "By",
                |r| r.bytes_used.load(Ordering::Relaxed),
            ),
            gauge(
                "annal.store.quota",
                "The owner's quota of encrypted bytes",
                "By",
                |r| r.quota_bytes.load(Ordering::Relaxed),
            ),
            health,
        ];
        let histogram = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_description(description)
                .with_unit("s")
                .with_boundaries(LATENCY_BUCKETS_SECS.to_vec())
                .build()
        };
        Self {
            inner: Arc::new(Inner {
                capture_accepted: meter
                    .u64_counter("annal.capture.accepted")
                    .with_description("Captured events the ingress took from the queue")
                    .with_unit("{event}")
                    .build(),
                capture_dropped: meter
                    .u64_counter("annal.capture.dropped")
                    .with_description("Events the non-blocking capture path dropped")
                    .with_unit("{event}")
                    .build(),
                events_durable: meter
                    .u64_counter("annal.history.durable")
                    .with_description(
                        "How far the history's durable sequence advanced (events made durable)",
                    )
                    .with_unit("{event}")
                    .build(),
                commit_seconds: histogram(
                    "annal.writer.commit.duration",
                    "One history batch appended, from the writer taking it to its append",
                ),
                query_seconds: histogram(
                    "annal.tool.duration",
                    "One tool call through the policy gate, decision to answer",
                ),
                restarts: meter
                    .u64_counter("annal.supervisor.restarts")
                    .with_description("Restarts of a supervised child after a failure")
                    .with_unit("{restart}")
                    .build(),
                tool_calls: meter
                    .u64_counter("annal.tool.calls")
                    .with_description("Tool calls by operation and decision")
                    .with_unit("{call}")
                    .build(),
                readings,
                _gauges: gauges,
            }),
        }
    }

    /// The ingress took `accepted` events and drop markers for `dropped` events from the
    /// capture queue, which now holds `queued`.
    pub(crate) fn drained(&self, accepted: u64, dropped: u64, queued: usize) {
        if accepted > 0 {
            self.inner.capture_accepted.add(accepted, &[]);
        }
        self.lost(dropped);
        self.inner
            .readings
            .queue_depth
            .store(u64::try_from(queued).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// `events` taken from the queue were lost before the history held them (counted dropped,
    /// as the history's drop marker counts them).
    pub(crate) fn lost(&self, events: u64) {
        if events > 0 {
            self.inner.capture_dropped.add(events, &[]);
        }
    }

    /// A batch was appended in `took`.
    pub(crate) fn committed(&self, took: Duration) {
        self.inner.commit_seconds.record(took.as_secs_f64(), &[]);
    }

    /// A sync made the history durable `events` further.
    pub(crate) fn made_durable(&self, events: u64) {
        if events > 0 {
            self.inner.events_durable.add(events, &[]);
        }
    }

    /// The supervisor restarted `child` after a failure.
    pub(crate) fn restarted(&self, child: Child) {
        self.inner
            .restarts
            .add(1, &[KeyValue::new(Attribute::Child.key(), child.as_str())]);
    }

    /// A tool call of `operation` ended in `took`, allowed or refused with `refusal`'s code.
    pub(crate) fn tool_call(
        &self,
        operation: &'static str,
        refusal: Option<&'static str>,
        took: Duration,
    ) {
        let operation = KeyValue::new(Attribute::Operation.key(), operation);
        let decision = KeyValue::new(
            Attribute::Decision.key(),
            if refusal.is_some() {
                "refused"
            } else {
                "allowed"
            },
        );
        match refusal {
            Some(code) => self.inner.tool_calls.add(
                1,
                &[
                    operation.clone(),
                    decision,
                    KeyValue::new(Attribute::Refusal.key(), code),
                ],
            ),
            None => self.inner.tool_calls.add(1, &[operation.clone(), decision]),
        }
        self.inner
            .query_seconds
            .record(took.as_secs_f64(), &[operation]);
    }

    /// The engine answered a status: the gauges read it.
    pub(crate) fn status(&self, status: &annal_schema::tools::StatusResponse) {
        let readings = &self.inner.readings;
        readings
            .bytes_used
            .store(status.bytes_used, Ordering::Relaxed);
        readings
            .quota_bytes
            .store(status.quota_bytes, Ordering::Relaxed);
        let index = HealthCategory::ALL
            .iter()
            .position(|c| *c == status.health)
            .and_then(|i| u8::try_from(i + 1).ok())
            .unwrap_or(0);
        readings.health.store(index, Ordering::Relaxed);
    }
}
