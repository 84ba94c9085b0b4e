//! The embeddable engine end to end: capture -> ingress -> writer -> journal, through the real
//! actor tree, against a real store in a temp dir (and a fault-injecting storage).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod embedded;

use std::sync::Arc;
use std::time::{Duration, Instant};

use annal_actors::{Engine, EngineConfig, EngineError};
use annal_engine::keys::{HistoryKeys, KeyProvider, Namespace, RootKey};
use annal_engine::storage::{Access, FaultKind, FaultOp, FaultyStorage, Storage, SyncFailure};
use annal_engine::store::{History, StoreReader, open_store};
use annal_schema::{ActionOutcome, Capability, Effect, Event, HealthCategory, Payload, Route};
use embedded::{ROOT, TestStore};

/// Seconds in a day (retention is set in days).
const DAY_SECS: u64 = 86_400;

/// A manual clock at a fixed instant of late 2025, for the tests that move time.
fn test_clock() -> annal_engine::clock::ManualClock {
    annal_engine::clock::ManualClock::new(Duration::from_secs(1_764_540_000))
}

type Setup = TestStore;

fn setup() -> Setup {
    TestStore::new()
}

impl TestStore {
    /// [`TestStore::config`] with no drain tick: nothing drains the queue behind the test's
    /// back, only a flush (or shutdown) does.
    fn config_drained_by_flush_only(&self) -> EngineConfig {
        let mut config = self.config();
        config.drain_tick = Duration::from_secs(600);
        config.drain_idle_tick = Duration::from_secs(600);
        config
    }

    /// [`TestStore::start`] on a test's manual clock.
    fn start_on(&self, clock: &annal_engine::clock::ManualClock) -> Engine {
        Engine::start_with(
            self.config(),
            Arc::clone(&self.provider) as Arc<dyn KeyProvider>,
            Arc::new(clock.clone()),
            None,
        )
        .unwrap()
    }
}

fn click() -> Capability {
    Capability::new("input.pointer.click").unwrap()
}

fn outcome() -> ActionOutcome {
    ActionOutcome::new(Effect::Confirmed, Route::Accessibility)
}

fn action_events(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e.data.payload, Payload::ActionStarted))
        .count()
}

fn drop_markers(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| match e.data.payload {
            Payload::Health {
                category: HealthCategory::EventsDropped,
                count,
            } => Some(count),
            _ => None,
        })
        .collect()
}

fn assert_strictly_increasing(events: &[Event]) {
    let sequences: Vec<u64> = events.iter().map(|e| e.data.sequence.get()).collect();
    assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");
}

#[test]
fn a_store_another_writer_holds_is_refused_at_start_and_starts_once_released() {
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    // A second engine on the same store, while the first holds its writer lock.
    let second = Engine::start(s.config(), Arc::clone(&s.provider) as Arc<dyn KeyProvider>);
    assert_eq!(second.err(), Some(annal_actors::EngineError::StoreLocked));
    // So is any other writer (the reference's, or an offline repair).
    engine.shutdown();
    let holder = open_store(&s.layout, Access::Write).unwrap();
    let refused = Engine::start(s.config(), Arc::clone(&s.provider) as Arc<dyn KeyProvider>);
    assert_eq!(refused.err(), Some(annal_actors::EngineError::StoreLocked));
    drop(holder);
    let engine = s.start_with(s.config());
    assert!(engine.status().unwrap().enabled);
    engine.shutdown();
}

#[test]
fn nothing_is_captured_before_the_owner_enables_and_admission_is_separate() {
    let s = setup();
    let engine = s.start_with(s.config());
    let status = engine.status().unwrap();
    assert!(!status.enabled);
    assert_eq!(status.health, HealthCategory::Disabled);
    let _ = engine.capture().action_started(click(), None, None);
    engine.flush().ok();
    assert_eq!(
        engine.status().unwrap().dropped_events,
        0,
        "not admitted is not dropped"
    );
    engine.shutdown();

    // Admitted = false: enabling persists the owner's choice, but nothing is captured.
    let mut config = s.config();
    config.admitted = false;
    let engine = s.start_with(config);
    let status = engine.enable().unwrap();
    assert!(status.enabled && !status.admitted);
    assert_eq!(status.health, HealthCategory::NotAdmitted);
    let _ = engine.capture().action_started(click(), None, None);
    engine.flush().unwrap();
    engine.shutdown();
    assert_eq!(action_events(&s.events()), 0);
}

#[test]
fn eight_threads_below_capacity_against_a_slow_drain_drop_nothing() {
    let s = setup();
    let mut config = s.config();
    // A drain that looks only every 200 ms: the queue holds everything meanwhile.
    config.drain_tick = Duration::from_millis(200);
    let engine = s.start_with(config);
    engine.enable().unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let capture = engine.capture();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let token = capture.action_started(click(), None, None);
                    drop(token);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let status = engine.flush().unwrap();
    assert_eq!(status.dropped_events, 0);
    engine.shutdown();
    let events = s.events();
    assert_eq!(action_events(&events), 400);
    assert!(drop_markers(&events).is_empty());
    assert_strictly_increasing(&events);
}

#[test]
fn provoked_drops_are_marked_exactly_and_the_total_survives_a_restart() {
    let s = setup();
    let mut config = s.config();
    config.capture_capacity_events = 16;
    config.drain_tick = Duration::from_secs(3600);
    let engine = s.start_with(config.clone());
    engine.enable().unwrap();
    let capture = engine.capture();
    for _ in 0..100 {
        let token = capture.action_started(click(), None, None);
        capture.action_completed(token, outcome());
    }
    // 16 fit; every other start is dropped, and so is every completion (accepted or not: the
    // queue is full either way).
    let status = engine.status().unwrap();
    assert_eq!(status.dropped_events, 200 - 16);
    let status = engine.flush().unwrap();
    assert_eq!(status.dropped_events, 184);
    engine.shutdown();
    let events = s.events();
    assert_eq!(drop_markers(&events).iter().sum::<u64>(), 184);
    assert_eq!(
        drop_markers(&events).len(),
        1,
        "one marker before the next accepted event"
    );
    // No orphan completion: every completed action has its start.
    for completed in events
        .iter()
        .filter(|e| matches!(e.data.payload, Payload::ActionCompleted(_)))
    {
        assert!(
            events
                .iter()
                .any(|e| matches!(e.data.payload, Payload::ActionStarted)
                    && e.data.action_id == completed.data.action_id),
            "orphan completion"
        );
    }
    // The lifetime total is in the journal: a new process sees it.
    let engine = s.start_with(config);
    assert_eq!(engine.status().unwrap().dropped_events, 184);
    engine.shutdown();
}

#[test]
fn a_completion_carries_its_starts_fields_and_one_of_a_start_too_old_to_keep_is_still_written() {
    use annal_engine::capture::OPEN_ACTIONS_RETAINED;
    use annal_schema::{Application, BundleId, DisplayName};
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    let capture = engine.capture();
    let app = || {
        Application::new(
            Some(BundleId::new("org.example.Editor").unwrap()),
            Some(DisplayName::new("Editor").unwrap()),
        )
    };
    let session = capture.session_started("long-running-session");
    let oldest = capture.action_started(
        Capability::new("app.oldest").unwrap(),
        app(),
        Some(&session),
    );
    let recent = capture.action_started(
        Capability::new("app.recent").unwrap(),
        app(),
        Some(&session),
    );
    // Exactly enough later starts (tokens dropped, never completed) to push the oldest out of
    // the drain's window (numbers 0 and 1, then 2..=OPEN_ACTIONS_RETAINED), not the recent one.
    for n in 1..OPEN_ACTIONS_RETAINED {
        let _ = capture.action_started(click(), None, None);
        if n % 256 == 0 {
            engine.flush().unwrap();
        }
    }
    capture.action_completed(recent, outcome());
    capture.action_completed(oldest, outcome());
    capture.session_ended(session);
    assert_eq!(engine.flush().unwrap().dropped_events, 0);
    engine.shutdown();

    let events = s.events();
    let find = |name: &str, completed: bool| {
        events
            .iter()
            // Only action events carry a capability.
            .find(|e| {
                e.data
                    .capability
                    .as_ref()
                    .is_some_and(|c| c.as_str() == name)
                    && matches!(e.data.payload, Payload::ActionCompleted(_)) == completed
            })
            .unwrap_or_else(|| panic!("no {name} event (completed: {completed})"))
    };
    let recent_start = find("app.recent", false);
    let recent_done = find("app.recent", true);
    assert_eq!(recent_done.data.action_id, recent_start.data.action_id);
    assert_eq!(recent_done.data.application, app());
    assert!(recent_done.data.session_id.is_some());
    assert_eq!(recent_done.data.session_id, recent_start.data.session_id);

    let oldest_start = find("app.oldest", false);
    let oldest_done: Vec<&Event> = events
        .iter()
        .filter(|e| {
            matches!(e.data.payload, Payload::ActionCompleted(_))
                && e.data.action_id == oldest_start.data.action_id
        })
        .collect();
    assert_eq!(
        oldest_done.len(),
        1,
        "the old action's completion is written once"
    );
    let done = oldest_done[0];
    assert_eq!(
        done.data.capability, None,
        "its start's fields were not kept"
    );
    assert_eq!(done.data.application, None);
    assert_eq!(done.data.session_id, None);
    assert_eq!(action_events(&events), OPEN_ACTIONS_RETAINED + 1);
}

/// Captures 4,000 actions in bursts of 100, at thousands of actions a second (far above a real
/// agent's rate), flushing now and then; returns the status after the last flush. Before each
/// burst it waits until the queue has room for it, for at most `BURST_ROOM_DEADLINE`: so a
/// machine too loaded to drain for a moment causes no drop, and a drain that a reader blocks
/// fails the test at the deadline.
fn capture_bursts(engine: &Engine) -> annal_schema::tools::StatusResponse {
    const BURST_ACTIONS: usize = 100;
    const BURST_ROOM_DEADLINE: Duration = Duration::from_secs(10);
    let capture = engine.capture();
    let room = annal_engine::capture::CAPTURE_QUEUE_CAPACITY_EVENTS - BURST_ACTIONS;
    for burst in 0..40 {
        let waiting = std::time::Instant::now();
        while engine.queued_events() > room {
            assert!(
                waiting.elapsed() < BURST_ROOM_DEADLINE,
                "the capture queue did not drain for {BURST_ROOM_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        for _ in 0..BURST_ACTIONS {
            let _ = capture.action_started(click(), None, None);
        }
        if burst % 10 == 9 {
            engine.flush().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    engine.flush().unwrap()
}

#[test]
fn a_long_running_reader_never_causes_a_drop() {
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let layout = s.layout.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let storage: Arc<dyn Storage> =
                    Arc::new(open_store(&layout, Access::Read).unwrap());
                let _ = StoreReader::<History>::new(storage)
                    .read(&HistoryKeys::from_root(RootKey::from_bytes(ROOT)));
                reads += 1;
            }
            reads
        })
    };
    // While the reader reads the whole store over and over.
    let status = capture_bursts(&engine);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    assert_eq!(status.dropped_events, 0);
    engine.shutdown();
    assert_eq!(action_events(&s.events()), 4000);
}

