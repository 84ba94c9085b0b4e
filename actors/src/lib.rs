//! annal-actors: the imperative shell of annal.
//!
//! The rules live in `annal-engine` (synchronous, deterministic); this crate owns the threads,
//! timers and supervision that run them: a ractor supervision tree on a runtime of its own, and
//! the [`Engine`] handle an agent runtime embeds.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use annal_actors::{Engine, EngineConfig};
//! use annal_engine::keys::{InMemoryProvider, Namespace};
//! use annal_engine::entropy::OsEntropy;
//! use annal_engine::storage::StoreLayout;
//! use annal_schema::{ActionOutcome, Capability, Effect, EvidenceKinds, Route};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layout = StoreLayout::in_namespace_dir(std::path::Path::new("/tmp/annal-doc/work"));
//! let config = EngineConfig::new(layout, Namespace::new("work")?);
//! let keys = Arc::new(InMemoryProvider::new(Box::new(OsEntropy))?);
//! let engine = Engine::start(config, keys)?;
//! engine.enable()?; // the owner's opt-in, durable when this returns
//!
//! // In the agent runtime's tool dispatch loop: nanoseconds, never blocks, never fails.
//! let capture = engine.capture();
//! let session = capture.session_started("a raw label that is never written");
//! let token = capture.action_started(Capability::new("input.pointer.click")?, None, Some(&session));
//! // ... the tool runs ...
//! let outcome = ActionOutcome {
//!     effect: Effect::Confirmed,
//!     route: Route::Accessibility,
//!     delivery: None,
//!     delivered_count: None,
//!     evidence_kinds: EvidenceKinds::default(),
//!     escalation_kind: None,
//! };
//! capture.action_completed(token, outcome);
//! capture.session_ended(session);
//!
//! engine.flush()?; // everything above is durable
//! let report = engine.shutdown(); // bounded drain, always returns
//! assert!(report.drained);
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! - [`engine`]: [`Engine`], the embeddable handle: start (its own runtime thread), capture,
//!   control operations (blocking and async), status, bounded shutdown.
//! - [`config`]: [`EngineConfig`] and the timing constants (`SYNC_INTERVAL_MS`,
//!   `DRAIN_TICK_MS`, `SHUTDOWN_DEADLINE_MS`).
//! - [`supervisor`]: the root actor: starts the children, restarts a failed one within the
//!   restart intensity, turns supervision events into journaled signals, routes requests.
//! - [`key_custody`]: the KeyCustody actor and its dedicated credential-store thread with
//!   per-call deadlines.
//! - [`journal`]: the Journal actor: the engine journal's writer and the state projection that
//!   status, health and restarts read; it outlives a failing writer.
//! - [`writer`]: the Writer actor: the history writer, group commit, drop markers, sequence
//!   reservation.
//! - [`ingress`]: the Ingress actor: drains the capture queue into the writer in batches.
//! - [`query`]: the Query actor: `history_query` through the one planner, over the lazily
//!   loaded index files, a hot cache of recent events and reads by location; fails closed.
//! - [`daemon`]: the local daemon's socket protocol, server and client (`docs/protocol.md`).
//! - [`figures`]: the quantile behind every latency figure (`annal demo`, the benches).
//! - [`gate`]: the PolicyGate actor: every tool call (and the owner's reads) decided by the
//!   engine's one policy rule, its pre-execution audit record durable before the call runs, its
//!   outcome recorded after; owner policy changes; paging cursors. `docs/policy.md`.
//! - [`telemetry`]: the closed sets of spans (`tracing`) and metrics (the OpenTelemetry metrics
//!   API) that say how annal is doing, never what an agent did (`docs/observability.md`).
//! - `cli` (binary `annal`, feature `cli`): the command-line front-end: the owner's commands
//!   over the daemon, `serve`, `mcp` (an rmcp stdio server), `demo`, `verify`, `inspect`,
//!   `doctor` (`docs/cli.md`).
//!
//! The actor tree, each message and who sends it, the life of one captured event and shutdown
//! are described in `docs/actors.md`.
#![forbid(unsafe_code)]

pub mod call;
pub mod children;
pub mod config;
pub mod daemon;
pub mod engine;
pub mod figures;
pub mod gate;
pub mod ingress;
pub mod journal;
pub mod key_custody;
pub mod preflight;
pub mod query;
pub mod supervisor;
pub mod telemetry;
pub mod writer;

pub use config::EngineConfig;
pub use engine::{Engine, EngineError, Grants, QueryError, ShutdownReport};
pub use telemetry::Telemetry;
pub use writer::{ControlError, Setting};
