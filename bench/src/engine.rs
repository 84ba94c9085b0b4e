//! Streams of captured events through the real [`Engine`], for the `append` bench and the
//! `engine_stream` example: a fresh store in a temporary directory, an enabled engine with the
//! default [`EngineConfig`], one producer that never overflows the capture queue, and a check of
//! what was written.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use annal_actors::{Engine, EngineConfig};
use annal_engine::capture::Admission;
use annal_engine::entropy::OsEntropy;
use annal_engine::keys::{InMemoryProvider, KeyProvider, Namespace};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{History, StoreReader, open_store};
use annal_schema::{
    Application, BundleId, Capability, DisplayName, Event, HealthCategory, Payload, SessionPhase,
};

use crate::{BENCH_ROOT_KEY, bench_keys};

/// How long the producer sleeps while the queue is over its headroom.
pub const PRODUCER_BACKOFF: std::time::Duration = std::time::Duration::from_micros(20);

/// The producer yields while more than capacity * this / [`HEADROOM_DENOMINATOR`] events wait
/// in the capture queue, so it never overflows it.
pub const HEADROOM_NUMERATOR: usize = 3;

/// See [`HEADROOM_NUMERATOR`].
pub const HEADROOM_DENOMINATOR: usize = 4;

/// Name of the store's namespace directory (and namespace) inside the temporary directory.
const NAMESPACE: &str = "work";

/// The errors of this module: set-up failures and failed checks, as text.
pub type RigError = Box<dyn std::error::Error + Send + Sync>;

/// A running, enabled engine on a fresh store in a temporary directory.
pub struct EngineRig {
    /// Keeps the store's directory alive until the rig is dropped.
    _dir: tempfile::TempDir,
    /// Where the store is (read back after shutdown).
    layout: StoreLayout,
    /// The engine.
    pub engine: Engine,
    /// Capacity of the engine's capture queue, in events.
    pub capacity_events: usize,
}

impl EngineRig {
    /// Starts an engine with the default configuration on a fresh store whose root key is
    /// [`BENCH_ROOT_KEY`] (in an in-memory credential store, so the history can be read back),
    /// and enables it.
    pub fn start() -> Result<Self, RigError> {
        Self::start_with(|_| {})
    }

    /// [`EngineRig::start`] with the configuration changed by `tune` first (its telemetry,
    /// say).
    pub fn start_with(tune: impl FnOnce(&mut EngineConfig)) -> Result<Self, RigError> {
        let dir = tempfile::tempdir()?;
        let layout = StoreLayout::in_namespace_dir(&dir.path().join(NAMESPACE));
        let namespace = Namespace::new(NAMESPACE)?;
        let provider = InMemoryProvider::new(Box::new(OsEntropy))?;
        provider.put_raw(&namespace, &namespace.primary_reference(), &BENCH_ROOT_KEY)?;
        let mut config = EngineConfig::new(layout.clone(), namespace);
        tune(&mut config);
        let capacity_events = config.capture_capacity_events;
        let keys: Arc<dyn KeyProvider> = Arc::new(provider);
        let engine = Engine::start(config, keys)?;
        engine.enable()?;
        Ok(Self {
            _dir: dir,
            layout,
            engine,
            capacity_events,
        })
    }

    /// Checks nothing was dropped and health is `ready`, shuts the engine down (it must drain),
    /// reads the history back and checks it holds exactly `events` action starts and `sessions`
    /// session starts (see [`check_history`]).
    pub fn finish(self, events: usize, sessions: usize) -> Result<(), RigError> {
        let status = self.engine.status()?;
        if status.dropped_events != 0 || status.health != HealthCategory::Ready {
            return Err(format!("after the stream: {status:?}").into());
        }
        let report = self.engine.shutdown();
        if !report.drained {
            return Err(format!("shutdown did not drain: {report:?}").into());
        }
        check_history(&self.layout, events, sessions)
    }
}

/// Reads every history event of the store at `layout` and checks: no corruption, exactly
/// `events` action starts and `sessions` session starts, no drop marker, sequences strictly
/// increasing.
pub fn check_history(layout: &StoreLayout, events: usize, sessions: usize) -> Result<(), RigError> {
    let storage: Arc<dyn Storage> = Arc::new(open_store(layout, Access::Read)?);
    let report = StoreReader::<History>::new(storage).read(&bench_keys())?;
    if report.has_corruption() {
        return Err(format!("corrupt history: {report:#?}").into());
    }
    let read: Vec<&Event> = report.records().map(|r| &r.event).collect();
    let starts = read
        .iter()
        .filter(|e| matches!(e.data.payload, Payload::ActionStarted))
        .count();
    let started = read
        .iter()
        .filter(|e| {
            matches!(
                e.data.payload,
                Payload::Session {
                    phase: SessionPhase::Started
                }
            )
        })
        .count();
    let markers = read
        .iter()
        .filter(|e| {
            matches!(
                e.data.payload,
                Payload::Health {
                    category: HealthCategory::EventsDropped,
                    ..
                }
            )
        })
        .count();
    if starts != events || started != sessions || markers != 0 {
        return Err(format!(
            "read back {starts} action starts (want {events}), {started} session starts \
             (want {sessions}), {markers} drop markers (want 0)"
        )
        .into());
    }
    if !read
        .windows(2)
        .all(|w| w[0].data.sequence.get() < w[1].data.sequence.get())
    {
        return Err("sequences not strictly increasing".into());
    }
    Ok(())
}

