//! `history_query` through the Query actor against a naive oracle, hot and cold.
//!
//! Each case writes a random store through the real engine (`Engine::start_with`: an in-memory
//! credential store, a manual clock): several sessions (some ended, some left open), several
//! capabilities and applications, actions with their completions (at once, later, or never),
//! pauses, bursts that overflow a small capture queue (drop markers), clock jumps (small ones,
//! ones past the chunk age that rotate the chunk, and days that age events past retention), and
//! restarts between writer generations, each after a writer crash (a panic, so no clean stop,
//! on an engine that knows no boot id: the next generation starts above the crashed writer's
//! reservation, a gap in the sequences; a clean restart, or a crash in a known same boot,
//! leaves none). Then it runs random valid queries (every filter and combination, limits
//! 1..=200, sequence bounds on, next to and off the stored sequences, a session by raw label,
//! by opaque id, or matching nothing, the clock at an event's exact retention edge or a
//! nanosecond either side) and compares each answer with a full scan of every event read back
//! from disk, filtered, limited and ordered here in plain code from the contract (seed 000,
//! ARCHITECTURE.md section 2), never through the planner.
//!
//! Every query runs twice: through the engine that wrote the store (the Query actor's hot cache
//! holds what that engine appended), and through a fresh engine on the same store (its cache
//! starts empty: events are read by location from their chunks). Some run paged through
//! `call_tool`: each page is the oracle's page below the previous one, `has_more` exactly when
//! another follows, and the pages together are the newest matches as of the first page.
//!
//! Access records: the contract's `history_query` has no filter on event type, so every query
//! admits `access` events. Each non-empty answer appends one; the oracle predicts it (the next
//! sequence, the clock's time, the operation and count) and expects it in later answers. An
//! `Engine::status` call after each answer waits for the writer to have appended it (the
//! supervisor's `access` message reaches the writer before the status request, and the writer
//! hands the Query actor the event before it answers). After each phase the store on disk must
//! hold what the oracle predicted: one access record per non-empty read, none for an empty or
//! refused one.
//!
//! The clock only moves forwards during the queries: an event out of the retention window stays
//! out, so physical retention (which may remove a sealed chunk of such events at any time) never
//! changes an answer; the disk checks allow exactly those events to be gone.
//!
//! (The contract's query filters are `limit`, `session_id` and the two sequence bounds, plus
//! retention; event types, capabilities and applications vary in the stores but are not
//! filters.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use annal_actors::gate::ToolAnswer;
use annal_actors::{Engine, EngineConfig};
use annal_engine::capture::{
    ActionToken, CAPTURE_QUEUE_CAPACITY_EVENTS, CaptureHandle, CaptureSession,
};
use annal_engine::clock::{Clock, ManualClock};
use annal_engine::entropy::SeededEntropy;
use annal_engine::keys::{
    HistoryKeys, InMemoryProvider, KeyProvider, Namespace, RootKey, SessionIdKey,
};
use annal_engine::policy::{Principal, Refusal};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{History, StoreReader, open_store};
use annal_schema::tools::{
    DEFAULT_RETENTION_DAYS, HISTORY_QUERY_TOOL, QUERY_LIMIT_MAX_EVENTS,
    QUERY_SESSION_ID_MAX_LEN_CHARS, QueryRequest,
};
use annal_schema::{
    AccessOperation, ActionOutcome, Application, BundleId, Capability, Effect, ErrorCode, Event,
    Payload, Route,
};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use serde_json::{Map, Value, json};

/// Stores written (proptest cases).
const STORES: u32 = 20;

/// Queries per store; each runs hot and then cold, so the run checks `STORES *
/// QUERIES_PER_STORE` = 1,000 random queries twice.
const QUERIES_PER_STORE: usize = 50;

/// The fixed seed of the run: a failure reproduces with the same binary.
const PROPTEST_SEED: u64 = 0x5eed_0a11_0c1e;

/// Most shrink steps after a failure (each writes a whole store again).
const MAX_SHRINK_ITERS: u32 = 64;

/// Writer generations (engine runs) per store; each restart follows a writer crash, which
/// leaves a sequence gap.
const GENERATIONS_MAX: usize = 3;

/// Capture steps per generation.
const STEPS_PER_GENERATION_MAX: usize = 60;

/// Actions in one burst.
const BURST_MAX_ACTIONS: u8 = 80;

/// The capture queue of a store that drops under bursts, in events.
const SMALL_CAPTURE_QUEUE_EVENTS: usize = 8;

/// Time between one step (or one action of a burst) and the next: an action's start and
/// completion share their time, events of different steps never do (the writer's own events,
/// stamped when it drafts them, may fall anywhere).
const CAPTURE_TICK: Duration = Duration::from_micros(1);

/// How many of the oldest visible events a query may move the retention cutoff past.
const OLDEST_VISIBLE_PICKS: usize = 4;

/// Furthest a query moves the clock to a retention edge, in seconds.
const CUTOFF_STEP_MAX_SECS: u64 = 3_600;

/// Most pages one paged query reads.
const PAGES_MAX: u8 = 4;

/// The fixed test root key.
const ROOT: [u8; 32] = [0x3d; 32];

/// 2026-12-01T00:00:00Z.
const START: Duration = Duration::from_secs(1_796_083_200);

/// Seconds in a day.
const DAY_SECS: u64 = 86_400;

/// Past the writer's chunk age (30 minutes): a jump this long rotates the chunk.
const ROTATING_JUMP_SECS: std::ops::Range<u64> = 31 * 60..4 * 3_600;

/// Capabilities the stores' actions use.
const CAPABILITIES: [&str; 4] = [
    "input.pointer.click",
    "input.keyboard.type",
    "window.focus",
    "input.pointer.scroll",
];

