//! An embedder that brings its own telemetry: a `tracing` subscriber receives annal's spans,
//! and an OpenTelemetry `MeterProvider` receives annal's metrics (docs/observability.md).
//!
//! Run: `cargo run -p annal-actors --example telemetry`
//!
//! Here the subscriber prints each span annal opens (name and fields) and the provider's
//! reader is the Prometheus exporter, whose text is printed at the end; a runtime that already
//! ships telemetry would hand annal its own subscriber and meter instead (an OTLP pipeline,
//! say). Nothing annal records names what an agent did: no labels, applications, capabilities,
//! arguments or actor names, only actions, phases, decisions, counts and durations.

use std::sync::Arc;

use annal_actors::{Engine, EngineConfig, Telemetry};
use annal_engine::entropy::OsEntropy;
use annal_engine::keys::{InMemoryProvider, Namespace};
use annal_engine::storage::StoreLayout;
use annal_schema::{ActionOutcome, Capability, Effect, EvidenceKinds, Route};
use opentelemetry::metrics::MeterProvider;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder, TextEncoder};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// Prints every span annal opens.
struct PrintSpans;

/// A span's fields as `name=value`.
#[derive(Default)]
struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PrintSpans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: Context<'_, S>,
    ) {
        if attrs.metadata().target() == "annal" {
            let mut fields = Fields::default();
            attrs.record(&mut fields);
            println!("span {}{}", attrs.metadata().name(), fields.0);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Your subscriber, installed before the engine starts (its actors run on threads of
    // their own, so it is the global one).
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry::Registry::default().with(PrintSpans),
    )?;
    // Your MeterProvider; annal's instruments are made with a meter of it.
    let registry = prometheus::Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .build()?;
    let provider = SdkMeterProvider::builder().with_reader(exporter).build();

    let dir = std::env::temp_dir().join(format!("annal-telemetry-example-{}", std::process::id()));
    let layout = StoreLayout::in_namespace_dir(&dir.join("example"));
    let mut config = EngineConfig::new(layout, Namespace::new("example")?);
    config.telemetry = Telemetry::new(&provider.meter(annal_actors::telemetry::METER_NAME));
    let keys = Arc::new(InMemoryProvider::new(Box::new(OsEntropy))?);
    let engine = Engine::start(config, keys)?;
    engine.enable()?;

    let capture = engine.capture();
    let session = capture.session_started("a label no span or metric will carry");
    for _ in 0..10 {
        let token = capture.action_started(
            Capability::new("input.pointer.click")?,
            None,
            Some(&session),
        );
        capture.action_completed(
            token,
            ActionOutcome {
                effect: Effect::Confirmed,
                route: Route::Accessibility,
                delivery: None,
                delivered_count: None,
                evidence_kinds: EvidenceKinds::default(),
                escalation_kind: None,
            },
        );
    }
    capture.session_ended(session);
    engine.flush()?;
    engine.status()?; // the gauges read the status the engine answers last

    let mut text = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut text)?;
    println!("{}", String::from_utf8_lossy(&text));
    let report = engine.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(report.drained);
    Ok(())
}