/// One flush of the flusher thread.
#[derive(Debug, Clone, Copy)]
pub struct Commit {
    /// When it was called, since the first capture.
    pub at: Duration,
    /// Its round trip (drain the queue, append, sync, reply).
    pub took: Duration,
}

/// What one stream measured.
#[derive(Debug, Clone)]
pub struct Stream {
    /// Events captured.
    pub events: usize,
    /// First capture to the last.
    pub captured: Duration,
    /// First capture to the return of the flush after the last.
    pub durable: Duration,
    /// The flusher thread's flushes (empty without one).
    pub commits: Vec<Commit>,
}

impl Stream {
    /// Durable events per second.
    pub fn events_per_s(&self) -> f64 {
        self.events as f64 / self.durable.as_secs_f64()
    }
}

/// One producer captures `events` `action_started` events (an application, a session) into
/// `engine` back to back, yielding while the capture queue (of `capacity_events`) is over its
/// headroom, then flushes; with `flusher`, a second thread flushes back to back meanwhile.
pub fn stream(
    engine: &Engine,
    capacity_events: usize,
    events: usize,
    flusher: bool,
) -> Result<Stream, RigError> {
    let capture = engine.capture();
    let capability = Capability::new("window.frame.set")?;
    let application = Application::new(
        Some(BundleId::new("org.gnome.Settings")?),
        Some(DisplayName::new("Settings")?),
    );
    let headroom = capacity_events * HEADROOM_NUMERATOR / HEADROOM_DENOMINATOR;
    let session = capture.session_started("bench-agent-session");
    if session.started() != Admission::Accepted {
        return Err("the session start was not accepted".into());
    }
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let measured = thread::scope(|scope| -> Result<Stream, RigError> {
        let flushes = flusher.then(|| {
            scope.spawn(|| -> Result<Vec<Commit>, String> {
                let mut commits = Vec::new();
                while !done.load(Ordering::Acquire) {
                    let at = start.elapsed();
                    engine.sync().map_err(|e| e.to_string())?;
                    commits.push(Commit {
                        at,
                        took: start.elapsed() - at,
                    });
                }
                Ok(commits)
            })
        });
        let produced = produce(engine, &capture, &session, headroom, events, || {
            (capability.clone(), application.clone())
        });
        let captured = start.elapsed();
        let flushed = engine.sync();
        let durable = start.elapsed();
        done.store(true, Ordering::Release);
        let commits = match flushes {
            Some(f) => f.join().map_err(|_| "the flusher panicked")??,
            None => Vec::new(),
        };
        produced?;
        flushed?;
        Ok(Stream {
            events,
            captured,
            durable,
            commits,
        })
    });
    // Ended after the measurement (its event is drained by the shutdown).
    capture.session_ended(session);
    measured
}

/// The producer loop of [`stream`].
fn produce(
    engine: &Engine,
    capture: &annal_engine::capture::CaptureHandle,
    session: &annal_engine::capture::CaptureSession,
    headroom: usize,
    events: usize,
    arguments: impl Fn() -> (Capability, Option<Application>),
) -> Result<(), RigError> {
    for _ in 0..events {
        // A producer that re-offers on a full queue, as a bulk import would: it backs off
        // with a short sleep rather than spinning, so on a 2-core machine it does not starve
        // the engine's threads and the measured commits are the engine's, not the scheduler's.
        while engine.queued_events() > headroom {
            thread::sleep(PRODUCER_BACKOFF);
        }
        let (capability, application) = arguments();
        let token = capture.action_started(capability, application, Some(session));
        let admission = token.admission();
        drop(token);
        if admission != Admission::Accepted {
            return Err(format!("a start was {admission:?}").into());
        }
    }
    Ok(())
}

/// Starts a rig, runs one [`stream`] on it, and checks what was written.
pub fn run_stream(events: usize, flusher: bool) -> Result<Stream, RigError> {
    run_stream_with(events, flusher, |_| {})
}

/// [`run_stream`] on a rig whose configuration `tune` changed.
pub fn run_stream_with(
    events: usize,
    flusher: bool,
    tune: impl FnOnce(&mut EngineConfig),
) -> Result<Stream, RigError> {
    let rig = EngineRig::start_with(tune)?;
    let measured = stream(&rig.engine, rig.capacity_events, events, flusher)?;
    rig.finish(events, 1)?;
    Ok(measured)
}