/// Applications the stores' actions name (or none).
const BUNDLES: [&str; 3] = [
    "org.example.Editor",
    "org.example.Browser",
    "com.example.Mail",
];

/// Raw session labels: plain ones, one that has the opaque-id form (a query by it must match
/// the session it labels, through the keyed derivation), and the longest a query may carry.
fn label(which: usize) -> String {
    match which % LABEL_COUNT {
        0 => "alpha".to_owned(),
        1 => "a second session".to_owned(),
        2 => "0123456789abcdef0123456789abcdef".to_owned(),
        _ => "z".repeat(QUERY_SESSION_ID_MAX_LEN_CHARS),
    }
}

/// How many labels [`label`] knows.
const LABEL_COUNT: usize = 4;

// ---------------------------------------------------------------------------------------------
// Stores

/// One step of a writer generation.
#[derive(Debug, Clone)]
enum Step {
    /// The session of this label starts, or ends when it is open.
    Session(usize),
    /// An action.
    Action {
        /// Index into [`CAPABILITIES`].
        capability: usize,
        /// Index into [`BUNDLES`], or no application.
        application: Option<usize>,
        /// The session of this label it runs in (started first when it is not open).
        session: Option<usize>,
        /// When it completes.
        completion: Completion,
    },
    /// The oldest pending action completes.
    CompletePending,
    /// Actions back to back, completed at once (they overflow a small capture queue).
    Burst {
        /// How many.
        actions: u8,
        /// The session of this label they run in (started first when it is not open).
        session: Option<usize>,
    },
    /// Time passes.
    Jump(Duration),
    /// The owner pauses capture.
    Pause,
    /// The owner resumes capture.
    Resume,
    /// Everything captured so far becomes durable.
    Flush,
}

/// When an action's completion is captured.
#[derive(Debug, Clone, Copy)]
enum Completion {
    /// Right after its start.
    Now,
    /// At a later `CompletePending` step (or never, if the generation ends first).
    Later,
    /// Never (an action in flight when its engine stopped).
    Never,
}

/// What one case writes.
#[derive(Debug, Clone)]
struct StorePlan {
    /// The capture queue is [`SMALL_CAPTURE_QUEUE_EVENTS`] long (bursts drop events).
    small_queue: bool,
    /// The steps of each writer generation; an engine restart between generations.
    generations: Vec<Vec<Step>>,
}

fn jump() -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (0u64..5_000).prop_map(Duration::from_millis),
        2 => ROTATING_JUMP_SECS.prop_map(Duration::from_secs),
        1 => (DAY_SECS / 2..4 * DAY_SECS).prop_map(Duration::from_secs),
        // Sub-millisecond: events a nanosecond apart, for exact cutoffs.
        1 => (1u64..1_000).prop_map(Duration::from_nanos),
    ]
}

fn completion() -> impl Strategy<Value = Completion> {
    prop_oneof![
        6 => Just(Completion::Now),
        3 => Just(Completion::Later),
        1 => Just(Completion::Never),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let session = || prop::option::of(0..LABEL_COUNT);
    prop_oneof![
        4 => (0..LABEL_COUNT).prop_map(Step::Session),
        8 => (
            0..CAPABILITIES.len(),
            prop::option::of(0..BUNDLES.len()),
            session(),
            completion()
        )
            .prop_map(|(capability, application, session, completion)| Step::Action {
                capability,
                application,
                session,
                completion,
            }),
        2 => Just(Step::CompletePending),
        3 => (1..=BURST_MAX_ACTIONS, session())
            .prop_map(|(actions, session)| Step::Burst { actions, session }),
        4 => jump().prop_map(Step::Jump),
        1 => Just(Step::Pause),
        1 => Just(Step::Resume),
        1 => Just(Step::Flush),
    ]
}

fn store_plan() -> impl Strategy<Value = StorePlan> {
    (
        prop::bool::weighted(0.25),
        prop::collection::vec(
            prop::collection::vec(step(), 1..=STEPS_PER_GENERATION_MAX),
            1..=GENERATIONS_MAX,
        ),
    )
        .prop_map(|(small_queue, generations)| StorePlan {
            small_queue,
            generations,
        })
}

/// One case's store on disk, its key and its clock.
struct Store {
    /// Holds the store.
    _dir: tempfile::TempDir,
    /// Where the store lives.
    layout: StoreLayout,
    /// The store's namespace.
    namespace: Namespace,
    /// The credential store holding [`ROOT`].
    provider: Arc<InMemoryProvider>,
    /// Every engine's clock; the test moves it.
    clock: ManualClock,
    /// The capture queue's capacity.
    capture_capacity_events: usize,
}

impl Store {
    fn new(plan: &StorePlan) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let layout = StoreLayout::in_namespace_dir(&dir.path().join("oracle"));
        let namespace = Namespace::new("oracle").unwrap();
        let provider = Arc::new(InMemoryProvider::new(Box::new(SeededEntropy::new(7))).unwrap());
        provider
            .put_raw(&namespace, &namespace.primary_reference(), &ROOT)
            .unwrap();
        let capture_capacity_events = if plan.small_queue {
            SMALL_CAPTURE_QUEUE_EVENTS
        } else {
            CAPTURE_QUEUE_CAPACITY_EVENTS
        };
        Self {
            _dir: dir,
            layout,
            namespace,
            provider,
            clock: ManualClock::new(START),
            capture_capacity_events,
        }
    }

    fn start(&self) -> Engine {
        let mut config = EngineConfig::new(self.layout.clone(), self.namespace.clone());
        config.capture_capacity_events = self.capture_capacity_events;
        // No boot id: a writer crash's reservation is skipped, as after a power loss, so the
        // stores have the sequence gaps the queries must answer around.
        config.boot = None;
        Engine::start_with(
            config,
            Arc::clone(&self.provider) as Arc<dyn KeyProvider>,
            Arc::new(self.clock.clone()) as Arc<dyn Clock>,
            None,
        )
        .unwrap()
    }

    /// Every history event on disk, in sequence order, read with the store reader (read-only:
    /// a running engine may hold the writer lock). The store must be clean.
    fn events_on_disk(&self) -> Vec<Event> {
        let storage: Arc<dyn Storage> = Arc::new(open_store(&self.layout, Access::Read).unwrap());
        let report = StoreReader::<History>::new(storage)
            .read(&HistoryKeys::from_root(RootKey::from_bytes(ROOT)))
            .unwrap();
        assert!(!report.has_corruption(), "{report:#?}");
        assert!(!report.has_unreadable(), "{report:#?}");
        report.records().map(|r| r.event.clone()).collect()
    }

    /// How many chunk files the store holds.
    fn chunk_files(&self) -> usize {
        std::fs::read_dir(self.layout.history_root().join("chunks"))
            .unwrap()
            .count()
    }
}

