//! Telemetry says how annal is doing, never what an agent did (docs/observability.md).
//!
//! - The firewall: planted values go through the daemon protocol's input surfaces (capture's
//!   session labels, applications and capabilities, tool-call arguments and cursors, the
//!   owner's filters, grants' actor names, a preflight), answered by the in-process dispatcher
//!   over an engine whose metrics record into a Prometheus registry, under a subscriber that
//!   records every span's name and every field value. Neither the spans nor the metrics' text
//!   holds any planted value; the expected spans and metrics are there. The same check,
//!   pointed at a span that carries one planted value, fails (the control).
//! - `annal serve --metrics-listen`: the endpoint serves capture counts and the health gauge,
//!   and no planted value.
//! - A real Prometheus server (Debian's `prometheus`, installed by `.ci/test`; required there
//!   with `ANNAL_REQUIRE_PROMETHEUS=1`, skipped with the reason elsewhere) scrapes a running
//!   daemon, and the capture and health series are read back through its HTTP query API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod embedded;
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use annal_actors::Telemetry;
use annal_actors::daemon::protocol::decode_request;
use annal_actors::daemon::{Dispatcher, Reply};
use opentelemetry::metrics::MeterProvider;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder, TextEncoder};
use serde_json::{Value, json};
use support::{Raw, Sandbox, env_is_one};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::Registry;

/// Longest the tests wait for a daemon line, a scrape or a Prometheus query, in seconds.
const WAIT_SECS: u64 = 90;

/// What the recording subscriber saw: span names, and `field=value` for every field.
static SEEN: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();

/// A layer that writes down every span's name and fields, every later `record`, and every
/// event's fields.
struct Recorder(Arc<Mutex<Vec<String>>>);

