//! `annal serve --metrics-listen ADDR`: annal's metrics (`annal_actors::telemetry`) in
//! Prometheus' text format at `http://ADDR/metrics`, for a Prometheus server to scrape.
//!
//! The OpenTelemetry SDK's `MeterProvider`, with the `opentelemetry-prometheus` exporter as its
//! reader, is installed as the process's global provider before the engine starts, so the
//! engine's instruments record into it; each scrape first asks the engine for its status (which
//! brings the gauges up to date), then gathers the registry and encodes it with the
//! `prometheus` crate's `TextEncoder`. The HTTP/1 server is hyper's. Off unless the owner
//! names an address; nothing but `GET /metrics` is answered, at most
//! [`SCRAPES_IN_FLIGHT_MAX`] connections are served at once and a request's head must arrive
//! within [`SCRAPE_HEADER_DEADLINE_MS`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use annal_actors::Engine;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder, TextEncoder};

use crate::CliError;

/// Most scrape connections served at once; more wait in the listen backlog.
pub const SCRAPES_IN_FLIGHT_MAX: usize = 4;

/// Longest a scrape's request head may take to arrive, in milliseconds.
pub const SCRAPE_HEADER_DEADLINE_MS: u64 = 5_000;

/// The one path served.
const METRICS_PATH: &str = "/metrics";

/// The service name the metrics' `target_info` carries.
const SERVICE_NAME: &str = "annal";

/// The installed metrics pipeline: the registry scrapes read, and the provider that feeds it.
pub struct MetricsPipeline {
    registry: prometheus::Registry,
    provider: SdkMeterProvider,
}

impl MetricsPipeline {
    /// Builds the pipeline and installs its provider as the global one (before the engine's
    /// configuration is made, so its instruments record here).
    pub fn install() -> Result<Self, CliError> {
        let registry = prometheus::Registry::new();
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .build()
            .map_err(|e| CliError::unavailable(format!("the metrics exporter: {e}")))?;
        let provider = SdkMeterProvider::builder()
            .with_resource(Resource::builder().with_service_name(SERVICE_NAME).build())
            .with_reader(exporter)
            .build();
        opentelemetry::global::set_meter_provider(provider.clone());
        Ok(Self { registry, provider })
    }

    /// The metrics as Prometheus' text format.
    fn text(&self) -> Result<Vec<u8>, String> {
        let mut text = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut text)
            .map_err(|e| e.to_string())?;
        Ok(text)
    }
}

impl Drop for MetricsPipeline {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// Binds `address` for the scrape endpoint (done before the daemon says it serves, so a port
/// in use is an error at once).
pub async fn bind(address: SocketAddr) -> Result<tokio::net::TcpListener, CliError> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| CliError::unavailable(format!("--metrics-listen {address}: {e}")))
}

/// Serves scrapes on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    pipeline: Arc<MetricsPipeline>,
    engine: Arc<Engine>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(SCRAPES_IN_FLIGHT_MAX));
    loop {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (pipeline, engine) = (Arc::clone(&pipeline), Arc::clone(&engine));
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let (pipeline, engine) = (Arc::clone(&pipeline), Arc::clone(&engine));
                async move {
                    Ok::<_, std::convert::Infallible>(answer(&request, &pipeline, &engine).await)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_millis(SCRAPE_HEADER_DEADLINE_MS))
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(permit);
        });
    }
}

async fn answer(
    request: &Request<hyper::body::Incoming>,
    pipeline: &MetricsPipeline,
    engine: &Engine,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET || request.uri().path() != METRICS_PATH {
        return plain(
            StatusCode::NOT_FOUND,
            "only GET /metrics is served\n".into(),
        );
    }
    // The gauges read the status the engine answers last.
    let _ = engine.status_async().await;
    match pipeline.text() {
        Ok(text) => {
            let mut response = Response::new(Full::new(Bytes::from(text)));
            if let Ok(value) = TextEncoder::new().format_type().parse() {
                response
                    .headers_mut()
                    .insert(hyper::header::CONTENT_TYPE, value);
            }
            response
        }
        Err(error) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the metrics could not be encoded: {error}\n"),
        ),
    }
}

fn plain(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response
}