fn outcome() -> ActionOutcome {
    ActionOutcome::new(Effect::Confirmed, Route::Accessibility)
}

/// Writes the plan's generations; returns the last generation's engine, still running, with
/// everything it captured durable, and the lowest sequence that engine may have appended.
fn write(store: &Store, plan: &StorePlan) -> (Engine, u64) {
    let mut engine = None;
    let mut own_from = 1;
    for (generation, steps) in plan.generations.iter().enumerate() {
        if let Some(previous) = engine.take() {
            let report = Engine::shutdown(previous);
            assert!(report.drained, "generation {generation}: {report:?}");
            own_from = store
                .events_on_disk()
                .last()
                .map_or(0, |e| e.data.sequence.get())
                + 1;
        }
        let current = store.start();
        current.enable().unwrap();
        run_generation(&current, &store.clock, steps);
        current.sync().unwrap();
        if generation + 1 < plan.generations.len() {
            crash_the_writer(&current);
        }
        engine = Some(current);
    }
    (engine.expect("at least one generation"), own_from)
}

/// Panics the writer (no clean stop, so its reservation is not released) and waits until the
/// supervisor's restarted writer answers a flush.
fn crash_the_writer(engine: &Engine) {
    engine.inject_writer_panic();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while engine.sync().is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer did not come back"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The open session of label `which`, started now if it is not open.
fn open_session<'a>(
    capture: &CaptureHandle,
    open: &'a mut [Option<CaptureSession>],
    which: usize,
) -> &'a CaptureSession {
    open[which].get_or_insert_with(|| capture.session_started(&label(which)))
}

fn run_generation(engine: &Engine, clock: &ManualClock, steps: &[Step]) {
    let capture = engine.capture();
    let mut open: Vec<Option<CaptureSession>> = (0..LABEL_COUNT).map(|_| None).collect();
    let mut pending: std::collections::VecDeque<ActionToken> = Default::default();
    for step in steps {
        match step {
            Step::Session(which) => match open[*which].take() {
                Some(session) => capture.session_ended(session),
                None => open[*which] = Some(capture.session_started(&label(*which))),
            },
            Step::Action {
                capability,
                application,
                session,
                completion,
            } => {
                let application = application
                    .and_then(|b| Application::new(Some(BundleId::new(BUNDLES[b]).unwrap()), None));
                let session = session.map(|s| open_session(&capture, &mut open, s));
                let token = capture.action_started(
                    Capability::new(CAPABILITIES[*capability]).unwrap(),
                    application,
                    session,
                );
                match completion {
                    Completion::Now => capture.action_completed(token, outcome()),
                    Completion::Later => pending.push_back(token),
                    // An action still in flight when its engine stops.
                    Completion::Never => {}
                }
            }
            Step::CompletePending => {
                if let Some(token) = pending.pop_front() {
                    capture.action_completed(token, outcome());
                }
            }
            Step::Burst { actions, session } => {
                let session = session.map(|s| open_session(&capture, &mut open, s));
                for i in 0..*actions {
                    let capability = CAPABILITIES[usize::from(i) % CAPABILITIES.len()];
                    let token =
                        capture.action_started(Capability::new(capability).unwrap(), None, session);
                    capture.action_completed(token, outcome());
                    clock.advance(CAPTURE_TICK);
                }
            }
            Step::Jump(by) => clock.advance(*by),
            // Whatever was captured reaches the writer before the owner's operation.
            Step::Pause => {
                engine.sync().unwrap();
                engine.pause().unwrap();
            }
            Step::Resume => {
                engine.sync().unwrap();
                engine.resume().unwrap();
            }
            Step::Flush => {
                engine.sync().unwrap();
            }
        }
        clock.advance(CAPTURE_TICK);
    }
}

// ---------------------------------------------------------------------------------------------
// Queries

/// A `session_id` filter, resolved against the store when the query runs.
#[derive(Debug, Clone)]
enum SessionSpec {
    /// No session filter.
    Any,
    /// The raw label of a session the stores may hold.
    Label(usize),
    /// The opaque id of a stored event's session (the nearest event that has one; the first
    /// label when none has).
    StoredId(Index),
    /// That id upper-cased: not the opaque-id form, so only a label (of nothing stored).
    UpperCasedId(Index),
    /// A label no session has.
    UnknownLabel,
    /// An opaque id no session has.
    UnknownId,
}

