//! Stores for the `query` bench and the `open_first_answer` example: a store filled through the
//! real [`Engine`] (capture hook, ingress, writer, seals and index files) with action pairs over
//! [`QUERY_SESSIONS`] sessions, at a path a fresh process can open again, and the queries the
//! figures are named after.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use annal_actors::{Engine, EngineConfig};
use annal_engine::capture::{Admission, CaptureSession};
use annal_engine::entropy::OsEntropy;
use annal_engine::keys::{InMemoryProvider, KeyCustody, KeyProvider, Namespace};
use annal_engine::query::{QueryService, ReaderKeys, RetentionCutoff};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::open_store;
use annal_schema::tools::QueryRequest;
use annal_schema::{ActionOutcome, Application, BundleId, Capability, DisplayName, Effect, Route};

use crate::BENCH_ROOT_KEY;
use crate::engine::RigError;

/// Sessions the events are spread over (round robin), as the issue's "newest-10 of one session
/// (of 20)" states.
pub const QUERY_SESSIONS: usize = 20;

/// A full store: the default quota (100 MiB), which the fill stops just below.
pub const FULL_STORE_BYTES: u64 = 100 * 1024 * 1024;

/// The fill stops this far below [`FULL_STORE_BYTES`], so the store is full but capture (and
/// the bench's writer) still runs.
pub const FULL_STORE_HEADROOM_BYTES: u64 = 2 * 1024 * 1024;

/// Events captured between two checks of the store's size while filling.
const FILL_STEP_EVENTS: usize = 2_000;

/// The producer sleeps this long while the capture queue is over half full.
const FILL_BACKOFF: Duration = Duration::from_micros(50);

/// Name of the namespace (and its directory) inside the bench's directory.
pub const QUERY_NAMESPACE: &str = "query";

/// The store's layout inside `dir`.
pub fn layout_in(dir: &Path) -> StoreLayout {
    StoreLayout::in_namespace_dir(&dir.join(QUERY_NAMESPACE))
}

/// A credential store holding [`BENCH_ROOT_KEY`] for [`QUERY_NAMESPACE`]: what a fresh process
/// recreates to open the store again.
pub fn provider() -> Result<Arc<dyn KeyProvider>, RigError> {
    let namespace = Namespace::new(QUERY_NAMESPACE)?;
    let provider = InMemoryProvider::new(Box::new(OsEntropy))?;
    provider.put_raw(&namespace, &namespace.primary_reference(), &BENCH_ROOT_KEY)?;
    Ok(Arc::new(provider))
}

/// Starts an engine on the store in `dir` (created when absent).
pub fn start_engine(dir: &Path) -> Result<Engine, RigError> {
    let config = EngineConfig::new(layout_in(dir), Namespace::new(QUERY_NAMESPACE)?);
    Ok(Engine::start(config, provider()?)?)
}

/// The label of session `n` (a raw label: the engine stores only its keyed id).
pub fn session_label(n: usize) -> String {
    format!("bench-agent-session-{n:02}")
}

/// A capturing agent runtime: sessions, and pairs of action start and completion.
pub struct Producer {
    /// The engine's hook.
    capture: annal_engine::capture::CaptureHandle,
    /// The open sessions, round robin.
    sessions: Vec<CaptureSession>,
    /// The next session to capture in.
    next: usize,
    /// The action's capability.
    capability: Capability,
    /// The action's application.
    application: Option<Application>,
}

impl Producer {
    /// Opens [`QUERY_SESSIONS`] sessions on `engine`.
    pub fn new(engine: &Engine) -> Result<Self, RigError> {
        let capture = engine.capture();
        let mut sessions = Vec::with_capacity(QUERY_SESSIONS);
        for n in 0..QUERY_SESSIONS {
            let session = capture.session_started(&session_label(n));
            if session.started() != Admission::Accepted {
                return Err("a session start was not accepted".into());
            }
            sessions.push(session);
        }
        Ok(Self {
            capture,
            sessions,
            next: 0,
            capability: Capability::new("window.frame.set")?,
            application: Application::new(
                Some(BundleId::new("org.gnome.Settings")?),
                Some(DisplayName::new("Settings")?),
            ),
        })
    }

    /// Captures one action (start and completion: two events) in the next session; `false`
    /// when the start was not accepted.
    pub fn action(&mut self) -> bool {
        let session = &self.sessions[self.next % self.sessions.len()];
        self.next += 1;
        let token = self.capture.action_started(
            self.capability.clone(),
            self.application.clone(),
            Some(session),
        );
        if token.admission() != Admission::Accepted {
            return false;
        }
        self.capture.action_completed(
            token,
            ActionOutcome::new(Effect::Confirmed, Route::Accessibility),
        );
        true
    }

    /// Ends the sessions.
    pub fn finish(self) {
        for session in self.sessions {
            self.capture.session_ended(session);
        }
    }
}

