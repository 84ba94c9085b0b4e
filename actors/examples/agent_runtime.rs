//! An agent runtime wiring annal's capture hook into its tool dispatch loop, from plain `main`.
//!
//! Run: `cargo run -p annal-actors --example agent_runtime`
//!
//! The hook sits on every tool dispatch, so it must cost nanoseconds and never fail the action:
//! `action_started` before the tool runs, `action_completed` with the validated outcome after.
//! Whatever happens to history (a full queue, a failing disk, a restarting writer) the tool
//! call below is never delayed, changed or refused.
//!
//! The example keeps its key in memory so it runs anywhere; a real runtime opens the OS
//! credential store with `annal_engine::keys::open_provider(KeyStoreChoice::Auto, ..)`.

use std::sync::Arc;

use annal_actors::{Engine, EngineConfig};
use annal_engine::entropy::OsEntropy;
use annal_engine::keys::{InMemoryProvider, Namespace};
use annal_engine::storage::StoreLayout;
use annal_schema::{
    ActionOutcome, Application, BundleId, Capability, DisplayName, Effect, EvidenceKind,
    EvidenceKinds, Route,
};

/// One tool the agent can call.
struct Tool {
    /// The Cua capability it uses.
    capability: &'static str,
    /// What it does (here: nothing but pretend).
    run: fn() -> Effect,
}

const TOOLS: [Tool; 3] = [
    Tool {
        capability: "input.pointer.click",
        run: || Effect::Confirmed,
    },
    Tool {
        capability: "input.keyboard.type",
        run: || Effect::Partial,
    },
    Tool {
        capability: "window.frame.set",
        run: || Effect::Unverifiable,
    },
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile_dir()?;
    let layout = StoreLayout::in_namespace_dir(&dir.join("example"));
    let config = EngineConfig::new(layout, Namespace::new("example")?);
    let keys = Arc::new(InMemoryProvider::new(Box::new(OsEntropy))?);
    let engine = Engine::start(config, keys)?;
    engine.enable()?;

    let capture = engine.capture();
    let editor = Application::new(
        Some(BundleId::new("org.example.Editor")?),
        Some(DisplayName::new("Editor")?),
    );
    let session = capture.session_started("task: tidy the desktop");
    // The dispatch loop: the hook around every tool call.
    for step in 0..30 {
        let tool = &TOOLS[step % TOOLS.len()];
        let token = capture.action_started(
            Capability::new(tool.capability)?,
            editor.clone(),
            Some(&session),
        );
        let effect = (tool.run)();
        capture.action_completed(
            token,
            ActionOutcome {
                effect,
                route: Route::Accessibility,
                delivery: None,
                delivered_count: None,
                evidence_kinds: EvidenceKinds::new(vec![EvidenceKind::AccessibilityReadback])
                    .unwrap_or_default(),
                escalation_kind: None,
            },
        );
    }
    capture.session_ended(session);

    let status = engine.flush()?;
    println!(
        "recorded: health {}, {} bytes encrypted, {} dropped",
        status.health, status.bytes_used, status.dropped_events
    );
    let report = engine.shutdown();
    println!(
        "shutdown in {:?} (drained: {})",
        report.took, report.drained
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// A fresh private directory under the system temp dir.
fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("annal-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