/// A sequence bound, resolved against the store when the query runs.
#[derive(Debug, Clone)]
enum BoundSpec {
    /// No bound.
    Open,
    /// Exactly a stored event's sequence.
    On(Index),
    /// Next to a stored event's sequence (in a gap, or past either end).
    Near(Index, i8),
    /// The first possible sequence.
    First,
    /// Past every stored sequence.
    Beyond(u16),
}

/// How the clock moves before the query runs. Only forwards, as time passes: retention is exact
/// by event time, and an event once out of the window stays out (physical retention may remove
/// its chunk), so a clock set back could not bring it back.
#[derive(Debug, Clone)]
enum ClockSpec {
    /// It stays.
    Keep,
    /// To the retention edge of one of the oldest visible events (`Oracle::oldest_visible_edges`),
    /// plus `nanos` (0: that event is still visible, the oldest that is; 1: it just left the
    /// window; -1: a nanosecond before). Where there is none, it stays.
    CutoffAt(Index, i8),
}

/// How the query is asked.
#[derive(Debug, Clone, Copy)]
enum Path {
    /// `Engine::query`, recorded as this operation.
    Owner(AccessOperation),
    /// `call_tool` as the owner, following the cursor for at most this many pages.
    Paged(u8),
}

/// One random query.
#[derive(Debug, Clone)]
struct QuerySpec {
    /// `limit` (always given, so every value 1..=200 is tried).
    limit: u8,
    /// `session_id`.
    session: SessionSpec,
    /// `since_sequence` (a reversed pair is swapped).
    since: BoundSpec,
    /// `until_sequence`.
    until: BoundSpec,
    /// The clock when it runs.
    clock: ClockSpec,
    /// How it is asked.
    path: Path,
}

fn session_spec() -> impl Strategy<Value = SessionSpec> {
    prop_oneof![
        8 => Just(SessionSpec::Any),
        4 => (0..LABEL_COUNT).prop_map(SessionSpec::Label),
        4 => any::<Index>().prop_map(SessionSpec::StoredId),
        1 => any::<Index>().prop_map(SessionSpec::UpperCasedId),
        1 => Just(SessionSpec::UnknownLabel),
        1 => Just(SessionSpec::UnknownId),
    ]
}

fn bound_spec() -> impl Strategy<Value = BoundSpec> {
    prop_oneof![
        8 => Just(BoundSpec::Open),
        3 => any::<Index>().prop_map(BoundSpec::On),
        2 => (any::<Index>(), -2i8..=2).prop_map(|(at, by)| BoundSpec::Near(at, by)),
        1 => Just(BoundSpec::First),
        1 => any::<u16>().prop_map(BoundSpec::Beyond),
    ]
}

fn clock_spec() -> impl Strategy<Value = ClockSpec> {
    prop_oneof![
        2 => Just(ClockSpec::Keep),
        1 => (any::<Index>(), -1i8..=1).prop_map(|(at, nanos)| ClockSpec::CutoffAt(at, nanos)),
    ]
}

fn path() -> impl Strategy<Value = Path> {
    prop_oneof![
        3 => Just(Path::Owner(AccessOperation::LocalCli)),
        2 => Just(Path::Owner(AccessOperation::AgentQuery)),
        2 => (2..=PAGES_MAX).prop_map(Path::Paged),
    ]
}

fn limit() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => 1..=QUERY_LIMIT_MAX_EVENTS,
        2 => 1u8..=8,
        1 => Just(QUERY_LIMIT_MAX_EVENTS),
    ]
}

fn query_spec() -> impl Strategy<Value = QuerySpec> {
    (
        limit(),
        session_spec(),
        bound_spec(),
        bound_spec(),
        clock_spec(),
        path(),
    )
        .prop_map(|(limit, session, since, until, clock, path)| QuerySpec {
            limit,
            session,
            since,
            until,
            clock,
            path,
        })
}

/// A query's filters as values, resolved against the oracle.
#[derive(Debug, Clone)]
struct Filters {
    /// At most [`QUERY_LIMIT_MAX_EVENTS`] in a request; the oracle takes any.
    limit: usize,
    /// `session_id`: a raw label or an opaque id.
    session_id: Option<String>,
    /// `since_sequence`, inclusive.
    since: Option<u64>,
    /// `until_sequence`, inclusive.
    until: Option<u64>,
}

impl Filters {
    /// The tool arguments (the contract's input).
    fn arguments(&self) -> Map<String, Value> {
        let mut arguments = Map::new();
        arguments.insert("limit".into(), json!(self.limit));
        if let Some(session) = &self.session_id {
            arguments.insert("session_id".into(), json!(session));
        }
        if let Some(since) = self.since {
            arguments.insert("since_sequence".into(), json!(since));
        }
        if let Some(until) = self.until {
            arguments.insert("until_sequence".into(), json!(until));
        }
        arguments
    }
}

// ---------------------------------------------------------------------------------------------
// The oracle

/// What the oracle expects of one event.
#[derive(Debug, Clone)]
enum Kind {
    /// An event read from disk: returned exactly.
    Stored(Box<Event>),
    /// The access record a non-empty read appended, as predicted.
    Access {
        /// How the read was recorded.
        operation: AccessOperation,
        /// How many events it returned.
        returned: usize,
    },
}

/// One event of the oracle's history.
#[derive(Debug, Clone)]
struct Expected {
    /// Its sequence (the history's order).
    sequence: u64,
    /// Event time since the epoch (retention compares it).
    time: Duration,
    /// The keyed session id, when the event has one.
    session: Option<[u8; 16]>,
    /// What is expected of it.
    kind: Kind,
}

impl Expected {
    /// An event read back from disk.
    fn stored(event: Event) -> Self {
        Self {
            sequence: event.data.sequence.get(),
            time: event.time.since_epoch(),
            session: event.data.session_id.as_ref().map(|id| id.to_bytes()),
            kind: Kind::Stored(Box::new(event)),
        }
    }