/// Bytes in the store's chunk files.
pub fn chunk_bytes(dir: &Path) -> u64 {
    let chunks: PathBuf = layout_in(dir).history_root().join("chunks");
    std::fs::read_dir(chunks)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Fills a new store in `dir` through the engine until its chunks hold `target_bytes` (or
/// `max_events` events were captured), then shuts the engine down cleanly. Returns the events
/// captured (sessions' starts and ends included).
pub fn fill_store(dir: &Path, target_bytes: u64, max_events: usize) -> Result<usize, RigError> {
    let engine = start_engine(dir)?;
    engine.enable()?;
    let mut producer = Producer::new(&engine)?;
    let headroom = EngineConfig::new(layout_in(dir), Namespace::new(QUERY_NAMESPACE)?)
        .capture_capacity_events
        / 2;
    let mut events = QUERY_SESSIONS;
    'fill: while events < max_events {
        for _ in 0..FILL_STEP_EVENTS / 2 {
            while engine.queued_events() > headroom {
                thread::sleep(FILL_BACKOFF);
            }
            if !producer.action() {
                return Err("an action start was not accepted while filling".into());
            }
            events += 2;
            if events >= max_events {
                break 'fill;
            }
        }
        engine.sync()?;
        if chunk_bytes(dir) >= target_bytes {
            break;
        }
    }
    producer.finish();
    events += QUERY_SESSIONS;
    engine.sync()?;
    let status = engine.status()?;
    if status.dropped_events != 0 {
        return Err(format!("the fill dropped events: {status:?}").into());
    }
    let report = engine.shutdown();
    if !report.drained {
        return Err(format!("shutdown did not drain: {report:?}").into());
    }
    Ok(events)
}

/// The queries the figures are named after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchQuery {
    /// The newest 50 events, any type.
    Newest50,
    /// The newest 10 events of one session (of [`QUERY_SESSIONS`]).
    Session10,
    /// The 50 events of a since/until sequence window in the middle of the store.
    Slice,
}

impl BenchQuery {
    /// Every bench query.
    pub const ALL: [Self; 3] = [Self::Newest50, Self::Session10, Self::Slice];

    /// The fewest events a page must hold (the bench fails otherwise).
    pub fn expected_events(self) -> usize {
        match self {
            Self::Newest50 | Self::Slice => 50,
            Self::Session10 => 10,
        }
    }

    /// The figure's name part.
    pub fn name(self) -> &'static str {
        match self {
            Self::Newest50 => "newest50",
            Self::Session10 => "session10",
            Self::Slice => "slice",
        }
    }

    /// The request; `slice` is the inclusive sequence window for [`BenchQuery::Slice`].
    pub fn request(self, slice: (u64, u64)) -> Result<QueryRequest, RigError> {
        let value = match self {
            Self::Newest50 => serde_json::json!({"limit": 50}),
            Self::Session10 => serde_json::json!({
                "session_id": session_label(7),
                "limit": 10,
            }),
            Self::Slice => serde_json::json!({
                "since_sequence": slice.0,
                "until_sequence": slice.1,
                "limit": 50,
            }),
        };
        QueryRequest::parse(&value).map_err(|e| format!("bad bench query: {e:?}").into())
    }
}

/// A reader (`QueryService`) over the store in `dir`, opened read-only (it writes no index
/// file), with the keys from [`provider`]: what a fresh process answering queries opens.
pub fn open_reader(dir: &Path) -> Result<QueryService, RigError> {
    let storage: Arc<dyn Storage> = Arc::new(open_store(&layout_in(dir), Access::Read)?);
    let custody = KeyCustody::open(provider()?.as_ref(), &Namespace::new(QUERY_NAMESPACE)?)?;
    Ok(QueryService::open(
        storage,
        ReaderKeys::from_custody(&custody),
        None,
    )?)
}

/// The store's newest history sequence (the bench's slice is placed from it).
pub fn newest_sequence(reader: &mut QueryService) -> Result<u64, RigError> {
    let request = QueryRequest::parse(&serde_json::json!({"limit": 1}))
        .map_err(|e| format!("bad request: {e:?}"))?;
    let page = reader
        .page(&request, RetentionCutoff::NONE, None)
        .map_err(|e| format!("query: {e:?}"))?;
    page.events
        .last()
        .map(|e| e.data.sequence.get())
        .ok_or_else(|| "the store is empty".into())
}

/// The slice window for a store whose newest sequence is `newest`: 50 sequences in the middle.
pub fn middle_slice(newest: u64) -> (u64, u64) {
    let since = newest / 2;
    (since, since + 49)
}

/// Round trips of `rounds` pages of `request` on `reader`, in nanoseconds, sorted; fails if
/// a page comes back with fewer than `expect_at_least` events.
pub fn time_pages(
    reader: &mut QueryService,
    request: &QueryRequest,
    rounds: usize,
    expect_at_least: usize,
) -> Result<Vec<u64>, RigError> {
    let mut took = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        let page = reader
            .page(request, RetentionCutoff::NONE, None)
            .map_err(|e| format!("query: {e:?}"))?;
        let elapsed = start.elapsed();
        if page.events.len() < expect_at_least {
            return Err(format!(
                "a page held {} events, want at least {expect_at_least}",
                page.events.len()
            )
            .into());
        }
        drop(page);
        took.push(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }
    took.sort_unstable();
    Ok(took)
}
