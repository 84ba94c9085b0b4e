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
//! by the ingress per drained batch, never by the hook); the gauges are recorded when their
//! value is known: the queue depth by the ingress after each drain, bytes, quota and health by
//! the supervisor whenever it answers a status. All are synchronous instruments, so an
//! engine's instruments leave nothing registered behind them (observable ones would leave
//! their callbacks in the provider for its life).
//! Their attributes come from [`Attribute`] too.
//!
//! [`EngineConfig`]: crate::EngineConfig

use std::sync::Arc;
use std::time::Duration;

use annal_engine::health::Child;
use annal_schema::HealthCategory;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter};

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

/// annal's instruments: clone it freely (one `Arc`). Every instrument is a synchronous one,
/// recorded where its value changes, so building many (an engine restarted again and again)
/// registers nothing that outlives them: the SDK's instruments of one name are one.
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

struct Inner {
    capture_accepted: Counter<u64>,
    capture_dropped: Counter<u64>,
    queue_depth: Gauge<u64>,
    events_durable: Counter<u64>,
    commit_seconds: Histogram<f64>,
    query_seconds: Histogram<f64>,
    restarts: Counter<u64>,
    tool_calls: Counter<u64>,
    bytes_used: Gauge<u64>,
    quota_bytes: Gauge<u64>,
    health: Gauge<u64>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
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
        let counter = |name: &'static str, description: &'static str, unit: &'static str| {
            meter
                .u64_counter(name)
                .with_description(description)
                .with_unit(unit)
                .build()
        };
        let gauge = |name: &'static str, description: &'static str, unit: &'static str| {
            meter
                .u64_gauge(name)
                .with_description(description)
                .with_unit(unit)
                .build()
        };
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
                capture_accepted: counter(
                    "annal.capture.accepted",
                    "Captured events the ingress took from the queue",
                    "{event}",
                ),
                capture_dropped: counter(
                    "annal.capture.dropped",
                    "Events the non-blocking capture path dropped",
                    "{event}",
                ),
                queue_depth: gauge(
                    "annal.capture.queue_depth",
                    "Captured events waiting for the ingress",
                    "{event}",
                ),
                events_durable: counter(
                    "annal.history.durable",
                    "How far the history's durable sequence advanced (events made durable)",
                    "{event}",
                ),
                commit_seconds: histogram(
                    "annal.writer.commit.duration",
                    "One history batch appended, from the writer taking it to its append",
                ),
                query_seconds: histogram(
                    "annal.tool.duration",
                    "One tool call through the policy gate, decision to answer",
                ),
                restarts: counter(
                    "annal.supervisor.restarts",
                    "Restarts of a supervised child after a failure",
                    "{restart}",
                ),
                tool_calls: counter(
                    "annal.tool.calls",
                    "Tool calls by operation and decision",
                    "{call}",
                ),
                bytes_used: gauge(
                    "annal.store.used",
                    "Encrypted bytes of the history's chunks (the contract's bytes_used)",
                    "By",
                ),
                quota_bytes: gauge(
                    "annal.store.quota",
                    "The owner's quota of encrypted bytes",
                    "By",
                ),
                health: gauge(
                    "annal.health.category",
                    "1 for the health category the engine last answered, 0 for every other",
                    // No unit: "1" would make Prometheus' name `annal_health_category_ratio`.
                    "",
                ),
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
            .queue_depth
            .record(u64::try_from(queued).unwrap_or(u64::MAX), &[]);
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

    /// The engine answered a status: the gauges take its bytes, quota and health.
    pub(crate) fn status(&self, status: &annal_schema::tools::StatusResponse) {
        self.inner.bytes_used.record(status.bytes_used, &[]);
        self.inner.quota_bytes.record(status.quota_bytes, &[]);
        for category in HealthCategory::ALL {
            self.inner.health.record(
                u64::from(category == status.health),
                &[KeyValue::new(Attribute::Health.key(), category.as_str())],
            );
        }
    }
}