    /// The access record of a read that returned `returned` events, at `time`.
    fn access(sequence: u64, time: Duration, operation: AccessOperation, returned: usize) -> Self {
        Self {
            sequence,
            time,
            session: None,
            kind: Kind::Access {
                operation,
                returned,
            },
        }
    }

    /// Whether `event` is what this expects.
    fn is(&self, event: &Event) -> bool {
        match &self.kind {
            Kind::Stored(stored) => **stored == *event,
            Kind::Access {
                operation,
                returned,
            } => {
                event.data.sequence.get() == self.sequence
                    && event.time.since_epoch() == self.time
                    && event.data.session_id.is_none()
                    && event.subject.as_str() == "access"
                    && matches!(
                        &event.data.payload,
                        Payload::Access { operation: o, returned_events: r }
                            if o == operation && usize::from(r.get()) == *returned
                    )
            }
        }
    }
}

/// The full history as the contract says a query sees it, and the query semantics as a full
/// scan.
struct Oracle {
    /// Every event, ascending by sequence.
    history: Vec<Expected>,
    /// The next record's sequence is the last one's plus one. False until this engine's writer
    /// appended something: a writer opened after a restart starts above the journal's
    /// reservation.
    next_known: bool,
    /// The retention window.
    retention: Duration,
    /// The namespace's session-id key (the keyed derivation of a raw label).
    session_key: SessionIdKey,
}

/// The bytes of `value` when it has the contract's opaque-id form: 32 lower-case hex digits.
fn opaque_id_bytes(value: &str) -> Option<[u8; 16]> {
    let digits = value.as_bytes();
    if digits.len() != 32
        || !digits
            .iter()
            .all(|d| matches!(d, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    let nibble = |d: u8| {
        if d.is_ascii_digit() {
            d - b'0'
        } else {
            d - b'a' + 10
        }
    };
    let mut bytes = [0u8; 16];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = nibble(digits[2 * i]) << 4 | nibble(digits[2 * i + 1]);
    }
    Some(bytes)
}

impl Oracle {
    /// The history the store reader read back.
    fn from_disk(events: Vec<Event>) -> Self {
        let history: Vec<Expected> = events.into_iter().map(Expected::stored).collect();
        assert!(
            history.windows(2).all(|w| w[0].sequence < w[1].sequence),
            "the reader returns strictly increasing sequences"
        );
        let session_key = RootKey::from_bytes(ROOT).session_id_key();
        // The derivation here is the writer's: every stored session id is one of the labels'.
        let keyed: Vec<[u8; 16]> = (0..LABEL_COUNT)
            .map(|l| session_key.session_id(&label(l)).to_bytes())
            .collect();
        assert!(
            history
                .iter()
                .filter_map(|e| e.session)
                .all(|s| keyed.contains(&s))
        );
        Self {
            history,
            next_known: false,
            retention: Duration::from_secs(u64::from(DEFAULT_RETENTION_DAYS) * DAY_SECS),
            session_key,
        }
    }

    /// The stored event `at` picks (the history is never empty: the enable is recorded).
    fn pick(&self, at: &Index) -> &Expected {
        &self.history[at.index(self.history.len())]
    }

    /// The newest sequence (0 for none).
    fn last_sequence(&self) -> u64 {
        self.history.last().map_or(0, |e| e.sequence)
    }

    /// A sequence bound's value against the current history.
    fn bound(&self, spec: &BoundSpec) -> Option<u64> {
        match spec {
            BoundSpec::Open => None,
            BoundSpec::On(at) => Some(self.pick(at).sequence),
            BoundSpec::Near(at, by) => Some(
                self.pick(at)
                    .sequence
                    .saturating_add_signed(i64::from(*by))
                    .max(1),
            ),
            BoundSpec::First => Some(1),
            BoundSpec::Beyond(by) => Some(self.last_sequence() + 1 + u64::from(*by)),
        }
    }

    /// A session filter's value against the current history.
    fn session(&self, spec: &SessionSpec) -> Option<String> {
        let stored_id = |at: &Index| {
            let start = at.index(self.history.len());
            // The nearest event at or after `at` (wrapping) that has a session, if any does.
            let found = self.history[start..]
                .iter()
                .chain(&self.history[..start])
                .find_map(|e| e.session);
            found.map(|bytes| {
                annal_schema::OpaqueId::from_bytes(bytes)
                    .as_str()
                    .to_owned()
            })
        };
        match spec {
            SessionSpec::Any => None,
            SessionSpec::Label(which) => Some(label(*which)),
            SessionSpec::StoredId(at) => stored_id(at).or_else(|| Some(label(0))),
            SessionSpec::UpperCasedId(at) => {
                Some(stored_id(at).map_or("NOT-A-SESSION".into(), |id| id.to_uppercase()))
            }
            SessionSpec::UnknownLabel => Some("a label no session has".into()),
            SessionSpec::UnknownId => Some("f".repeat(32)),
        }
    }

    /// The query's filters against the current history; bounds in the wrong order are swapped
    /// (this test runs valid queries; the refusal is checked once per phase).
    fn filters(&self, spec: &QuerySpec) -> Filters {
        let (mut since, mut until) = (self.bound(&spec.since), self.bound(&spec.until));
        if let (Some(s), Some(u)) = (since, until)
            && s > u
        {
            (since, until) = (Some(u), Some(s));
        }
        Filters {
            limit: usize::from(spec.limit),
            session_id: self.session(&spec.session),
            since,
            until,
        }
    }

    /// The clock reading the query runs at, from the current one (`now`), and whether it is
    /// an event's exact retention edge.
    fn now(&self, spec: &ClockSpec, now: Duration) -> (Duration, bool) {
        match spec {
            ClockSpec::Keep => (now, false),
            ClockSpec::CutoffAt(at, nanos) => {
                let edges =
                    self.oldest_visible_edges(now, Duration::from_secs(CUTOFF_STEP_MAX_SECS));
                match edges.get(at.index(edges.len().max(1))) {
                    Some(edge) => {
                        let at = match nanos {
                            ..0 => edge.saturating_sub(Duration::from_nanos(1)),
                            0 => *edge,
                            _ => *edge + Duration::from_nanos(1),
                        };
                        (at.max(now), at >= now)
                    }
                    None => (now, false),
                }
            }
        }
    }

    /// The clock readings at which one of the [`OLDEST_VISIBLE_PICKS`] oldest events visible
    /// at `now` is the oldest still visible, at most `within` after `now`.
    fn oldest_visible_edges(&self, now: Duration, within: Duration) -> Vec<Duration> {
        let cutoff = now.saturating_sub(self.retention);
        let mut edges: Vec<Duration> = self
            .history
            .iter()
            .filter(|e| e.time >= cutoff)
            .map(|e| e.time + self.retention)
            .filter(|edge| edge.saturating_sub(now) <= within)
            .collect();
        edges.sort_unstable();
        edges.truncate(OLDEST_VISIBLE_PICKS);
        edges
    }

    /// The contract over a full scan: every filter (inclusive bounds, the session by keyed
    /// label or by opaque id, retention exact by event time; `below` is the paging bound,
    /// exclusive), the newest `limit`, ascending. Also whether older matches remain.
    fn answer(&self, filters: &Filters, now: Duration, below: Option<u64>) -> Answer<'_> {
        let cutoff = now.saturating_sub(self.retention);
        let session = filters.session_id.as_deref().map(|value| {
            (
                self.session_key.session_id(value).to_bytes(),
                opaque_id_bytes(value),
            )
        });
        let admitted: Vec<&Expected> = self
            .history
            .iter()
            .filter(|e| filters.since.is_none_or(|s| e.sequence >= s))
            .filter(|e| filters.until.is_none_or(|u| e.sequence <= u))
            .filter(|e| below.is_none_or(|b| e.sequence < b))
            .filter(|e| match (&session, e.session) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some((as_label, as_id)), Some(s)) => s == *as_label || Some(s) == *as_id,
            })
            .collect();
        let matching: Vec<&Expected> = admitted
            .iter()
            .copied()
            .filter(|e| e.time >= cutoff)
            .collect();
        let skip = matching.len().saturating_sub(filters.limit);
        Answer {
            events: matching[skip..].to_vec(),
            has_more: skip > 0,
            cut_by_retention: matching.len() < admitted.len(),
        }
    }

    /// A non-empty read appended its access record (at the clock's reading).
    fn read_returned(&mut self, operation: AccessOperation, returned: usize, now: Duration) {
        if returned == 0 {
            return;
        }
        assert!(self.next_known);
        let sequence = self.last_sequence() + 1;
        self.history
            .push(Expected::access(sequence, now, operation, returned));
    }

    /// What the store on disk must hold at `now`: the oracle's history, except events already
    /// out of the retention window (physical retention may have removed their chunks), and
    /// nothing else.
    fn check_disk(&self, disk: &[Event], now: Duration, at: &str) {
        let cutoff = now.saturating_sub(self.retention);
        let mut on_disk = disk.iter().peekable();
        for expected in &self.history {
            match on_disk.next_if(|e| e.data.sequence.get() == expected.sequence) {
                Some(event) => assert!(expected.is(event), "{at}: {event:?} is not {expected:?}"),
                None => assert!(
                    expected.time < cutoff,
                    "{at}: {expected:?} is visible but not on disk"
                ),
            }
        }
        let unexpected: Vec<&Event> = on_disk.collect();
        assert!(
            unexpected.is_empty(),
            "{at}: unpredicted events {unexpected:?}"
        );
    }
}