struct Fields<'a>(&'a mut Vec<String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push(format!("{}={value:?}", field.name()));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push(format!("{}={value}", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorder {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: Context<'_, S>,
    ) {
        let mut seen = self.0.lock().unwrap();
        seen.push(format!("span {}", attrs.metadata().name()));
        attrs.record(&mut Fields(&mut seen));
    }
    fn on_record(
        &self,
        _: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: Context<'_, S>,
    ) {
        values.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        event.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
}

/// The recording subscriber, installed once for this test binary (the engine's actors run on
/// threads of their own, so it must be the global one).
fn recorded() -> Arc<Mutex<Vec<String>>> {
    Arc::clone(SEEN.get_or_init(|| {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber = Registry::default().with(Recorder(Arc::clone(&seen)));
        tracing::subscriber::set_global_default(subscriber).unwrap();
        seen
    }))
}

/// Unique marker values, lowercase letters and digits (valid in every identifier field).
#[derive(Default)]
struct Plants(Vec<String>);

impl Plants {
    fn plant(&mut self) -> String {
        let value = format!("zqplant{}x{:04}q", std::process::id(), self.0.len());
        self.0.push(value.clone());
        value
    }

    /// The planted values `text` holds.
    fn found_in(&self, text: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|planted| text.contains(planted.as_str()))
            .cloned()
            .collect()
    }
}

/// Sends one wire request (JSON) through `dispatcher`, as a connection would.
fn ask(
    runtime: &tokio::runtime::Runtime,
    dispatcher: &Dispatcher,
    connection: &mut annal_actors::daemon::ConnectionState,
    request: Value,
) -> Value {
    let request = decode_request(request.to_string().as_bytes()).unwrap();
    match runtime.block_on(dispatcher.dispatch(connection, request)) {
        Reply::Ok(value) => json!({"ok": value}),
        Reply::Error(error) => json!({"error": error.code.as_str()}),
    }
}

/// Every input surface with planted values, over an engine whose telemetry is recorded:
/// nothing planted reaches a span or a metric; the spans and metrics are there.
#[test]
fn no_planted_value_reaches_a_span_or_a_metric() {
    let seen = recorded();
    let registry = prometheus::Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .build()
        .unwrap();
    let provider = SdkMeterProvider::builder().with_reader(exporter).build();
    let store = embedded::TestStore::new();
    let mut config = store.config();
    config.telemetry = Telemetry::new(&provider.meter("annal"));
    let engine = Arc::new(store.start_with(config));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dispatcher = Dispatcher::new(Arc::clone(&engine), "in-memory".into());
    let mut connection = dispatcher.connection();
    let mut plants = Plants::default();
    let mut ask = |request: Value| ask(&runtime, &dispatcher, &mut connection, request);

    assert!(ask(json!({"op": "enable"}))["ok"].is_object());
    // Capture: a raw session label, applications, capabilities.
    let label = plants.plant();
    assert!(ask(json!({"op": "session_started", "session": label}))["ok"].is_object());
    for _ in 0..3 {
        let started = ask(json!({
            "op": "action_started",
            "capability": format!("input.{}", plants.plant()),
            "application": {"bundle_id": format!("org.{}", plants.plant()), "display_name": plants.plant()},
            "session": label,
        }));
        let completed = ask(json!({
            "op": "action_completed",
            "action": started["ok"]["action"],
            "outcome": {"effect": "confirmed", "route": "accessibility"},
        }));
        assert!(completed["ok"].is_object(), "{completed}");
    }
    assert!(ask(json!({"op": "session_ended", "session": label}))["ok"].is_object());
    assert!(ask(json!({"op": "flush"}))["ok"].is_object());
    // An agent's grant and calls: its name, a session filter, a cursor, all planted.
    let agent = plants.plant();
    for operation in ["status", "query"] {
        let granted = ask(json!({"op": "grant", "actor": agent, "operation": operation}));
        assert!(granted["ok"].is_object(), "{granted}");
    }
    for arguments in [
        json!({"limit": 5}),
        json!({"limit": 5, "session_id": plants.plant()}),
        json!({"limit": 5, "session_id": label}),
        json!({"limit": 5, "cursor": plants.plant()}),
    ] {
        let answer = ask(
            json!({"op": "call_tool", "actor": agent, "tool": "history_query", "arguments": arguments}),
        );
        assert!(answer["ok"].is_object(), "{answer}");
    }
    let status =
        ask(json!({"op": "call_tool", "actor": agent, "tool": "history_status", "arguments": {}}));
    assert!(status["ok"]["answer"].is_object(), "{status}");
    // An agent with no grant, refused.
    let stranger = plants.plant();
    let refused = ask(
        json!({"op": "call_tool", "actor": stranger, "tool": "history_query", "arguments": {"limit": 5}}),
    );
    assert!(refused["ok"]["refusal"].is_object(), "{refused}");
    // The owner's reads with planted filters; a preflight; a revoke.
    for query in [
        json!({"op": "query", "arguments": {"limit": 20}, "text": plants.plant()}),
        json!({"op": "query", "arguments": {"limit": 20}, "app": plants.plant()}),
        json!({"op": "query", "arguments": {"limit": 20, "session_id": label}}),
    ] {
        assert!(ask(query)["ok"].is_object());
    }
    let _ = ask(json!({"op": "preflight", "actor": agent, "limit": 5}));
    assert!(ask(json!({"op": "revoke", "actor": agent}))["ok"].is_object());
    assert!(ask(json!({"op": "status"}))["ok"].is_object());

    let spans = seen.lock().unwrap().join("\n");
    let mut metrics = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut metrics)
        .unwrap();
    let metrics = String::from_utf8(metrics).unwrap();
    assert_eq!(plants.found_in(&spans), Vec::<String>::new(), "{spans}");
    assert_eq!(plants.found_in(&metrics), Vec::<String>::new(), "{metrics}");
    // Capture over the socket, as the hook, has no span.
    for op in [
        "session_started",
        "session_ended",
        "action_started",
        "action_completed",
    ] {
        assert!(
            !spans.contains(&format!("annal.operation={op}")),
            "a capture request had a span:\n{spans}"
        );
    }
    for name in [
        "span annal.daemon.request",
        "span annal.gate.call",
        "span annal.query.read",
        "span annal.journal.commit",
        "span annal.writer.commit",
        "span annal.writer.sync",
        "annal.decision=refused",
        "annal.refusal=not_granted",
        "annal.refusal=cursor_invalid",
    ] {
        assert!(spans.contains(name), "no {name} in:\n{spans}");
    }
    for series in [
        "annal_capture_accepted_total",
        "annal_tool_calls_total",
        "annal_tool_duration_seconds_bucket",
        "annal_writer_commit_duration_seconds_bucket",
        "annal_history_durable_total",
        "annal_health_category{annal_health=\"ready\",otel_scope_name=\"annal\"} 1",
    ] {
        assert!(metrics.contains(series), "no {series} in:\n{metrics}");
    }
    drop(dispatcher);
    if let Ok(engine) = Arc::try_unwrap(engine) {
        assert!(engine.shutdown().drained);
    }

    // The control: the same check finds a planted value a span carries.
    let planted = plants.plant();
    tracing::info_span!("annal.control", annal.operation = planted.as_str()).in_scope(|| {});
    let spans = seen.lock().unwrap().join("\n");
    assert_eq!(plants.found_in(&spans), vec![planted]);
}