fn streams(events: &[Event]) -> usize {
    events
        .iter()
        .map(|e| e.source.stream_id().to_owned())
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

#[test]
fn a_writer_panic_is_contained_restarted_on_a_new_generation_and_recovers() {
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    let capture = engine.capture();
    let mut captured = 0u64;
    for _ in 0..10 {
        let token = capture.action_started(click(), None, None);
        assert_ne!(
            token.admission(),
            annal_engine::capture::Admission::NotAdmitted,
            "capture stopped accepting while the writer restarted"
        );
        captured += 1;
    }
    engine.flush().unwrap();
    engine.inject_writer_panic();
    // Capture keeps being called (no caller ever sees the panic) through the restart, and
    // keeps admitting: what comes while no writer runs waits in the queue (or is counted).
    let restarting = Instant::now();
    while restarting.elapsed() < Duration::from_millis(100) {
        let token = capture.action_started(click(), None, None);
        assert_ne!(
            token.admission(),
            annal_engine::capture::Admission::NotAdmitted,
            "capture stopped accepting while the writer restarted"
        );
        captured += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    // Then until a new writer generation has written to disk.
    let started = Instant::now();
    loop {
        let token = capture.action_started(click(), None, None);
        assert_ne!(
            token.admission(),
            annal_engine::capture::Admission::NotAdmitted,
            "capture stopped accepting while the writer restarted"
        );
        captured += 1;
        let _ = engine.flush();
        if streams(&s.events()) >= 2 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no new generation"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = engine.flush().unwrap();
    assert_eq!(
        status.health,
        HealthCategory::Ready,
        "recovered after the restart"
    );
    assert!(status.enabled);
    for _ in 0..10 {
        let token = capture.action_started(click(), None, None);
        assert_ne!(
            token.admission(),
            annal_engine::capture::Admission::NotAdmitted,
            "capture stopped accepting while the writer restarted"
        );
        captured += 1;
    }
    engine.flush().unwrap();
    let report = engine.shutdown();
    assert!(report.drained);
    assert!(
        report.took < Duration::from_millis(annal_actors::config::SHUTDOWN_DEADLINE_MS + 1_000)
    );
    let events = s.events();
    assert_strictly_increasing(&events);
    assert!(streams(&events) >= 2, "a new generation after the restart");
    // Nothing vanished with the failing writer: every capture is stored or counted as dropped.
    let dropped: u64 = drop_markers(&events).iter().sum();
    assert_eq!(action_events(&events) as u64 + dropped, captured);
    assert!(action_events(&events) >= 20);
}

fn faulty_setup(s: &Setup) -> FaultyStorage {
    annal_engine::store::create_store(&s.layout).unwrap();
    FaultyStorage::new(open_store(&s.layout, Access::Write).unwrap())
}

fn start_faulty(s: &Setup, storage: &FaultyStorage) -> Engine {
    start_faulty_configured(s, s.config(), storage)
}

/// [`start_faulty`] with its own configuration (on the system clock).
fn start_faulty_configured(s: &Setup, config: EngineConfig, storage: &FaultyStorage) -> Engine {
    start_faulty_with(
        s,
        config,
        Arc::new(annal_engine::clock::SystemClock),
        storage,
    )
}

/// [`start_faulty`] with its own configuration and clock.
/// An enabled engine on a fault-injecting store and a manual clock (the time of the
/// retention and rotation tests).
fn enabled_faulty_on_a_manual_clock(
    s: &Setup,
) -> (Engine, FaultyStorage, annal_engine::clock::ManualClock) {
    let storage = faulty_setup(s);
    let clock = test_clock();
    let engine = start_faulty_with(s, s.config(), Arc::new(clock.clone()), &storage);
    engine.enable().unwrap();
    (engine, storage, clock)
}

fn start_faulty_with(
    s: &Setup,
    config: EngineConfig,
    clock: Arc<dyn annal_engine::clock::Clock>,
    storage: &FaultyStorage,
) -> Engine {
    Engine::start_with(
        config,
        Arc::clone(&s.provider) as Arc<dyn KeyProvider>,
        clock,
        Some(Arc::new(storage.clone())),
    )
    .unwrap()
}

#[test]
fn through_faulty_storage_every_acknowledged_event_reads_back_and_health_recovers() {
    for fault in ["write", "sync", "enospc"] {
        let s = setup();
        let storage = faulty_setup(&s);
        let engine = start_faulty(&s, &storage);
        engine.enable().unwrap();
        let capture = engine.capture();
        let mut acknowledged = 0usize;
        for _ in 0..5 {
            let _ = capture.action_started(click(), None, None);
        }
        engine.sync().unwrap();
        acknowledged += 5;
        match fault {
            "write" => storage.fail_nth(FaultOp::Write, 1, FaultKind::Eio),
            "sync" => storage.fail_nth(FaultOp::Sync, 1, FaultKind::Eio),
            _ => storage.fail_from_nth(FaultOp::Write, 1, FaultKind::NoSpace),
        }
        for _ in 0..5 {
            let _ = capture.action_started(click(), None, None);
        }
        // The flush that meets the fault is not an acknowledgment.
        let _ = engine.sync();
        let status = engine.status().unwrap();
        assert_eq!(status.health, HealthCategory::StorageUnavailable, "{fault}");
        storage.clear_faults();
        for _ in 0..5 {
            let _ = capture.action_started(click(), None, None);
        }
        let status = engine.sync().unwrap();
        assert_eq!(status.health, HealthCategory::Ready, "{fault}: recovers");
        acknowledged += 5;
        engine.shutdown();
        drop(storage);
        let events = s.events();
        assert!(
            action_events(&events) >= acknowledged,
            "{fault}: {}",
            action_events(&events)
        );
        assert_strictly_increasing(&events);
        // What was lost is accounted for as dropped, never silently.
        let lost = drop_markers(&events).iter().sum::<u64>() as usize;
        assert_eq!(action_events(&events) + lost, 15, "{fault}");
    }
}

/// A batch that fills its chunk, closes it (synced) and then cannot create the next one: the
/// part that went into the closed chunk is durable and reads back, only the rest is reported
/// dropped, so the markers still sum to exactly what is missing.
#[test]
fn a_batch_split_by_a_rotation_that_fails_reports_only_its_unwritten_part_dropped() {
    use annal_engine::journal::{OnQuota, QUOTA_MIN_BYTES};
    // Chunks of QUOTA_MIN_BYTES / 16 = 64 KiB: the first flush leaves the chunk well short of
    // its early-rotation point, the second batch overflows it.
    const FIRST: usize = 60;
    const SECOND: usize = 400;
    let s = setup();
    let storage = faulty_setup(&s);
    // Only the flushes drain, so the second batch is one append.
    let engine = start_faulty_configured(&s, s.config_drained_by_flush_only(), &storage);
    engine.enable().unwrap();
    engine
        .set_quota(QUOTA_MIN_BYTES, OnQuota::StopCapture)
        .unwrap();
    let capture = engine.capture();
    for _ in 0..FIRST {
        let _ = capture.action_started(click(), None, None);
    }
    engine.flush().unwrap();
    storage.fail_nth(FaultOp::Create, 1, FaultKind::Eio);
    for _ in 0..SECOND {
        let _ = capture.action_started(click(), None, None);
    }
    let _ = engine.flush();
    assert_eq!(storage.injected(), 1, "the batch met the failed creation");
    storage.clear_faults();
    let _ = capture.action_started(click(), None, None);
    let status = engine.flush().unwrap();
    assert_eq!(status.health, HealthCategory::Ready);
    // What is durable is answered in this life already, the failed batch's part included.
    let answered: usize = (0..5u64)
        .map(|window| {
            let since = 1 + window * 200;
            let page = engine
                .query(
                    request(serde_json::json!({
                        "since_sequence": since, "until_sequence": since + 199, "limit": 200
                    })),
                    annal_schema::AccessOperation::LocalCli,
                )
                .unwrap();
            action_events(&page.events)
        })
        .sum();
    engine.shutdown();
    drop(storage);
    let events = s.events();
    let stored = action_events(&events);
    assert_eq!(answered, stored, "answered before the restart");
    let dropped = drop_markers(&events).iter().sum::<u64>() as usize;
    assert!(
        stored > FIRST + 1 && dropped > 0,
        "the batch was split: {stored} stored, {dropped} dropped"
    );
    assert_eq!(
        stored + dropped,
        FIRST + SECOND + 1,
        "markers sum to the missing"
    );
    assert_eq!(status.dropped_events as usize, dropped);
    assert_strictly_increasing(&events);
}

/// The action events the owner's query answers (one page: the tests below stay under it).
fn answered_actions(engine: &Engine) -> usize {
    let response = engine
        .query(
            request(serde_json::json!({"limit": 200})),
            annal_schema::AccessOperation::LocalCli,
        )
        .unwrap();
    action_events(&response.events)
}

/// Five actions flushed, then five more appended (the drain's tick) and not synced, which the
/// Query actor answers from its hot cache.
fn five_durable_and_five_unsynced(engine: &Engine, capture: &annal_engine::capture::CaptureHandle) {
    for _ in 0..5 {
        let _ = capture.action_started(click(), None, None);
    }
    engine.sync().unwrap();
    for _ in 0..5 {
        let _ = capture.action_started(click(), None, None);
    }
    eventually(|| answered_actions(engine) >= 10);
    assert_eq!(answered_actions(engine), 10);
}

/// Polls `ready` until it holds or [`EVENTUALLY_DEADLINE`] passed (what the engine does on
/// its own time: a drain tick, a journal tick, a cast); the caller asserts the outcome.
fn eventually(mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + EVENTUALLY_DEADLINE;
    while !ready() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// After [`five_durable_and_five_unsynced`] and a failed sync: the five unsynced are counted
/// as dropped, and no query answers them any more.
fn assert_the_five_unsynced_are_dropped_and_forgotten(engine: &Engine) {
    assert!(engine.status().unwrap().dropped_events >= 5);
    assert_eq!(
        answered_actions(engine),
        5,
        "a query returned what the failed sync lost"
    );
}

/// How long [`eventually`] waits: far above a loaded CI machine's delays.
const EVENTUALLY_DEADLINE: Duration = Duration::from_secs(10);

/// What a failed sync lost is reported dropped, and no query returns it afterwards: the Query
/// actor forgets what the store reports lost, from its hot cache and its index alike.
#[test]
fn a_query_never_returns_an_event_a_failed_sync_lost() {
    let s = setup();
    let storage = faulty_setup(&s);
    let mut config = s.config();
    // No group commit behind the test's back: only the flushes sync.
    config.sync_interval = Duration::from_secs(600);
    let engine = start_faulty_configured(&s, config, &storage);
    engine.enable().unwrap();
    let capture = engine.capture();
    let actions = answered_actions;
    five_durable_and_five_unsynced(&engine, &capture);
    storage.fail_nth(FaultOp::Sync, 1, FaultKind::Eio);
    assert!(engine.sync().is_err());
    assert_the_five_unsynced_are_dropped_and_forgotten(&engine);
    // The disk recovers: what comes next is answered beside the five that stayed.
    storage.clear_faults();
    for _ in 0..2 {
        let _ = capture.action_started(click(), None, None);
    }
    engine.sync().unwrap();
    assert_eq!(actions(&engine), 7);
    engine.shutdown();
    drop(storage);
    assert_eq!(action_events(&s.events()), 7);
}

/// A failed sync may leave its records on disk all the same: they were reported dropped, so
/// no later life answers them either (before, a restart's reader found them in their chunk
/// and returned them beside the marker counting them dropped). And drops no event followed
/// are marked at the stop, so the lifetime total survives it (before, it fell back to 0).
/// Run with both kinds of failed sync, over two later lives. (The same in a sealed chunk
/// loaded lazily: `lost_sequences_stay_forgotten_in_chunks_loaded_later`.)
#[test]
fn what_a_failed_sync_reported_lost_is_never_answered_after_a_restart() {
    for failure in SyncFailure::ALL {
        let s = setup();
        let storage = faulty_setup(&s);
        let mut config = s.config();
        config.sync_interval = Duration::from_secs(600);
        let engine = start_faulty_configured(&s, config, &storage);
        engine.enable().unwrap();
        let capture = engine.capture();
        five_durable_and_five_unsynced(&engine, &capture);
        storage.fail_sync_nth(1, failure);
        assert!(engine.sync().is_err());
        assert_the_five_unsynced_are_dropped_and_forgotten(&engine);
        storage.clear_faults();
        let dropped = engine.status().unwrap().dropped_events;
        engine.shutdown();
        drop(storage);
        let on_disk = action_events(&s.events());
        match failure {
            SyncFailure::DataKept => assert_eq!(on_disk, 10, "the failed sync kept its data"),
            SyncFailure::DataLost => assert_eq!(on_disk, 5),
        }
        for life in 0..2 {
            let engine = s.start_with(s.config());
            assert_eq!(
                answered_actions(&engine),
                5 + life,
                "{failure:?}, life {life}: a query returned what a failed sync lost"
            );
            assert_eq!(engine.status().unwrap().dropped_events, dropped);
            // One more action in each life.
            let _ = engine.capture().action_started(click(), None, None);
            engine.sync().unwrap();
            engine.shutdown();
        }
    }
}

/// A rotation by age whose closing sync fails: what the chunk held unsynced is counted as
/// dropped (never lost silently) and no query answers it any more.
#[test]
fn a_failed_closing_sync_of_a_rotation_by_age_is_counted_and_forgotten() {
    use annal_engine::clock::ManualClock;
    use annal_engine::store::CHUNK_MAX_AGE_SECS;
    let s = setup();
    let storage = faulty_setup(&s);
    let clock = ManualClock::new(Duration::from_secs(1_764_000_000));
    let mut config = s.config();
    config.sync_interval = Duration::from_secs(600);
    let engine = start_faulty_with(&s, config, Arc::new(clock.clone()), &storage);
    engine.enable().unwrap();
    let capture = engine.capture();
    five_durable_and_five_unsynced(&engine, &capture);
    // The journal takes the last query's completion record now (a status asks it, after
    // that record): appended later, past the clock's jump, it would rotate the journal's
    // own chunk by age, and that chunk's sync would meet the fault instead.
    engine.status().unwrap();
    // Armed before the chunk is old enough: the writer's own periodic check may be the one
    // that rotates it, and its closing sync must meet the fault as this one's would.
    storage.fail_nth(FaultOp::Sync, 1, FaultKind::Eio);
    clock.advance(Duration::from_secs(CHUNK_MAX_AGE_SECS + 1));
    engine.check_rotation_now();
    eventually(|| storage.injected() > 0);
    assert_eq!(
        storage.injected(),
        1,
        "the rotation's closing sync met the fault"
    );
    assert_the_five_unsynced_are_dropped_and_forgotten(&engine);
    engine.shutdown();
    drop(storage);
    assert_eq!(action_events(&s.events()), 5);
}

/// A journal sync that fails loses what it covered from disk: the journal appends those
/// events again (here at shutdown), so the lifetime drop total still survives a restart.
#[test]
fn a_failed_journal_sync_loses_no_journal_event() {
    let s = setup();
    let storage = faulty_setup(&s);
    let mut config = s.config_drained_by_flush_only();
    config.capture_capacity_events = 16;
    // Long enough that the fault is armed before the journal's tick syncs the drop total.
    config.sync_interval = Duration::from_millis(2_000);
    let engine = start_faulty_configured(&s, config.clone(), &storage);
    engine.enable().unwrap();
    let capture = engine.capture();
    for _ in 0..100 {
        let _ = capture.action_started(click(), None, None);
    }
    // The marker is durable in the history; its drops went to the journal, not synced yet.
    assert_eq!(engine.sync().unwrap().dropped_events, 84);
    storage.fail_nth(FaultOp::Sync, 1, FaultKind::Eio);
    eventually(|| storage.injected() > 0);
    assert_eq!(
        storage.injected(),
        1,
        "the journal's tick met the failed sync"
    );
    engine.shutdown();
    drop(storage);
    let engine = s.start_with(config);
    assert_eq!(engine.status().unwrap().dropped_events, 84);
    engine.shutdown();
}

/// An enabled engine on a fresh faulty store whose journal retries what it holds on a quick
/// tick, with its setup, storage and configuration (to restart on the same store).
fn enabled_faulty_with_quick_journal() -> (Setup, FaultyStorage, Engine, EngineConfig) {
    let s = setup();
    let storage = faulty_setup(&s);
    let mut config = s.config();
    config.sync_interval = Duration::from_millis(20);
    let engine = start_faulty_configured(&s, config.clone(), &storage);
    engine.enable().unwrap();
    (s, storage, engine, config)
}

/// Each of a pair of operations (`false`, `true`) with each kind of failed sync.
fn each_operation_and_failed_sync() -> impl Iterator<Item = (bool, SyncFailure)> {
    [false, true]
        .into_iter()
        .flat_map(|operation| SyncFailure::ALL.map(|failure| (operation, failure)))
}

/// Whether a new action is admitted now (a start that is not admitted is not counted).
fn admits(engine: &Engine) -> bool {
    engine
        .capture()
        .action_started(click(), None, None)
        .admission()
        == annal_engine::capture::Admission::Accepted
}

/// The owner is told an `enable` (or `resume`) whose journal commit failed did not happen, so
/// it never happens behind their back: not in status, not in capture, not once the journal
/// writes what it held, not after a restart that finds the failed record on disk after all (a
/// failed `fsync` does not unwrite it).
#[test]
fn an_enable_or_resume_whose_commit_fails_never_takes_effect() {
    for (resume, failure) in each_operation_and_failed_sync() {
        let (s, storage, engine, config) = enabled_faulty_with_quick_journal();
        if resume {
            engine.pause().unwrap();
        } else {
            engine.disable().unwrap();
        }
        storage.fail_sync_nth(1, failure);
        let widened = if resume {
            engine.resume()
        } else {
            engine.enable()
        };
        assert!(
            widened.is_err(),
            "the journal's sync failed (resume: {resume})"
        );
        assert_eq!(storage.injected(), 1, "it met the failed sync");
        let narrow = |status: annal_schema::tools::StatusResponse| {
            status.enabled == resume && status.paused == resume
        };
        assert!(
            narrow(engine.status().unwrap()),
            "status shows the failed change"
        );
        assert!(!admits(&engine), "capture opened (resume: {resume})");
        // Several ticks: the journal writes what it holds.
        std::thread::sleep(Duration::from_millis(300));
        assert!(narrow(engine.status().unwrap()));
        assert!(!admits(&engine), "the held change was written later");
        engine.shutdown();
        drop(storage);
        let engine = s.start_with(config);
        assert!(
            narrow(engine.status().unwrap()),
            "the failed change holds after a restart (resume: {resume}, {failure:?})"
        );
        assert!(!admits(&engine));
        // The same change, when it succeeds, is like any other.
        if resume {
            engine.resume().unwrap();
        } else {
            engine.enable().unwrap();
        }
        assert!(admits(&engine));
        engine.shutdown();
    }
}

/// A `disable` (or `pause`) whose journal commit failed narrows capture at once: capture
/// closes and status shows it, and the journal keeps the change and writes it once it can,
/// so it holds after a restart too. The owner is told it failed (it may not survive a crash
/// until then), never that capture goes on.
#[test]
fn a_disable_or_pause_whose_commit_fails_closes_capture_at_once_and_is_journaled_later() {
    for (pause, failure) in each_operation_and_failed_sync() {
        let (s, storage, engine, config) = enabled_faulty_with_quick_journal();
        assert!(admits(&engine));
        engine.flush().unwrap();
        storage.fail_sync_nth(1, failure);
        let narrowed = if pause {
            engine.pause()
        } else {
            engine.disable()
        };
        assert!(
            narrowed.is_err(),
            "the journal's sync failed (pause: {pause})"
        );
        assert_eq!(storage.injected(), 1);
        assert!(!admits(&engine), "capture went on (pause: {pause})");
        let status = engine.status().unwrap();
        assert!(
            status.paused == pause && status.enabled == pause,
            "{status:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
        assert!(!admits(&engine));
        engine.shutdown();
        drop(storage);
        let engine = s.start_with(config);
        let status = engine.status().unwrap();
        assert!(
            status.paused == pause && status.enabled == pause,
            "not journaled (pause: {pause}): {status:?}"
        );
        assert!(!admits(&engine));
        engine.shutdown();
    }
}

/// The group-commit deadline runs from the oldest record not yet synced: a flush in between
/// moves it, so the tick armed before the flush does not sync the younger records early (one
/// sync fewer), and they are still synced within the interval.
#[test]
fn a_flush_moves_the_group_commit_deadline_to_the_records_after_it() {
    // Long enough that a test thread oversleeping by a quarter of it (a loaded CI machine)
    // still checks inside each window.
    const INTERVAL: Duration = Duration::from_millis(2_000);
    let s = setup();
    let storage = faulty_setup(&s);
    let mut config = s.config();
    config.sync_interval = INTERVAL;
    let engine = start_faulty_configured(&s, config, &storage);
    engine.enable().unwrap();
    let capture = engine.capture();
    engine.flush().unwrap();
    // The first record arms the tick; half an interval later a flush syncs it.
    let armed = Instant::now();
    let _ = capture.action_started(click(), None, None);
    std::thread::sleep(INTERVAL / 2);
    engine.flush().unwrap();
    // A record after the flush: appended (not synced) within a few drain ticks.
    let _ = capture.action_started(click(), None, None);
    std::thread::sleep(Duration::from_millis(100));
    let synced = storage.count(FaultOp::Sync);
    // Past the first tick's deadline, short of the second record's.
    std::thread::sleep((armed + INTERVAL * 5 / 4).saturating_duration_since(Instant::now()));
    assert_eq!(
        storage.count(FaultOp::Sync),
        synced,
        "the tick armed before the flush synced a record younger than the interval"
    );
    // Past the second record's deadline (with slack for a loaded machine).
    std::thread::sleep((armed + INTERVAL * 5 / 2).saturating_duration_since(Instant::now()));
    assert!(
        storage.count(FaultOp::Sync) > synced,
        "the record after the flush was not synced within the interval"
    );
    engine.shutdown();
    drop(storage);
    assert_eq!(action_events(&s.events()), 2);
}

#[test]
fn a_flush_writes_what_was_queued_in_one_append() {
    use annal_actors::ingress::{FLUSH_BATCH_MAX_EVENTS, INGRESS_BATCH_MAX_EVENTS};
    // More than one tick-driven batch, no more than one flush batch (and the queue).
    const QUEUED: usize = 3 * INGRESS_BATCH_MAX_EVENTS;
    const _: () = assert!(QUEUED <= FLUSH_BATCH_MAX_EVENTS);
    const _: () = assert!(QUEUED <= annal_engine::capture::CAPTURE_QUEUE_CAPACITY_EVENTS);
    let s = setup();
    let storage = faulty_setup(&s);
    let engine = start_faulty_configured(&s, s.config_drained_by_flush_only(), &storage);
    engine.enable().unwrap();
    let capture = engine.capture();
    // The first append also reserves sequences in the journal: out of the way first.
    let _ = capture.action_started(click(), None, None);
    engine.sync().unwrap();
    let writes = storage.count(FaultOp::Write);
    for _ in 0..QUEUED {
        let _ = capture.action_started(click(), None, None);
    }
    engine.sync().unwrap();
    assert_eq!(
        storage.count(FaultOp::Write) - writes,
        1,
        "the flush wrote what was queued in more than one append"
    );
    engine.shutdown();
    drop(storage);
    assert_eq!(action_events(&s.events()), 1 + QUEUED);
}

/// An enabled engine on a fault-injecting store that captured `actions` action starts and
/// flushed them (all durable).
fn faulty_engine_with_flushed_actions(
    s: &Setup,
    actions: usize,
) -> (Engine, FaultyStorage, annal_engine::capture::CaptureHandle) {
    let storage = faulty_setup(s);
    let engine = start_faulty(s, &storage);
    engine.enable().unwrap();
    let capture = engine.capture();
    for _ in 0..actions {
        let _ = capture.action_started(click(), None, None);
    }
    engine.flush().unwrap();
    (engine, storage, capture)
}

/// A crash: each file keeps `keep(unsynced bytes)` of what was never synced, and the engine is
/// gone without a stop (its tree winds down; its lock goes with its storage).
fn crash(engine: Engine, storage: FaultyStorage, keep: &mut dyn FnMut(u64) -> u64) {
    storage.crash(keep).unwrap();
    drop(engine);
    drop(storage);
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
fn a_crash_keeping_an_unsynced_prefix_loses_nothing_acknowledged() {
    let s = setup();
    let (engine, storage, capture) = faulty_engine_with_flushed_actions(&s, 20);
    for _ in 0..20 {
        let _ = capture.action_started(click(), None, None);
    }
    // Power loss: half of what was never synced survives; the process is gone.
    crash(engine, storage, &mut |unsynced| unsynced / 2);
    let engine = s.start_with(s.config());
    let status = engine.status().unwrap();
    assert!(status.enabled);
    for _ in 0..5 {
        let _ = capture_after(&engine);
    }
    engine.flush().unwrap();
    engine.shutdown();
    let events = s.events();
    assert!(action_events(&events) >= 25);
    assert_strictly_increasing(&events);
}

#[test]
fn a_torn_tail_found_at_open_is_journaled_once_and_left_out_of_reads() {
    use annal_engine::journal::{Journal, JournalEvent};
    use annal_engine::keys::JournalKeys;
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    for _ in 0..3 {
        let _ = capture_after(&engine);
    }
    engine.flush().unwrap();
    engine.shutdown();
    let before = s.events();
    // A crash mid-append: bytes after the newest history chunk's last record.
    let chunks = s.layout.history_root().join("chunks");
    let newest = std::fs::read_dir(&chunks)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&newest)
        .unwrap();
    std::io::Write::write_all(&mut file, &[0xA5; 37]).unwrap();
    drop(file);
    for _ in 0..2 {
        let engine = s.start_with(s.config());
        assert!(engine.status().unwrap().enabled);
        engine.flush().unwrap();
        engine.shutdown();
    }
    let storage: Arc<dyn Storage> = Arc::new(open_store(&s.layout, Access::Read).unwrap());
    let report = StoreReader::<Journal>::new(storage)
        .read(&JournalKeys::from_namespace_root(&RootKey::from_bytes(
            ROOT,
        )))
        .unwrap();
    let tears: Vec<u64> = report
        .records()
        .filter_map(|r| match r.event.event {
            JournalEvent::TornTailRecorded { bytes_left_out, .. } => Some(bytes_left_out),
            _ => None,
        })
        .collect();
    assert_eq!(tears, [37], "recorded once, across two restarts");
    // The tail is left out; nothing before it is.
    let after = s.events();
    assert_eq!(after[..before.len()], before[..]);
}

fn capture_after(engine: &Engine) -> annal_engine::capture::ActionToken {
    engine.capture().action_started(click(), None, None)
}

#[test]
fn shutdown_returns_within_its_deadline_and_a_blocking_call_refuses_inside_a_runtime() {
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        assert_eq!(engine.enable().unwrap_err(), EngineError::InAsyncContext);
        assert!(engine.status_async().await.unwrap().enabled);
    });
    let started = Instant::now();
    let report = engine.shutdown();
    assert!(report.drained);
    assert!(
        started.elapsed()
            < Duration::from_millis(annal_actors::config::SHUTDOWN_DEADLINE_MS + 1_000)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_in_a_multi_threaded_tokio_runtime() {
    let s = setup();
    let engine = Engine::start_async(s.config(), Arc::clone(&s.provider) as Arc<dyn KeyProvider>)
        .await
        .unwrap();
    engine.enable_async().await.unwrap();
    let capture = engine.capture();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let capture = capture.clone();
            tokio::spawn(async move {
                for _ in 0..25 {
                    let token = capture.action_started(click(), None, None);
                    capture.action_completed(token, outcome());
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let status = engine.flush_async().await.unwrap();
    assert_eq!(status.dropped_events, 0);
    let report = engine.shutdown_async().await;
    assert!(report.drained);
    let events = tokio::task::spawn_blocking(move || s.events())
        .await
        .unwrap();
    assert_eq!(action_events(&events), 100);
}

/// A credential store that never answers.
#[derive(Debug)]
struct Hung;

impl KeyProvider for Hung {
    fn kind(&self) -> annal_engine::keys::KeyStoreKind {
        annal_engine::keys::KeyStoreKind::InMemory
    }
    fn naming(&self) -> annal_engine::keys::CredentialNaming {
        annal_engine::keys::CredentialNaming::Annal
    }
    fn create_or_load(
        &self,
        _: &Namespace,
    ) -> Result<annal_engine::keys::LoadedKey, annal_engine::keys::KeyError> {
        std::thread::sleep(Duration::from_secs(3600));
        Err(annal_engine::keys::KeyError::NotFound)
    }
    fn load(
        &self,
        _: &Namespace,
        _: &annal_engine::keys::KeyReference,
    ) -> Result<annal_engine::keys::LoadedKey, annal_engine::keys::KeyError> {
        std::thread::sleep(Duration::from_secs(3600));
        Err(annal_engine::keys::KeyError::NotFound)
    }
    fn references(
        &self,
        _: &Namespace,
    ) -> Result<Vec<annal_engine::keys::KeyReference>, annal_engine::keys::KeyError> {
        Ok(Vec::new())
    }
    fn destroy(
        &self,
        _: &Namespace,
        _: &annal_engine::keys::KeyReference,
    ) -> Result<annal_engine::keys::DestroyedKey, annal_engine::keys::KeyError> {
        Err(annal_engine::keys::KeyError::NotFound)
    }
    fn load_checkpoint(
        &self,
        _: &Namespace,
        _: Option<&annal_engine::keys::StoreId>,
    ) -> Result<Option<Vec<u8>>, annal_engine::keys::KeyError> {
        std::thread::sleep(Duration::from_secs(3600));
        Err(annal_engine::keys::KeyError::NotFound)
    }
    fn store_checkpoint(
        &self,
        _: &Namespace,
        _: Option<&annal_engine::keys::StoreId>,
        _: &[u8],
    ) -> Result<(), annal_engine::keys::KeyError> {
        std::thread::sleep(Duration::from_secs(3600));
        Err(annal_engine::keys::KeyError::NotFound)
    }
    fn destroy_checkpoint(
        &self,
        _: &Namespace,
        _: Option<&annal_engine::keys::StoreId>,
    ) -> Result<(), annal_engine::keys::KeyError> {
        Err(annal_engine::keys::KeyError::NotFound)
    }
}

#[test]
fn a_credential_store_that_never_answers_is_key_unavailable_not_a_hang() {
    let s = setup();
    let mut config = s.config();
    config.key_call_deadline = Duration::from_millis(300);
    let engine = Engine::start(config, Arc::new(Hung)).unwrap();
    let started = Instant::now();
    let error = engine.enable().unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        error,
        EngineError::Control(annal_actors::ControlError::Key(
            HealthCategory::KeyUnavailable
        ))
    );
    // A failed enable shows its category, not `disabled`.
    assert_eq!(
        engine.status().unwrap().health,
        HealthCategory::KeyUnavailable
    );
    let report = engine.shutdown();
    assert!(report.took < Duration::from_secs(5));
}

#[test]
fn past_the_restart_limit_the_writer_stays_stopped_and_the_journal_replays_that_health() {
    use annal_engine::journal::{Journal, State};
    use annal_engine::keys::JournalKeys;
    let s = setup();
    let mut config = s.config();
    config.restart_policy = annal_engine::supervision::RestartPolicy {
        max_restarts: 1,
        window: Duration::from_secs(600),
    };
    let engine = s.start_with(config);
    engine.enable().unwrap();
    let started = Instant::now();
    let shown = loop {
        engine.inject_writer_panic();
        std::thread::sleep(Duration::from_millis(20));
        let status = engine.status().unwrap();
        if status.health == HealthCategory::WriterStopped {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never gave up: {status:?}"
        );
    };
    // It stays stopped: no more restarts, capture no longer admits.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        engine.status().unwrap().health,
        HealthCategory::WriterStopped
    );
    let token = engine.capture().action_started(click(), None, None);
    assert_eq!(
        token.admission(),
        annal_engine::capture::Admission::NotAdmitted
    );
    engine.capture().action_completed(token, outcome());
    engine.shutdown();
    // Offline, from the journal alone: the same health.
    let storage: Arc<dyn Storage> = Arc::new(open_store(&s.layout, Access::Read).unwrap());
    let report = StoreReader::<Journal>::new(storage)
        .read(&JournalKeys::from_namespace_root(&RootKey::from_bytes(
            ROOT,
        )))
        .unwrap();
    assert!(!report.has_corruption());
    let replayed = State::replay(report.records().map(|r| &r.event.event));
    assert_eq!(replayed.health(true, 0), shown.health);
    assert!(replayed.enabled);
}

/// The owner's settings: durable before they are acknowledged, shown by status, kept across
/// a restart, applied to queries at once; a value outside its bounds is refused as such (and
/// never clamped), as is a setting before history was ever enabled.
#[test]
fn the_owner_sets_retention_and_quota_durably_and_out_of_bounds_values_are_refused() {
    use annal_actors::{ControlError, Setting};
    use annal_engine::journal::{OnQuota, QUOTA_MIN_BYTES};
    let s = setup();
    let clock = test_clock();
    let start = || s.start_on(&clock);
    let engine = start();
    assert_eq!(
        engine.set_retention(30).unwrap_err(),
        EngineError::Control(ControlError::Refused),
        "no store before the first enable"
    );
    engine.enable().unwrap();
    for (refused, why) in [
        (Setting::Retention { days: 0 }, "0 days"),
        (Setting::Retention { days: 3_651 }, "3651 days"),
        (
            Setting::Quota {
                bytes: QUOTA_MIN_BYTES - 1,
                on_quota: OnQuota::StopCapture,
            },
            "below 1 MiB",
        ),
    ] {
        assert_eq!(
            engine.set(refused).unwrap_err(),
            EngineError::Control(ControlError::OutOfBounds),
            "{why}"
        );
    }
    let status = engine.status().unwrap();
    assert_eq!(
        (status.retention_days, status.quota_bytes),
        (7, 104_857_600)
    );

    capture_accepted(&engine, 4);
    engine.flush().unwrap();
    clock.advance(Duration::from_secs(2 * DAY_SECS));
    capture_accepted(&engine, 3);
    engine.flush().unwrap();
    assert_eq!(answered_actions(&engine), 7);
    // One day: the older four are out of every query at once.
    let status = engine.set_retention(1).unwrap();
    assert_eq!(status.retention_days, 1);
    assert_eq!(answered_actions(&engine), 3);
    let status = engine.set(Setting::Retention { days: 30 }).unwrap();
    assert_eq!(status.retention_days, 30);
    let status = engine
        .set_quota(2 * QUOTA_MIN_BYTES, OnQuota::EvictOldest)
        .unwrap();
    assert_eq!(status.quota_bytes, 2 * QUOTA_MIN_BYTES);
    engine.shutdown();

    let engine = start();
    let status = engine.status().unwrap();
    assert_eq!(
        (status.retention_days, status.quota_bytes),
        (30, 2 * QUOTA_MIN_BYTES)
    );
    engine.shutdown();
}

/// Makes the writer panic with no restart allowed, and waits until status shows it stopped.
fn give_up_on_the_writer(engine: &Engine) {
    engine.inject_writer_panic();
    let started = Instant::now();
    while engine.status().unwrap().health != HealthCategory::WriterStopped {
        assert!(started.elapsed() < Duration::from_secs(10), "never gave up");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A config whose writer is given up on at its first failure.
fn no_writer_restart(mut config: EngineConfig) -> EngineConfig {
    config.restart_policy = annal_engine::supervision::RestartPolicy {
        max_restarts: 0,
        window: Duration::from_secs(600),
    };
    config
}

#[test]
fn what_no_writer_will_take_once_given_up_is_counted_dropped_and_the_total_survives_a_restart() {
    let s = setup();
    let engine = s.start_with(no_writer_restart(s.config_drained_by_flush_only()));
    engine.enable().unwrap();
    let capture = engine.capture();
    let mut durable: Vec<_> = (0..5)
        .map(|_| capture.action_started(click(), None, None))
        .collect();
    let completed_at_shutdown = durable.split_off(3);
    engine.flush().unwrap();
    // Still in the queue when the writer goes (nothing drains but a flush).
    let queued: Vec<_> = (0..10)
        .map(|_| capture.action_started(click(), None, None))
        .collect();
    assert_eq!(engine.queued_events(), 10);
    give_up_on_the_writer(&engine);
    assert_eq!(engine.status().unwrap().dropped_events, 10);
    // Completions of admitted starts still reach the queue; nothing will write them.
    for token in durable.into_iter().chain(queued) {
        assert_eq!(
            token.admission(),
            annal_engine::capture::Admission::Accepted
        );
        capture.action_completed(token, outcome());
    }
    assert_eq!(engine.status().unwrap().dropped_events, 10 + 13);
    assert_eq!(engine.queued_events(), 0);
    // A new start is not admitted, so not counted either.
    let refused = capture.action_started(click(), None, None);
    assert_eq!(
        refused.admission(),
        annal_engine::capture::Admission::NotAdmitted
    );
    capture.action_completed(refused, outcome());
    // Still queued when shutdown begins (no tick, no status call): its final round counts them.
    for token in completed_at_shutdown {
        capture.action_completed(token, outcome());
    }
    assert_eq!(engine.queued_events(), 2);
    engine.shutdown();

    // The total was journaled: a new engine on the store shows it, and its writer writes the
    // marker the history owes those drops as it opens (so the markers sum to the total, and
    // health is back to ready once it is written).
    let engine = s.start_with(s.config());
    let status = engine.status().unwrap();
    assert_eq!(status.dropped_events, 25);
    assert_eq!(status.health, HealthCategory::Ready);
    engine.shutdown();
    let engine = s.start_with(s.config());
    assert_eq!(engine.status().unwrap().dropped_events, 25, "counted once");
    engine.shutdown();
    // Nothing after the give-up reached the history: the 5 durable starts, no completion;
    // then one marker for the 25, written once.
    let events = s.events();
    assert_eq!(action_events(&events), 5);
    assert_eq!(drop_markers(&events), [25]);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.data.payload, Payload::ActionCompleted(_))),
        "{events:#?}"
    );
}

#[test]
fn once_the_writer_is_given_up_on_the_ingress_tick_empties_the_queue_without_a_status_call() {
    let s = setup();
    let engine = s.start_with(no_writer_restart(s.config()));
    engine.enable().unwrap();
    let capture = engine.capture();
    let tokens: Vec<_> = (0..20)
        .map(|_| capture.action_started(click(), None, None))
        .collect();
    engine.flush().unwrap();
    give_up_on_the_writer(&engine);
    for token in tokens {
        capture.action_completed(token, outcome());
    }
    let started = Instant::now();
    while engine.queued_events() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the queue was left holding {}",
            engine.queued_events()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(engine.status().unwrap().dropped_events, 20);
    engine.shutdown();
}

fn request(value: serde_json::Value) -> annal_schema::tools::QueryRequest {
    annal_schema::tools::QueryRequest::parse(&value).unwrap()
}

fn access_events(events: &[Event]) -> Vec<u8> {
    events
        .iter()
        .filter_map(|e| match e.data.payload {
            Payload::Access {
                returned_events, ..
            } => Some(returned_events.get()),
            _ => None,
        })
        .collect()
}

#[test]
fn queries_answer_from_the_hot_cache_and_from_disk_and_leave_one_access_record_each() {
    use annal_schema::AccessOperation;
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    let capture = engine.capture();
    let session = capture.session_started("a raw label");
    for _ in 0..30 {
        let token = capture.action_started(click(), None, Some(&session));
        capture.action_completed(token, outcome());
    }
    capture.session_ended(session);
    engine.flush().unwrap();
    // Newest three, ascending, from the hot cache.
    let newest = engine
        .query(
            request(serde_json::json!({"limit": 3})),
            AccessOperation::LocalCli,
        )
        .unwrap();
    let sequences: Vec<u64> = newest
        .events
        .iter()
        .map(|e| e.data.sequence.get())
        .collect();
    assert_eq!(sequences.len(), 3);
    assert!(sequences.windows(2).all(|w| w[0] < w[1]));
    // By the raw label: the session's events only (the keyed id, never the label, is stored).
    let by_label = engine
        .query(
            request(serde_json::json!({"session_id": "a raw label", "limit": 200})),
            AccessOperation::AgentQuery,
        )
        .unwrap();
    assert_eq!(
        by_label.events.len(),
        62,
        "30 starts, 30 completions, start and end"
    );
    let stored_id = by_label.events[0].data.session_id.clone().unwrap();
    assert!(
        by_label
            .events
            .iter()
            .all(|e| e.data.session_id.as_ref() == Some(&stored_id))
    );
    // An empty answer leaves no access record.
    let empty = engine
        .query(
            request(serde_json::json!({"session_id": "nobody"})),
            AccessOperation::AgentQuery,
        )
        .unwrap();
    assert!(empty.events.is_empty());
    engine.flush().unwrap();
    let report = engine.shutdown();
    assert!(report.drained);
    let events = s.events();
    // Exactly one access record per non-empty read, with its count, none for the empty one;
    // and no read returned its own access record.
    assert_eq!(access_events(&events), [3, 62]);
    assert!(
        newest
            .events
            .iter()
            .all(|e| !matches!(e.data.payload, Payload::Access { .. }))
    );

    // A new process answers the same from disk (no hot cache): the index files and reads by
    // location.
    let engine = s.start_with(s.config());
    let again = engine
        .query(
            request(serde_json::json!({"session_id": "a raw label", "limit": 200})),
            AccessOperation::LocalCli,
        )
        .unwrap();
    assert_eq!(again.events, by_label.events);
    engine.shutdown();
}

#[test]
fn a_query_over_a_damaged_store_fails_closed() {
    use annal_schema::AccessOperation;
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    for _ in 0..5 {
        let _ = engine.capture().action_started(click(), None, None);
    }
    engine.flush().unwrap();
    engine.shutdown();
    // Flip a ciphertext byte in the middle of the (only) chunk's records.
    let chunks = s.layout.history_root().join("chunks");
    let chunk = std::fs::read_dir(&chunks)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&chunk).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&chunk, &bytes).unwrap();
    let engine = s.start_with(s.config());
    let answer = engine.query(request(serde_json::json!({})), AccessOperation::LocalCli);
    assert_eq!(
        answer,
        Err(annal_actors::QueryError::Refused(
            annal_schema::ErrorCode::HistoryStorageCorrupt
        ))
    );
    engine.shutdown();
}

#[test]
fn every_chunk_the_engine_closes_is_sealed_and_the_store_verifies_clean() {
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    let capture = engine.capture();
    // Past one 4 MiB chunk, at the queue's pace.
    for _ in 0..7_000 {
        while engine.queued_events() > 256 {
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = capture.action_started(click(), None, None);
    }
    engine.flush().unwrap();
    let status = engine.shutdown();
    assert!(status.drained);
    let storage: Arc<dyn Storage> = Arc::new(open_store(&s.layout, Access::Read).unwrap());
    let root = RootKey::from_bytes(ROOT);
    let seal_key = annal_engine::seal::SealKey::from_purpose_key(&root.seal_key());
    // The checkpoint in the credential store followed every seal.
    use annal_engine::seal::CheckpointStore;
    let store_id = annal_engine::store::read_store_id(s.layout.sidecar().unwrap()).unwrap();
    let checkpoint = annal_engine::seal::CredentialCheckpoints::new(
        s.provider.as_ref(),
        &s.namespace,
        store_id.as_ref(),
    )
    .load()
    .unwrap();
    let report = annal_engine::seal::verify(
        &storage,
        &HistoryKeys::from_root(RootKey::from_bytes(ROOT)),
        &seal_key,
        annal_engine::seal::CheckpointReading::Read(checkpoint),
    )
    .unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert!(report.seals >= 1, "the closed chunk was sealed");
    assert_eq!(checkpoint.map(|c| c.ordinal), Some(report.seals));
    assert_eq!(action_events(&s.events()), 7_000);
}

#[test]
fn at_the_quota_capture_stops_but_reads_and_their_access_records_keep_working() {
    use annal_engine::capture::Admission;
    use annal_engine::journal::{OnQuota, QUOTA_MIN_BYTES};
    use annal_schema::AccessOperation;
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    engine
        .set_quota(QUOTA_MIN_BYTES, OnQuota::StopCapture)
        .unwrap();
    // Below the minimum is refused, never clamped.
    assert!(
        engine
            .set_quota(QUOTA_MIN_BYTES - 1, OnQuota::StopCapture)
            .is_err()
    );
    let capture = engine.capture();
    let started = Instant::now();
    let status = loop {
        for _ in 0..100 {
            let _ = capture.action_started(click(), None, None);
        }
        let status = engine.flush().unwrap();
        if status.health == HealthCategory::QuotaReached {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{status:?}");
    };
    // The quota counts annal's whole store (history and journal chunks); the contract's
    // `bytes_used` is the history's chunks alone, as the reference counts.
    let journal_bytes: u64 = std::fs::read_dir(s.layout.sidecar().unwrap().join("journal"))
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len())
        .sum();
    assert!(
        status.bytes_used + journal_bytes >= QUOTA_MIN_BYTES,
        "{status:?}"
    );
    assert!(status.bytes_used < QUOTA_MIN_BYTES + journal_bytes + 200 * 1024);
    // Capture admits nothing new, and that is not a drop.
    let token = capture.action_started(click(), None, None);
    assert_eq!(token.admission(), Admission::NotAdmitted);
    capture.action_completed(token, outcome());
    let status = engine.flush().unwrap();
    assert_eq!(status.dropped_events, 0);
    // Reads work at the quota, and leave their access record.
    let newest = engine
        .query(
            request(serde_json::json!({"limit": 5})),
            AccessOperation::LocalCli,
        )
        .unwrap();
    assert_eq!(newest.events.len(), 5);
    engine.flush().unwrap();
    // A larger quota: capture resumes.
    let status = engine
        .set_quota(QUOTA_MIN_BYTES * 100, OnQuota::StopCapture)
        .unwrap();
    assert_eq!(status.health, HealthCategory::Ready);
    let token = capture.action_started(click(), None, None);
    assert_eq!(token.admission(), Admission::Accepted);
    capture.action_completed(token, outcome());
    engine.flush().unwrap();
    engine.shutdown();
    let events = s.events();
    assert_eq!(access_events(&events), [5]);
    assert!(drop_markers(&events).is_empty());
}

/// Every journal record on disk (the store must be readable with the test key).
fn journal_events(s: &Setup) -> Vec<annal_engine::journal::JournalEvent> {
    use annal_engine::journal::Journal;
    let storage: Arc<dyn Storage> = Arc::new(open_store(&s.layout, Access::Read).unwrap());
    let keys = annal_engine::keys::JournalKeys::from_namespace_root(&RootKey::from_bytes(ROOT));
    let report = StoreReader::<Journal>::new(storage).read(&keys).unwrap();
    assert!(!report.has_corruption(), "{report:#?}");
    report.records().map(|r| r.event.event.clone()).collect()
}

/// The chunks the journal records as pruned, with why, in journal order.
fn pruned_in_journal(
    s: &Setup,
) -> Vec<(
    annal_engine::profile::ChunkId,
    annal_engine::journal::PruneReason,
    u64,
)> {
    journal_events(s)
        .into_iter()
        .filter_map(|e| match e {
            annal_engine::journal::JournalEvent::ChunkPruned {
                chunk,
                reason,
                last_time_ms,
                ..
            } => Some((chunk, reason, last_time_ms)),
            _ => None,
        })
        .collect()
}

/// `verify` of the store as it is, and the same report told what the journal pruned.
fn verify_reports(
    s: &Setup,
) -> (
    annal_engine::seal::VerifyReport,
    annal_engine::seal::VerifyReport,
) {
    let storage: Arc<dyn Storage> = Arc::new(open_store(&s.layout, Access::Read).unwrap());
    let root = RootKey::from_bytes(ROOT);
    let seal_key = annal_engine::seal::SealKey::from_purpose_key(&root.seal_key());
    let plain = annal_engine::seal::verify(
        &storage,
        &HistoryKeys::from_root(RootKey::from_bytes(ROOT)),
        &seal_key,
        annal_engine::seal::CheckpointReading::NotConsulted,
    )
    .unwrap();
    let journal_keys = annal_engine::keys::JournalKeys::from_namespace_root(&root);
    let pruned = annal_engine::store::pruned_chunks(&storage, &journal_keys).unwrap();
    (plain.clone(), plain.with_pruned(&pruned))
}

fn sidecar_file(s: &Setup, area: &str, name: String) -> std::path::PathBuf {
    s.layout.sidecar().unwrap().join(area).join(name)
}

fn chunk_file(s: &Setup, chunk: annal_engine::profile::ChunkId) -> std::path::PathBuf {
    s.layout
        .history_root()
        .join("chunks")
        .join(annal_engine::store::chunk_file_name(chunk).as_str())
}

#[test]
fn retention_prunes_sealed_chunks_by_their_seals_time_records_them_and_verify_stays_clean() {
    use annal_engine::clock::{Clock, ManualClock};
    use annal_engine::journal::PruneReason;
    use annal_schema::AccessOperation;
    let s = setup();
    let clock = test_clock();
    let start = |clock: &ManualClock| s.start_on(clock);
    let engine = start(&clock);
    engine.enable().unwrap();
    let burst = |n: usize| {
        capture_accepted(&engine, n);
        engine.flush().unwrap();
    };
    // Day 0, then 31 minutes on (past the chunk age limit, so the first chunk closes and is
    // sealed), then 8 days on: both older chunks hold nothing a 7-day query may see.
    burst(10);
    clock.advance(Duration::from_secs(31 * 60));
    burst(10);
    clock.advance(Duration::from_secs(8 * DAY_SECS));
    burst(10);
    let visible = engine
        .query(
            request(serde_json::json!({"limit": 200})),
            AccessOperation::LocalCli,
        )
        .unwrap();
    assert_eq!(action_events(&visible.events), 10, "the newest burst only");
    let report = engine.shutdown();
    assert!(report.drained);

    // Both old chunks are recorded, by retention, with their seals' last times; their files
    // and index files are gone, their seals stay (the chain stays whole).
    let pruned = pruned_in_journal(&s);
    assert_eq!(pruned.len(), 2, "{pruned:?}");
    let storage: Arc<dyn Storage> = Arc::new(open_store(&s.layout, Access::Read).unwrap());
    let seal_key =
        annal_engine::seal::SealKey::from_purpose_key(&RootKey::from_bytes(ROOT).seal_key());
    for (chunk, reason, last_time_ms) in &pruned {
        assert_eq!(*reason, PruneReason::Retention);
        assert!(!chunk_file(&s, *chunk).exists());
        assert!(!sidecar_file(&s, "index", format!("{}.idx", chunk.to_hex())).exists());
        let seal = annal_engine::seal::read_one(storage.as_ref(), *chunk, &seal_key).unwrap();
        assert_eq!(seal.last_time.as_millis() as u64, *last_time_ms);
        let cutoff = clock.now_ms() - 7 * DAY_SECS * 1000;
        assert!(*last_time_ms < cutoff, "only what no query may see");
    }
    // What is left on disk is the newest burst (and its control events): nothing older.
    let events = s.events();
    assert_eq!(action_events(&events), 10);
    let max_before = events.last().unwrap().data.sequence.get();
    // verify: clean once told what the journal pruned; without the journal, the same chunks
    // are missing (a deletion is never taken for a prune on the files' word).
    let (plain, told) = verify_reports(&s);
    assert!(told.is_clean(), "{told:#?}");
    assert_eq!(
        told.findings()
            .filter(|(_, f)| f.as_str() == "pruned")
            .count(),
        2
    );
    assert!(!plain.is_clean());
    assert_eq!(
        plain
            .findings()
            .filter(|(_, f)| f.as_str() == "missing")
            .count(),
        2
    );

    // A restart prunes nothing more, and no sequence is handed out twice.
    let engine = start(&clock);
    capture_accepted(&engine, 5);
    engine.flush().unwrap();
    engine.shutdown();
    assert_eq!(pruned_in_journal(&s).len(), 2, "each chunk recorded once");
    let events = s.events();
    assert_strictly_increasing(&events);
    assert!(
        events
            .iter()
            .filter(|e| matches!(e.data.payload, Payload::ActionStarted))
            .skip(10)
            .all(|e| e.data.sequence.get() > max_before)
    );
}

/// The last chunk of a generation that crashed mid-append is torn and never sealed; once all
/// its records are past retention it goes like a sealed one (before, it stayed on disk for
/// good, its events outliving retention and its bytes counting against the quota).
#[test]
fn retention_prunes_a_crashed_generations_torn_chunk_by_its_records_times() {
    use annal_engine::clock::ManualClock;
    use annal_engine::journal::PruneReason;
    let s = setup();
    let (engine, storage, clock) = enabled_faulty_on_a_manual_clock(&s);
    capture_accepted(&engine, 10);
    engine.flush().unwrap();
    let torn = chunk_ids(&s);
    assert_eq!(torn.len(), 1, "{torn:?}");
    // The process dies (everything was synced, so the chunk is complete and unsealed), then
    // a partial record reaches its end: torn.
    crash(engine, storage, &mut |unsynced| unsynced);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(chunk_file(&s, torn[0]))
        .unwrap();
    std::io::Write::write_all(&mut file, &[0xA5; 37]).unwrap();
    drop(file);
    let torn_len = std::fs::metadata(chunk_file(&s, torn[0])).unwrap().len();

    let start = |clock: &ManualClock| s.start_on(clock);
    // Within retention it stays, and its records read.
    let engine = start(&clock);
    capture_accepted(&engine, 5);
    engine.flush().unwrap();
    assert!(engine.shutdown().drained);
    assert!(chunk_file(&s, torn[0]).exists());
    assert_eq!(
        std::fs::metadata(chunk_file(&s, torn[0])).unwrap().len(),
        torn_len,
        "a torn chunk is never written to again"
    );
    assert_eq!(action_events(&s.events()), 15);
    assert!(pruned_in_journal(&s).is_empty());

    // Eight days on, a new life prunes it by retention, recorded first.
    clock.advance(Duration::from_secs(8 * DAY_SECS));
    let engine = start(&clock);
    capture_accepted(&engine, 10);
    engine.flush().unwrap();
    assert!(engine.shutdown().drained);
    let pruned = pruned_in_journal(&s);
    let torn_pruned: Vec<_> = pruned.iter().filter(|(c, _, _)| *c == torn[0]).collect();
    assert_eq!(torn_pruned.len(), 1, "{pruned:?}");
    assert_eq!(torn_pruned[0].1, PruneReason::Retention);
    assert!(!chunk_file(&s, torn[0]).exists());
    assert_eq!(action_events(&s.events()), 10, "the newest life's only");
    // verify has nothing to say of it: no seal ever named the torn chunk. Without the
    // journal, only the sealed chunks pruned with it (the second life's) are missing.
    let (plain, told) = verify_reports(&s);
    assert!(told.is_clean(), "{told:#?}");
    let not_ok: Vec<&str> = plain
        .findings()
        .map(|(_, f)| f.as_str())
        .filter(|f| *f != "ok")
        .collect();
    assert_eq!(not_ok, vec!["missing"; pruned.len() - 1], "{plain:#?}");
}

/// A sealed chunk with bytes past its seal's length also reads as torn; it is `verify`'s to
/// report, never retention's to remove.
#[test]
fn retention_never_prunes_a_sealed_chunk_with_bytes_past_its_seal() {
    use annal_engine::clock::ManualClock;
    let s = setup();
    let clock = test_clock();
    let start = |clock: &ManualClock| s.start_on(clock);
    let engine = start(&clock);
    engine.enable().unwrap();
    capture_accepted(&engine, 10);
    // A clean stop seals the last chunk.
    assert!(engine.shutdown().drained);
    let sealed = chunk_ids(&s);
    assert_eq!(sealed.len(), 1, "{sealed:?}");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(chunk_file(&s, sealed[0]))
        .unwrap();
    std::io::Write::write_all(&mut file, &[0xA5; 37]).unwrap();
    drop(file);
    clock.advance(Duration::from_secs(8 * DAY_SECS));
    let engine = start(&clock);
    capture_accepted(&engine, 10);
    engine.flush().unwrap();
    assert!(engine.shutdown().drained);
    assert!(chunk_file(&s, sealed[0]).exists());
    assert!(
        pruned_in_journal(&s)
            .iter()
            .all(|(c, _, _)| *c != sealed[0])
    );
    let (_, told) = verify_reports(&s);
    assert!(
        told.findings().any(|(_, f)| f.as_str() == "replaced"),
        "{told:#?}"
    );
}

/// The chunk files of the history store now.
fn chunk_ids(s: &Setup) -> Vec<annal_engine::profile::ChunkId> {
    let mut ids: Vec<_> = std::fs::read_dir(s.layout.history_root().join("chunks"))
        .unwrap()
        .filter_map(|entry| {
            annal_engine::store::parse_chunk_file_name(entry.unwrap().file_name().to_str()?)
        })
        .collect();
    ids.sort_unstable_by_key(|id| id.to_hex());
    ids
}

/// A chunk whose seal was never written is never pruned: retention passes it by (its seal's
/// time is what proves it old), while the chunks closed after it, sealed, are pruned.
#[test]
fn retention_never_prunes_a_chunk_whose_seal_write_failed() {
    use annal_engine::journal::PruneReason;
    let s = setup();
    let (engine, storage, clock) = enabled_faulty_on_a_manual_clock(&s);
    let burst = |n: usize| {
        capture_accepted(&engine, n);
        engine.sync().unwrap();
    };
    burst(10);
    let first = chunk_ids(&s);
    assert_eq!(first.len(), 1, "{first:?}");
    // 31 minutes on, the next capture closes the first chunk (its age) and creates the next one
    // (the first creation from here); then the first chunk's seal job and its index file's write
    // run, and every creation from the second on fails: its seal is never written.
    storage.fail_from_nth(FaultOp::Create, 2, FaultKind::Eio);
    clock.advance(Duration::from_secs(31 * 60));
    burst(10);
    let started = Instant::now();
    // The seal file's and the index file's creations (the journal's own, once the seal's
    // failure is signalled, may come between them).
    while storage.injected() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no seal job ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Let the seal job (and the index file's write) finish against the fault.
    std::thread::sleep(Duration::from_millis(500));
    storage.clear_faults();
    // Eight days on, both older chunks hold only what no query may see; the second one
    // closes now, sealed.
    clock.advance(Duration::from_secs(8 * DAY_SECS));
    burst(10);
    engine.sync().unwrap();
    assert!(engine.shutdown().drained);
    drop(storage);

    let seal_key =
        annal_engine::seal::SealKey::from_purpose_key(&RootKey::from_bytes(ROOT).seal_key());
    let read: Arc<dyn Storage> = Arc::new(open_store(&s.layout, Access::Read).unwrap());
    assert!(
        annal_engine::seal::read_one(read.as_ref(), first[0], &seal_key).is_err(),
        "the fault did not reach the first chunk's seal"
    );
    let pruned = pruned_in_journal(&s);
    assert!(
        pruned.iter().all(|(chunk, _, _)| *chunk != first[0]),
        "an unsealed chunk was pruned: {pruned:?}"
    );
    assert!(chunk_file(&s, first[0]).exists());
    // Retention did run: the sealed chunks after it went, by retention.
    assert!(!pruned.is_empty());
    for (chunk, reason, _) in &pruned {
        assert_eq!(*reason, PruneReason::Retention);
        assert!(!chunk_file(&s, *chunk).exists());
    }
}

/// A seal job still running when the writer panics (its seal's rename held, as on a slow disk):
/// the restarted writer finds the chunk unsealed and seals it again, with the same ordinal and
/// predecessor, so the two jobs write the same seal and the chain stays one chain; `verify`
/// finds nothing, and nothing is lost.
#[test]
fn a_seal_job_outliving_a_writer_panic_leaves_one_chain() {
    use annal_engine::storage::Area;
    use annal_engine::store::CHUNK_MAX_AGE_SECS;
    let s = setup();
    let (engine, storage, clock) = enabled_faulty_on_a_manual_clock(&s);
    capture_accepted(&engine, 10);
    engine.flush().unwrap();
    // The next capture closes the first chunk (its age): its seal job's rename is held.
    let held = storage.hold_next_rename_into(Area::Seals);
    clock.advance(Duration::from_secs(CHUNK_MAX_AGE_SECS + 1));
    capture_accepted(&engine, 10);
    engine.flush().unwrap();
    assert!(
        held.wait_reached(Duration::from_secs(10)),
        "no seal job reached its rename"
    );
    engine.inject_writer_panic();
    // The new writer opens (and seals what it finds unsealed) while the old job is held.
    eventually(|| engine.flush().is_ok());
    assert!(
        engine.flush().is_ok(),
        "no writer came back while the old seal job was held"
    );
    held.release();
    // The new generation closes and seals chunks of its own, chained after the held seal.
    clock.advance(Duration::from_secs(CHUNK_MAX_AGE_SECS + 1));
    capture_accepted(&engine, 10);
    engine.flush().unwrap();
    assert!(engine.shutdown().drained);
    drop(storage);
    let (plain, told) = verify_reports(&s);
    assert!(plain.is_clean(), "{plain:#?}");
    assert!(told.is_clean(), "{told:#?}");
    assert_eq!(action_events(&s.events()), 30);
}

/// A chunk an append closed before it failed (the next chunk could not be created) is complete
/// and synced: the next append that succeeds reports it, and the writer seals it in the same
/// life (before, it stayed unsealed, so unprunable, until a restart found it).
#[test]
fn a_chunk_closed_by_a_failed_append_is_sealed_by_the_next_one() {
    let s = setup();
    let (engine, storage, clock) = enabled_faulty_on_a_manual_clock(&s);
    capture_accepted(&engine, 10);
    engine.flush().unwrap();
    let first = chunk_ids(&s);
    assert_eq!(first.len(), 1, "{first:?}");
    // 31 minutes on, the next capture closes the first chunk (its age); creating the next one
    // fails, and so does the append.
    storage.fail_from_nth(FaultOp::Create, 1, FaultKind::Eio);
    clock.advance(Duration::from_secs(31 * 60));
    capture_accepted(&engine, 10);
    let _ = engine.flush();
    assert_eq!(
        engine.status().unwrap().health,
        HealthCategory::StorageUnavailable,
        "the append did not meet the fault"
    );
    storage.clear_faults();
    capture_accepted(&engine, 10);
    engine.flush().unwrap();
    // Every seal job is awaited before the stop returns; the second chunk is still open until
    // the stop closes it, so only a seal written for the first chunk during this life can be
    // checked before it.
    let seal_key =
        annal_engine::seal::SealKey::from_purpose_key(&RootKey::from_bytes(ROOT).seal_key());
    let started = Instant::now();
    loop {
        let read: Arc<dyn Storage> = Arc::new(open_store(&s.layout, Access::Read).unwrap());
        if annal_engine::seal::read_one(read.as_ref(), first[0], &seal_key).is_ok() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the first chunk was never sealed in the writer's life"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(engine.shutdown().drained);
    drop(storage);
    let (plain, _) = verify_reports(&s);
    assert!(
        plain.findings().all(|(_, f)| f.as_str() != "unsealed"),
        "{plain:#?}"
    );
}

/// Captures `n` action starts, each of which must be admitted, waiting for room in the queue
/// so none is dropped.
fn capture_accepted(engine: &Engine, n: usize) {
    let capture = engine.capture();
    for _ in 0..n {
        while engine.queued_events() > 256 {
            std::thread::sleep(Duration::from_micros(200));
        }
        let token = capture.action_started(click(), None, None);
        assert_eq!(
            token.admission(),
            annal_engine::capture::Admission::Accepted,
            "capture stopped: {:?}",
            engine.status()
        );
    }
}

#[test]
fn with_evict_oldest_a_full_store_evicts_its_oldest_sealed_chunks_and_capture_keeps_going() {
    use annal_engine::journal::{OnQuota, PruneReason, QUOTA_MIN_BYTES};
    use annal_schema::AccessOperation;
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    engine
        .set_quota(QUOTA_MIN_BYTES, OnQuota::EvictOldest)
        .unwrap();
    // A first life leaves sealed chunks on disk; the second one's reader opens over them (the
    // seals defer them), so the eviction below takes chunks the reader has not loaded.
    capture_accepted(&engine, 600);
    assert!(engine.shutdown().drained);
    let engine = s.start_with(s.config());
    let first = engine
        .query(
            request(serde_json::json!({"limit": 1})),
            AccessOperation::LocalCli,
        )
        .unwrap();
    assert_eq!(first.events.len(), 1);
    // About three times the quota: every capture is admitted.
    const ACTIONS: usize = 5_000;
    capture_accepted(&engine, ACTIONS);
    let status = engine.flush().unwrap();
    assert_eq!(status.health, HealthCategory::Ready, "{status:?}");
    assert!(status.bytes_used < QUOTA_MIN_BYTES, "{status:?}");
    assert_eq!(status.dropped_events, 0);
    // The oldest went, the newest stayed: what is on disk is a suffix of what was captured.
    let events = s.events();
    assert_strictly_increasing(&events);
    let kept = action_events(&events);
    assert!(kept > 0 && kept < ACTIONS, "{kept}");
    let first_kept = events.first().unwrap().data.sequence.get();
    assert!(first_kept > 601, "the first life's events are gone");
    // Reads keep working and never reach for an evicted chunk: below the oldest kept event
    // nothing is returned (and nothing fails); from it on, what is on disk.
    let below = engine.query(
        request(serde_json::json!({"until_sequence": first_kept - 1, "limit": 200})),
        AccessOperation::LocalCli,
    );
    assert_eq!(below.map(|r| r.events.len()), Ok(0));
    let from = engine
        .query(
            request(serde_json::json!({"until_sequence": first_kept + 2, "limit": 200})),
            AccessOperation::LocalCli,
        )
        .unwrap();
    let on_disk: Vec<u64> = events
        .iter()
        .map(|e| e.data.sequence.get())
        .filter(|&q| q <= first_kept + 2)
        .collect();
    assert_eq!(
        from.events
            .iter()
            .map(|e| e.data.sequence.get())
            .collect::<Vec<_>>(),
        on_disk
    );
    engine.flush().unwrap();
    assert!(engine.shutdown().drained);

    let pruned = pruned_in_journal(&s);
    assert!(pruned.len() >= 2, "{pruned:?}");
    assert!(
        pruned
            .iter()
            .all(|(_, r, _)| *r == PruneReason::EvictOldest)
    );
    for (chunk, _, _) in &pruned {
        assert!(!chunk_file(&s, *chunk).exists());
    }
    let (_, told) = verify_reports(&s);
    assert!(told.is_clean(), "{told:#?}");

    // After a restart sequences continue above everything ever handed out (the journal's
    // mark), never reusing an evicted one.
    let max_before = s.events().last().unwrap().data.sequence.get();
    let engine = s.start_with(s.config());
    capture_accepted(&engine, 10);
    engine.flush().unwrap();
    engine.shutdown();
    let after = s.events();
    assert_strictly_increasing(&after);
    let new: Vec<u64> = after
        .iter()
        .map(|e| e.data.sequence.get())
        .filter(|&q| q > max_before)
        .collect();
    assert!(new.len() >= 10);
    let high_water = annal_engine::journal::State::replay(&journal_events(&s)).history_high_water;
    assert!(high_water.is_some_and(|h| h >= *new.last().unwrap()));
}

#[test]
fn queries_running_continuously_never_cause_a_drop() {
    use annal_schema::AccessOperation;
    let s = setup();
    let engine = Arc::new(s.start_with(s.config()));
    engine.enable().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let querier = {
        let engine = Arc::clone(&engine);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut answered = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Newest-50, and a walk back to the first record (through the planner, the hot
                // cache and reads by location), each with its durable audit record.
                for value in [
                    serde_json::json!({"limit": 50}),
                    serde_json::json!({"since_sequence": 1, "until_sequence": 200, "limit": 200}),
                ] {
                    engine
                        .query(request(value), AccessOperation::AgentQuery)
                        .unwrap();
                    answered += 1;
                }
            }
            answered
        })
    };
    // While the queries run back to back.
    let status = capture_bursts(&engine);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(querier.join().unwrap() > 10, "the queries ran throughout");
    assert_eq!(status.dropped_events, 0);
    let Ok(engine) = Arc::try_unwrap(engine) else {
        panic!("the engine is still shared")
    };
    engine.shutdown();
    let events = s.events();
    assert_eq!(action_events(&events), 4000);
    assert!(drop_markers(&events).is_empty());
}

/// The ids in a directory's `<32 hex>.<extension>` file names.
fn ids_in(dir: &std::path::Path, extension: &str) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .filter_map(|n| n.strip_suffix(extension).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_crashed_generations_complete_last_chunk_is_sealed_at_the_next_open() {
    let s = setup();
    let (engine, storage, _capture) = faulty_engine_with_flushed_actions(&s, 20);
    // The process dies after a sync: its chunk is complete, never closed, never sealed.
    crash(engine, storage, &mut |_| 0);
    let chunks_dir = s.layout.history_root().join("chunks");
    let seals_dir = s.layout.sidecar().unwrap().join("seals");
    let crashed = ids_in(&chunks_dir, ".cborseq");
    assert_eq!(crashed.len(), 1);
    assert!(ids_in(&seals_dir, ".seal").is_empty());

    // The next writer seals it at open (and writes nothing else before its clean stop).
    let engine = s.start_with(s.config());
    assert!(engine.status().unwrap().enabled);
    engine.shutdown();
    assert_eq!(ids_in(&chunks_dir, ".cborseq"), crashed);
    assert_eq!(
        ids_in(&seals_dir, ".seal"),
        crashed,
        "the crashed generation's chunk is sealed"
    );
    // And the store verifies clean, the new seal chained in order.
    let storage: Arc<dyn Storage> = Arc::new(open_store(&s.layout, Access::Read).unwrap());
    let root = RootKey::from_bytes(ROOT);
    let report = annal_engine::seal::verify(
        &storage,
        &HistoryKeys::from_root(RootKey::from_bytes(ROOT)),
        &annal_engine::seal::SealKey::from_purpose_key(&root.seal_key()),
        annal_engine::seal::CheckpointReading::NotConsulted,
    )
    .unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert_eq!(action_events(&s.events()), 20);
}

/// A store that exists and cannot be opened for writing (here a sidecar writable by others,
/// which the writer refuses) is a storage failure: status says so and capture admits nothing.
/// It is never reported as history switched off.
#[test]
fn a_store_that_cannot_be_opened_is_a_storage_failure_never_off() {
    use std::os::unix::fs::PermissionsExt;
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    let _ = capture_after(&engine);
    engine.flush().unwrap();
    engine.shutdown();
    let sidecar = s.layout.sidecar().unwrap().to_owned();
    std::fs::set_permissions(&sidecar, std::fs::Permissions::from_mode(0o777)).unwrap();
    let engine = s.start_with(s.config());
    let status = engine.status();
    let admission = capture_after(&engine).admission();
    engine.shutdown();
    std::fs::set_permissions(&sidecar, std::fs::Permissions::from_mode(0o700)).unwrap();
    let status = status.unwrap();
    assert_eq!(
        status.health,
        HealthCategory::StorageUnavailable,
        "{status:?}"
    );
    assert_ne!(admission, annal_engine::capture::Admission::Accepted);
    // Put right, the store is as it was: enabled, its event there.
    let engine = s.start_with(s.config());
    let status = engine.status().unwrap();
    engine.shutdown();
    assert!(status.enabled, "{status:?}");
    assert_eq!(status.health, HealthCategory::Ready, "{status:?}");
    assert_eq!(action_events(&s.events()), 1);
}

/// With the store's key gone, the owner's views of the journal say it cannot be read, at once:
/// never an empty list of grants or audit entries, never a timeout.
#[test]
fn without_its_key_the_journal_views_refuse_instead_of_answering_empty() {
    use annal_engine::policy::views::AuditFilter;
    let s = setup();
    let engine = s.start_with(s.config());
    engine.enable().unwrap();
    engine
        .change_policy(annal_actors::gate::PolicyChange::Grant {
            actor: annal_engine::policy::ActorId::new("agent-a").unwrap(),
            operation: annal_engine::policy::Operation::Query,
            terms: annal_engine::policy::GrantTerms::DEFAULT,
        })
        .unwrap();
    assert_eq!(engine.grants().unwrap().grants.len(), 1);
    engine.shutdown();
    // Another credential store, empty: the store's key is not there.
    let empty =
        annal_engine::keys::InMemoryProvider::new(Box::new(annal_engine::entropy::OsEntropy))
            .unwrap();
    let engine = Engine::start(s.config(), Arc::new(empty)).unwrap();
    assert_eq!(
        engine.status().unwrap().health,
        HealthCategory::KeyUnavailable
    );
    let started = Instant::now();
    assert_eq!(
        engine.grants().map(|g| g.grants.len()),
        Err(EngineError::JournalUnreadable)
    );
    assert_eq!(
        engine.audit(AuditFilter::default()).map(|e| e.len()),
        Err(EngineError::JournalUnreadable)
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    engine.shutdown();
}