/// What the oracle answers.
struct Answer<'a> {
    /// The events, ascending.
    events: Vec<&'a Expected>,
    /// Older matches remain.
    has_more: bool,
    /// Retention left out an event every other filter admitted.
    cut_by_retention: bool,
}

/// `got` is exactly `expected`, in order.
fn check_answer(got: &[Event], expected: &[&Expected], context: &str) {
    let sequences = |events: &[Event]| {
        events
            .iter()
            .map(|e| e.data.sequence.get())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        sequences(got),
        expected.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        "{context}"
    );
    for (event, expected) in got.iter().zip(expected) {
        assert!(
            expected.is(event),
            "{context}: {event:?} is not {expected:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Running queries

/// Which engine answers.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// The engine that wrote the store.
    Hot,
    /// A fresh engine on the same store.
    Cold,
}

/// How much of the contract the run exercised. Checked at the end against floors, so a
/// generator or an engine change that drifts into trivial stores or empty answers fails instead
/// of passing vacuously. The answer counts are of non-empty answers (pages included).
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    /// Valid queries answered, hot and cold (a paged one counts once).
    queries: u64,
    /// Answers holding at least one event.
    non_empty: u64,
    /// Answers the limit cut short (older matches remained).
    cut_by_limit: u64,
    /// Pages read through a cursor.
    cursor_pages: u64,
    /// Answers from which retention left out an event every other filter admitted.
    cut_by_retention: u64,
    /// Queries run with the clock at an event's exact retention edge (or a nanosecond past).
    at_retention_edges: u64,
    /// Answers holding the access record of an earlier read.
    with_access_records: u64,
    /// Hot answers holding events the answering engine appended (its hot cache).
    from_hot_cache: u64,
    /// Answers holding events written before the answering engine started (read from disk).
    from_disk: u64,
    /// Answers to a session filter by raw label.
    by_label: u64,
    /// Answers to a session filter by opaque id.
    by_id: u64,
    /// Stores whose sequences have a gap.
    stores_with_gaps: u64,
    /// Stores of more than one chunk.
    stores_with_chunks: u64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.queries += other.queries;
        self.non_empty += other.non_empty;
        self.cut_by_limit += other.cut_by_limit;
        self.cursor_pages += other.cursor_pages;
        self.cut_by_retention += other.cut_by_retention;
        self.at_retention_edges += other.at_retention_edges;
        self.with_access_records += other.with_access_records;
        self.from_hot_cache += other.from_hot_cache;
        self.from_disk += other.from_disk;
        self.by_label += other.by_label;
        self.by_id += other.by_id;
        self.stores_with_gaps += other.stores_with_gaps;
        self.stores_with_chunks += other.stores_with_chunks;
    }
}

