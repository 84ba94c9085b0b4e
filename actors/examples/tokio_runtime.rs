//! An async agent runtime (`#[tokio::main]`, multi-threaded) embedding annal.
//!
//! Run: `cargo run -p annal-actors --example tokio_runtime`
//!
//! The engine runs on a runtime of its own, so nothing of annal ever occupies this runtime's
//! workers: start-up, control operations and shutdown have `_async` forms that only await, and
//! the capture hook is synchronous and non-blocking, safe to call inside any task. (The
//! blocking forms refuse to run here with `EngineError::InAsyncContext` rather than stall a
//! worker.)

use std::sync::Arc;

use annal_actors::{Engine, EngineConfig};
use annal_engine::entropy::OsEntropy;
use annal_engine::keys::{InMemoryProvider, Namespace};
use annal_engine::storage::StoreLayout;
use annal_schema::{ActionOutcome, Capability, Effect, EvidenceKinds, Route};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("annal-tokio-example-{}", std::process::id()));
    let layout = StoreLayout::in_namespace_dir(&dir.join("example"));
    let config = EngineConfig::new(layout, Namespace::new("example")?);
    let keys = Arc::new(InMemoryProvider::new(Box::new(OsEntropy))?);
    let engine = Engine::start_async(config, keys).await?;
    engine.enable_async().await?;

    // Many concurrent agent tasks, each dispatching tools through the hook.
    let capture = engine.capture();
    let agents: Vec<_> = (0..8)
        .map(|agent| {
            let capture = capture.clone();
            tokio::spawn(async move {
                let session = capture.session_started(&format!("agent {agent}"));
                for _ in 0..25 {
                    let Ok(capability) = Capability::new("browser.input.click") else {
                        return;
                    };
                    let token = capture.action_started(capability, None, Some(&session));
                    tokio::task::yield_now().await; // the tool runs
                    capture.action_completed(
                        token,
                        ActionOutcome {
                            effect: Effect::Confirmed,
                            route: Route::Dom,
                            delivery: None,
                            delivered_count: None,
                            evidence_kinds: EvidenceKinds::default(),
                            escalation_kind: None,
                        },
                    );
                }
                capture.session_ended(session);
            })
        })
        .collect();
    for agent in agents {
        agent.await?;
    }

    let status = engine.flush_async().await?;
    println!(
        "recorded: health {}, {} bytes encrypted, {} dropped",
        status.health, status.bytes_used, status.dropped_events
    );
    let report = engine.shutdown_async().await;
    println!(
        "shutdown in {:?} (drained: {})",
        report.took, report.drained
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