/// A supervised child's failure shows in the metrics: the writer panics, the supervisor
/// restarts it, and `annal_supervisor_restarts_total{annal_child="writer"}` counts it; capture
/// after the restart is counted as accepted.
#[test]
fn a_writer_restart_is_counted_and_capture_goes_on_counting() {
    let registry = prometheus::Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .build()
        .unwrap();
    let provider = SdkMeterProvider::builder().with_reader(exporter).build();
    let store = embedded::TestStore::new();
    let mut config = store.config();
    config.telemetry = Telemetry::new(&provider.meter("annal"));
    let engine = store.start_with(config);
    engine.enable().unwrap();
    let text = || {
        let mut text = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut text)
            .unwrap();
        String::from_utf8(text).unwrap()
    };
    assert!(
        !text().contains("annal_supervisor_restarts_total"),
        "{}",
        text()
    );
    engine.inject_writer_panic();
    let deadline = Instant::now() + Duration::from_secs(WAIT_SECS);
    while engine
        .restarts(annal_engine::health::Child::Writer)
        .unwrap()
        == 0
    {
        assert!(Instant::now() < deadline, "the writer was not restarted");
        std::thread::sleep(Duration::from_millis(10));
    }
    let capture = engine.capture();
    let session = capture.session_started("after the restart");
    capture.session_ended(session);
    engine.flush().unwrap();
    let text = text();
    assert!(
        text.contains(
            "annal_supervisor_restarts_total{annal_child=\"writer\",otel_scope_name=\"annal\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("annal_capture_accepted_total"), "{text}");
    assert!(engine.shutdown().drained);
}

/// `annal serve --metrics-listen 127.0.0.1:0`, its stderr read until the endpoint's line.
struct Served {
    child: Child,
    endpoint: String,
}

impl Served {
    fn start(sandbox: &Sandbox) -> Self {
        let mut child = sandbox
            .annal(&["serve", "--metrics-listen", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let endpoint = loop {
            let line = lines
                .next()
                .expect("serve exited before it served")
                .unwrap();
            if let Some(url) = line.strip_prefix("annal: metrics on http://") {
                break url.trim_end_matches("/metrics").to_owned();
            }
        };
        // Keep draining stderr so the daemon never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self { child, endpoint }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.0 GET of `path` on `address`: the status line's code and the body.
fn get(address: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(WAIT_SECS)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_owned())
}

/// Captures `count` actions with a planted label and application over the daemon's socket.
fn capture(sandbox: &Sandbox, plants: &mut Plants, count: usize) {
    let mut raw = Raw::connect(&sandbox.socket());
    let label = plants.plant();
    let started = raw.ask(json!({"op": "session_started", "session": label}));
    assert!(started["ok"].is_object(), "{started}");
    for _ in 0..count {
        raw.action(json!({
            "capability": "ui.click",
            "application": {"display_name": plants.plant()},
            "session": label
        }));
    }
    sandbox.ok(&["flush"]);
}

#[test]
fn the_metrics_endpoint_serves_capture_and_health_and_nothing_planted() {
    let sandbox = Sandbox::new();
    // Served first, then enabled through it (no on-demand daemon to stop and race).
    let served = Served::start(&sandbox);
    sandbox.ok(&["enable"]);
    let mut plants = Plants::default();
    capture(&sandbox, &mut plants, 5);
    let (code, text) = get(&served.endpoint, "/metrics");
    assert_eq!(code, 200, "{text}");
    assert!(
        text.contains("annal_capture_accepted_total{otel_scope_name=\"annal\"} 11"),
        "{text}"
    );
    assert!(
        text.contains("annal_health_category{annal_health=\"ready\",otel_scope_name=\"annal\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("target_info{service_name=\"annal\""),
        "{text}"
    );
    assert_eq!(plants.found_in(&text), Vec::<String>::new(), "{text}");
    let (code, _) = get(&served.endpoint, "/");
    assert_eq!(code, 404);
}

/// Hostile scrapers: connections that send nothing hold only the endpoint's own slots, each
/// for at most its head deadline; the daemon's socket answers meanwhile, garbage gets an error
/// answer, and a real scrape is answered once the stalled ones are cut off.
#[test]
fn stalled_and_garbage_scrapers_hold_nothing_but_the_endpoints_own_slots() {
    let sandbox = Sandbox::new();
    let served = Served::start(&sandbox);
    sandbox.ok(&["enable"]);
    // More idle connections than the endpoint serves at once.
    let stalled: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(&served.endpoint).unwrap())
        .collect();
    let started = Instant::now();
    sandbox.ok(&["status"]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the socket waited on the scrapers"
    );
    let mut garbage = TcpStream::connect(&served.endpoint).unwrap();
    garbage
        .set_read_timeout(Some(Duration::from_secs(WAIT_SECS)))
        .unwrap();
    garbage
        .write_all(b"\x00\x01 not http at all\r\n\r\n")
        .unwrap();
    let (code, text) = get(&served.endpoint, "/metrics");
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("annal_health_category"), "{text}");
    drop(stalled);
    sandbox.ok(&["status"]);
}

/// A Prometheus server, killed and its data removed on drop.
struct Prometheus {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts `prometheus` scraping `target` every second, on a port of its choosing (read
    /// from its log).
    fn start(binary: &str, target: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: annal\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let mut child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let address = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                panic!("prometheus exited before it listened");
            };
            // ts=... level=info ... msg="Listening on" address=127.0.0.1:PORT
            if line.contains("Listening on")
                && let Some(address) = line.split("address=").nth(1)
            {
                break address.split_whitespace().next().unwrap_or("").to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Self {
            child,
            address,
            _dir: dir,
        }
    }

    /// The first sample's value of `query`, once Prometheus has one.
    fn value(&self, query: &str) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(WAIT_SECS);
        let path = format!("/api/v1/query?query={}", encode(query));
        loop {
            let (code, body) = get(&self.address, &path);
            if code == 200
                && let Ok(answer) = serde_json::from_str::<Value>(&body)
                && let Some(value) = answer["data"]["result"][0]["value"][1].as_str()
            {
                return value.parse().unwrap();
            }
            assert!(
                Instant::now() < deadline,
                "no sample of {query}: {code} {body}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `query` percent-encoded for a URL's query string.
fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[test]
fn a_real_prometheus_scrapes_capture_and_health_from_the_daemon() {
    let binary = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists());
    let Some(binary) = binary else {
        assert!(
            !env_is_one("ANNAL_REQUIRE_PROMETHEUS"),
            "prometheus is not installed (apt-get install prometheus)"
        );
        eprintln!("SKIPPED: prometheus is not installed (apt-get install prometheus)");
        return;
    };
    let sandbox = Sandbox::new();
    // Served first, then enabled through it (no on-demand daemon to stop and race).
    let served = Served::start(&sandbox);
    sandbox.ok(&["enable"]);
    let mut plants = Plants::default();
    capture(&sandbox, &mut plants, 7);
    let prometheus = Prometheus::start(binary, &served.endpoint);
    let deadline = Instant::now() + Duration::from_secs(WAIT_SECS);
    // A session's start and seven actions' starts and completions; the first scrapes may
    // come before Prometheus has a sample at all.
    loop {
        let accepted = prometheus.value("annal_capture_accepted_total");
        if accepted >= 15.0 {
            assert_eq!(accepted, 15.0);
            break;
        }
        assert!(Instant::now() < deadline, "accepted stayed at {accepted}");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(
        prometheus.value("annal_health_category{annal_health=\"ready\"}"),
        1.0
    );
    assert_eq!(prometheus.value("up{job=\"annal\"}"), 1.0);
}
