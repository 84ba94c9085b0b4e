//! What annal's telemetry costs the history (issue 31, docs/observability.md): durable append
//! with telemetry on against off, as alternating pairs in one process.
//!
//! Run: `cargo run --release -p annal-bench --example telemetry_cost`
//!
//! "On" is the engine's instruments recording into an OpenTelemetry SDK `MeterProvider` whose
//! reader is the Prometheus exporter (gathered and encoded after each run, as a scrape would),
//! and every `annal` span going to a subscriber that records each span's name and fields into
//! a bounded buffer. "Off" is the default: the global no-op provider and spans nobody
//! subscribes to (the subscriber's switch is off, and the callsites' interest is rebuilt).
//! Export over OTLP is not built yet; this measures the instrumentation and an in-process
//! pipeline, which is what capture and commits pay either way.
//!
//! Each pair runs `stream` (100,000 events, one producer, `annal_bench::engine`) off then on
//! (the order alternates between pairs), each on a fresh store, and a `stream_with_flusher`
//! pair for the commit latency. Prints `FIGURE telemetry.append.{off,on}.durable_events_per_s`
//! (medians), `FIGURE telemetry.append.on_over_off` (the median of the pairs' ratios),
//! `FIGURE telemetry.commit_latency.{off,on}.p99_us` and `FIGURE telemetry.spans_recorded`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use annal_actors::Telemetry;
use annal_bench::engine::{Stream, run_stream_with};
use annal_bench::{print_figure, quantile};
use opentelemetry::metrics::MeterProvider;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder, TextEncoder};
use tracing::subscriber::Interest;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// Events of one stream.
const STREAM_EVENTS: usize = 100_000;

/// Alternating off/on pairs.
const PAIRS: usize = 5;

/// Most span records the recording subscriber keeps (older ones are overwritten in place).
const SPAN_BUFFER_ENTRIES: usize = 4_096;

/// Whether the recording subscriber takes spans.
static SPANS_ON: AtomicBool = AtomicBool::new(false);

/// Spans recorded while on.
static SPANS_RECORDED: AtomicUsize = AtomicUsize::new(0);

/// Records each `annal` span's name and fields into a ring of strings while [`SPANS_ON`].
struct Recorder(Mutex<Vec<String>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorder {
    fn register_callsite(&self, _: &'static tracing::Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        SPANS_ON.load(Ordering::Relaxed) && metadata.target() == "annal"
    }
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: Context<'_, S>,
    ) {
        let mut line = attrs.metadata().name().to_owned();
        attrs.record(&mut Fields(&mut line));
        let n = SPANS_RECORDED.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut ring) = self.0.lock() {
            if ring.len() < SPAN_BUFFER_ENTRIES {
                ring.push(line);
            } else if let Some(slot) = ring.get_mut(n % SPAN_BUFFER_ENTRIES) {
                *slot = line;
            }
        }
    }
}

/// One stream with telemetry `on` (or off), and with a flusher thread when `flusher`.
fn stream(on: bool, flusher: bool) -> Stream {
    SPANS_ON.store(on, Ordering::Relaxed);
    tracing::callsite::rebuild_interest_cache();
    let registry = prometheus::Registry::new();
    let provider = on.then(|| {
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .build()
            .unwrap_or_else(|e| panic!("exporter: {e}"));
        SdkMeterProvider::builder().with_reader(exporter).build()
    });
    let stream = run_stream_with(STREAM_EVENTS, flusher, |config| {
        config.telemetry = match &provider {
            Some(provider) => Telemetry::new(&provider.meter(annal_actors::telemetry::METER_NAME)),
            None => Telemetry::from_global(),
        };
    })
    .unwrap_or_else(|e| panic!("stream: {e}"));
    if on {
        let mut text = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut text)
            .unwrap_or_else(|e| panic!("encode: {e}"));
        assert!(
            String::from_utf8_lossy(&text).contains("annal_capture_accepted_total"),
            "the on run recorded no metrics"
        );
    }
    SPANS_ON.store(false, Ordering::Relaxed);
    stream
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn p99_us(stream: &Stream) -> u64 {
    let mut us: Vec<u64> = stream
        .commits
        .iter()
        .map(|c| u64::try_from(c.took.as_micros()).unwrap_or(u64::MAX))
        .collect();
    us.sort_unstable();
    quantile(&us, 0.99)
}

fn main() {
    if let Err(error) = tracing::subscriber::set_global_default(
        tracing_subscriber::registry::Registry::default().with(Recorder(Mutex::new(Vec::new()))),
    ) {
        panic!("subscriber: {error}");
    }
    let (mut off, mut on, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 0..PAIRS {
        let (a, b) = if pair % 2 == 0 {
            let a = stream(false, false);
            (a, stream(true, false))
        } else {
            let b = stream(true, false);
            (stream(false, false), b)
        };
        println!(
            "pair {pair}: off {:.0} events/s, on {:.0} events/s",
            a.events_per_s(),
            b.events_per_s()
        );
        ratios.push(b.events_per_s() / a.events_per_s());
        off.push(a.events_per_s());
        on.push(b.events_per_s());
    }
    print_figure(
        "telemetry.append.off.durable_events_per_s",
        format!("{:.0}", median(off)),
        "events/s",
    );
    print_figure(
        "telemetry.append.on.durable_events_per_s",
        format!("{:.0}", median(on)),
        "events/s",
    );
    print_figure(
        "telemetry.append.on_over_off",
        format!("{:.3}", median(ratios)),
        "ratio",
    );
    let flushed_off = stream(false, true);
    let flushed_on = stream(true, true);
    print_figure(
        "telemetry.commit_latency.off.p99_us",
        p99_us(&flushed_off),
        "us",
    );
    print_figure(
        "telemetry.commit_latency.on.p99_us",
        p99_us(&flushed_on),
        "us",
    );
    print_figure(
        "telemetry.spans_recorded",
        SPANS_RECORDED.load(Ordering::Relaxed),
        "spans",
    );
}