/// One phase's queries: the engine answering them and what the answers are compared with.
struct Run<'a> {
    /// Which engine this is.
    phase: Phase,
    /// The store (its clock; read back from disk).
    store: &'a Store,
    /// The engine answering.
    engine: &'a Engine,
    /// What the answers must be.
    oracle: &'a mut Oracle,
    /// The lowest sequence this engine may have appended (everything below was on disk when
    /// it started).
    own_from: u64,
    /// What the answers exercised.
    tally: &'a mut Tally,
}

impl Run<'_> {
    /// Runs every query, each against the oracle, then one refused query.
    fn queries(&mut self, queries: &[QuerySpec]) {
        for (n, spec) in queries.iter().enumerate() {
            let current = self.store.clock.now_since_epoch();
            let (now, at_edge) = self.oracle.now(&spec.clock, current);
            self.store.clock.advance(now - current);
            self.tally.at_retention_edges += u64::from(at_edge);
            let filters = self.oracle.filters(spec);
            let context = format!(
                "{:?} query {n}: {spec:?} {filters:?} at {now:?}",
                self.phase
            );
            match spec.path {
                Path::Owner(operation) => {
                    let request = QueryRequest::parse(&Value::Object(filters.arguments())).unwrap();
                    let got = self.engine.query(request, operation).unwrap();
                    let expected = self.oracle.answer(&filters, now, None);
                    check_answer(&got.events, &expected.events, &context);
                    let engine = (self.phase, self.own_from);
                    Self::count(self.tally, engine, spec, &expected, &got.events);
                    self.appended(operation, got.events.len(), now);
                }
                Path::Paged(pages) => self.paged(spec, &filters, pages, now, &context),
            }
            self.tally.queries += 1;
        }
        // A reversed range is refused and reads nothing (no access record: the phase's disk
        // check).
        let refused = self.engine.call_tool(
            &Principal::Owner,
            HISTORY_QUERY_TOOL,
            &json!({"since_sequence": 2, "until_sequence": 1}),
        );
        assert_eq!(
            refused.err(),
            Some(Refusal::Contract(ErrorCode::InvalidHistoryQueryRange))
        );
    }

    /// A query through `call_tool`, following its cursor for at most `pages` pages: each page
    /// is the oracle's page below the previous one, `has_more` exactly when another follows,
    /// and together they are the newest matches as of the first page.
    fn paged(
        &mut self,
        spec: &QuerySpec,
        filters: &Filters,
        pages: u8,
        now: Duration,
        context: &str,
    ) {
        let unpaged = Filters {
            limit: filters.limit * usize::from(pages),
            ..filters.clone()
        };
        let unpaged: Vec<Expected> = self
            .oracle
            .answer(&unpaged, now, None)
            .events
            .into_iter()
            .cloned()
            .collect();
        let mut collected: Vec<Event> = Vec::new();
        let mut cursor: Option<String> = None;
        let mut below = None;
        for page in 0..pages {
            let context = format!("{context} page {page}");
            let mut arguments = filters.arguments();
            if let Some(cursor) = cursor.take() {
                arguments.insert("cursor".into(), json!(cursor));
                self.tally.cursor_pages += 1;
            }
            let answer = self
                .engine
                .call_tool(
                    &Principal::Owner,
                    HISTORY_QUERY_TOOL,
                    &Value::Object(arguments),
                )
                .unwrap();
            let ToolAnswer::Query {
                response,
                cursor: next,
            } = answer
            else {
                panic!("{context}: not a query answer");
            };
            let expected = self.oracle.answer(filters, now, below);
            check_answer(&response.events, &expected.events, &context);
            assert_eq!(next.is_some(), expected.has_more, "{context}: has_more");
            let engine = (self.phase, self.own_from);
            Self::count(self.tally, engine, spec, &expected, &response.events);
            self.appended(AccessOperation::LocalCli, response.events.len(), now);
            let mut older = response.events;
            below = older.first().map(|e| e.data.sequence.get());
            older.extend(collected);
            collected = older;
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        // Every match when the pages ran out, else `limit` times the pages read.
        let together: Vec<&Expected> = unpaged
            .iter()
            .skip(unpaged.len().saturating_sub(collected.len()))
            .collect();
        check_answer(
            &collected,
            &together,
            &format!("{context}: the pages together"),
        );
    }

    /// Tallies what one (checked) answer of `phase` exercised.
    fn count(
        tally: &mut Tally,
        (phase, own_from): (Phase, u64),
        spec: &QuerySpec,
        expected: &Answer<'_>,
        got: &[Event],
    ) {
        if got.is_empty() {
            return;
        }
        tally.non_empty += 1;
        tally.cut_by_limit += u64::from(expected.has_more);
        tally.cut_by_retention += u64::from(expected.cut_by_retention);
        tally.with_access_records += u64::from(
            expected
                .events
                .iter()
                .any(|e| matches!(e.kind, Kind::Access { .. })),
        );
        let own = got.iter().any(|e| e.data.sequence.get() >= own_from);
        tally.from_hot_cache += u64::from(own && matches!(phase, Phase::Hot));
        tally.from_disk += u64::from(got.iter().any(|e| e.data.sequence.get() < own_from));
        tally.by_label += u64::from(matches!(spec.session, SessionSpec::Label(_)));
        tally.by_id += u64::from(matches!(spec.session, SessionSpec::StoredId(_)));
    }

    /// After an answer of `returned` events: the oracle expects its access record, and the
    /// writer has appended it before the next query (a status call is answered by the writer
    /// after the access message the supervisor sent it first). Until this engine's writer
    /// appended a record its next sequence is unknown here (a writer opened after a restart
    /// starts above the journal's reservation), so the store is flushed and read again instead.
    fn appended(&mut self, operation: AccessOperation, returned: usize, now: Duration) {
        if returned == 0 {
            return;
        }
        if self.oracle.next_known {
            self.oracle.read_returned(operation, returned, now);
            self.engine.status().unwrap();
            return;
        }
        self.engine.sync().unwrap();
        let disk = self.store.events_on_disk();
        // One new record, this access record, above every sequence before it (a sync appends
        // none); everything else as predicted.
        let last = self.oracle.last_sequence();
        let new: Vec<&Event> = disk
            .iter()
            .filter(|e| e.data.sequence.get() > last)
            .collect();
        let [access] = new[..] else {
            panic!("one access record expected: {new:?}");
        };
        let sequence = access.data.sequence.get();
        self.oracle
            .history
            .push(Expected::access(sequence, now, operation, returned));
        self.oracle
            .check_disk(&disk, now, "this engine's first access record");
        self.oracle.next_known = true;
    }
}

/// One case: write the store, query it hot, restart, query it cold; the disk as predicted after
/// each phase.
fn check_store(plan: &StorePlan, queries: &[QuerySpec]) -> Tally {
    let mut tally = Tally::default();
    let store = Store::new(plan);
    let (engine, own_from) = write(&store, plan);
    assert_eq!(
        engine.status().unwrap().retention_days,
        DEFAULT_RETENTION_DAYS
    );
    let mut oracle = Oracle::from_disk(store.events_on_disk());
    // The queries start with the oldest visible event at the window's edge, so the edges the
    // clock moves to are near.
    let now = store.clock.now_since_epoch();
    if let Some(edge) = oracle.oldest_visible_edges(now, Duration::MAX).first() {
        store.clock.advance(edge.saturating_sub(now));
    }
    tally.stores_with_gaps += u64::from(
        oracle
            .history
            .windows(2)
            .any(|w| w[1].sequence != w[0].sequence + 1),
    );
    tally.stores_with_chunks += u64::from(store.chunk_files() > 1);
    Run {
        phase: Phase::Hot,
        store: &store,
        engine: &engine,
        oracle: &mut oracle,
        own_from,
        tally: &mut tally,
    }
    .queries(queries);
    let report = engine.shutdown();
    assert!(report.drained, "{report:?}");
    let now = store.clock.now_since_epoch();
    oracle.check_disk(&store.events_on_disk(), now, "after the hot queries");

    let engine = store.start();
    oracle.next_known = false;
    Run {
        phase: Phase::Cold,
        store: &store,
        engine: &engine,
        own_from: oracle.last_sequence() + 1,
        oracle: &mut oracle,
        tally: &mut tally,
    }
    .queries(queries);
    let report = engine.shutdown();
    assert!(report.drained, "{report:?}");
    let now = store.clock.now_since_epoch();
    oracle.check_disk(&store.events_on_disk(), now, "after the cold queries");
    tally
}

/// Random queries over random stores agree with a full scan, through the hot cache and through
/// reads from disk, paged or not, with their access records.
#[test]
fn random_queries_agree_with_a_full_scan_hot_and_cold() {
    let mut runner = TestRunner::new(Config {
        cases: STORES,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(PROPTEST_SEED),
        max_shrink_iters: MAX_SHRINK_ITERS,
        ..Config::default()
    });
    let total = std::cell::RefCell::new(Tally::default());
    let strategy = (
        store_plan(),
        prop::collection::vec(query_spec(), QUERIES_PER_STORE),
    );
    let result = runner.run(&strategy, |(plan, queries)| {
        let tally = check_store(&plan, &queries);
        total.borrow_mut().add(&tally);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    let total = total.into_inner();
    eprintln!("query oracle: {total:?}");
    // Both phases ran every query, and the run reached each part of the contract.
    assert_eq!(
        total.queries,
        2 * u64::from(STORES) * QUERIES_PER_STORE as u64
    );
    for (what, count, floor) in [
        ("non-empty answers", total.non_empty, total.queries / 2),
        ("answers cut by the limit", total.cut_by_limit, 300),
        ("pages through a cursor", total.cursor_pages, 100),
        ("answers cut by retention", total.cut_by_retention, 150),
        ("queries at a retention edge", total.at_retention_edges, 150),
        (
            "answers with access records",
            total.with_access_records,
            200,
        ),
        ("answers from the hot cache", total.from_hot_cache, 200),
        ("answers from disk", total.from_disk, 300),
        ("answers by raw label", total.by_label, 80),
        ("answers by opaque id", total.by_id, 100),
        ("stores with sequence gaps", total.stores_with_gaps, 4),
        ("stores of several chunks", total.stores_with_chunks, 6),
    ] {
        assert!(count >= floor, "{what}: {count} < {floor} ({total:?})");
    }
}
