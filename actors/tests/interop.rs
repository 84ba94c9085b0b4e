//! One truth about on and off across implementations, and no gap without a cause (issue 28,
//! items 1 and 4), through the Engine API against a real store in a temp dir.
//!
//! The reference implementation's disable and pause are emulated here with annal's own contract
//! codec (`state.json` as the reference writes it, and the contract's `control` event in a chunk
//! of the emulated writer's own generation), because these tests need what the reference's public
//! API cannot produce: a crash between its two writes (the file alone, the event alone), and
//! narrowings at chosen points of annal's life. What the real reference left, built from its
//! source, is tested against its own fixtures in `reference_fixtures.rs`
//! (`engine/tests/fixtures/`: disabled, paused, a store with its stock key naming, chunks it
//! appended).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod embedded;

use std::num::NonZeroU64;
use std::sync::Arc;

use annal_actors::{Engine, EngineConfig};
use annal_engine::boot::BootId;
use annal_engine::capture::Admission;
use annal_engine::clock::{Clock, SystemClock};
use annal_engine::journal::{ContractSource, JournalEvent, State};
use annal_engine::keys::{HistoryKeys, KeyProvider, RootKey};
use annal_engine::storage::{Access, Storage};
use annal_engine::store::{
    History, StateMirror, StoreWriter, WriterConfig, open_store, read_state_mirror,
    write_state_mirror,
};
use annal_schema::{
    Capability, ControlOperation, Event, EventDraft, EventTime, HealthCategory, Payload, Platform,
    Subject,
};
use embedded::TestStore;

/// Clean restarts the no-gap test takes the store through (the acceptance number).
const CLEAN_RESTARTS: usize = 20;

type Setup = TestStore;

fn setup() -> Setup {
    TestStore::new()
}

impl TestStore {
    fn keys(&self) -> HistoryKeys {
        HistoryKeys::from_root(RootKey::from_bytes(embedded::ROOT))
    }

    fn state_file(&self) -> Option<StateMirror> {
        let storage = open_store(&self.layout, Access::Read).unwrap();
        read_state_mirror(&storage).unwrap()
    }

    /// What the reference does on `disable` or `pause`, in its order: `state.json` first, then
    /// the contract's `control` event in a chunk of its own generation (synced, never sealed).
    /// Needs the writer lock, so annal must be stopped.
    fn reference_narrows(&self, operation: ControlOperation) {
        let state = match operation {
            ControlOperation::Disable => StateMirror {
                enabled: false,
                paused: false,
            },
            ControlOperation::Pause => StateMirror {
                enabled: true,
                paused: true,
            },
            other => panic!("not a narrowing: {other:?}"),
        };
        let storage: Arc<dyn Storage> = Arc::new(open_store(&self.layout, Access::Write).unwrap());
        write_state_mirror(storage.as_ref(), state).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let mut writer = StoreWriter::<History>::open(
            Arc::clone(&storage),
            self.keys(),
            WriterConfig::new(self.namespace.primary_reference(), NonZeroU64::MIN),
            Arc::clone(&clock),
        )
        .unwrap();
        let draft = EventDraft {
            subject: Subject::new("control").unwrap(),
            time: EventTime::from_unix(clock.now_since_epoch()).unwrap(),
            session_id: None,
            action_id: None,
            platform: Platform::Linux,
            capability: None,
            application: None,
            payload: Payload::Control { operation },
        };
        writer.append(vec![draft]).unwrap();
        writer.sync().unwrap();
        // Dropped without `close`: the reference seals nothing.
    }
}

fn click() -> Capability {
    Capability::new("input.pointer.click").unwrap()
}

/// Captures one action; whether capture admitted it.
fn capture_one(engine: &Engine) -> Admission {
    engine
        .capture()
        .action_started(click(), None, None)
        .admission()
}

fn control_operations(events: &[Event]) -> Vec<ControlOperation> {
    events
        .iter()
        .filter_map(|e| match e.data.payload {
            Payload::Control { operation } => Some(operation),
            _ => None,
        })
        .collect()
}

fn sequences(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| e.data.sequence.get()).collect()
}

/// annal enabled and captured, stopped; the reference then narrowed the store with
/// `operation` (both places of the contract). Returns the engine started again on it.
fn narrowed_by_the_reference(s: &Setup, operation: ControlOperation) -> Engine {
    let engine = s.start();
    engine.enable().unwrap();
    assert_eq!(capture_one(&engine), Admission::Accepted);
    engine.flush().unwrap();
    engine.shutdown();
    s.reference_narrows(operation);
    s.start()
}

#[test]
fn a_store_the_reference_disabled_starts_disabled_and_admits_nothing_until_enabled() {
    let s = setup();
    let engine = narrowed_by_the_reference(&s, ControlOperation::Disable);
    let status = engine.status().unwrap();
    assert!(!status.enabled, "{status:?}");
    assert!(!status.paused);
    assert_eq!(status.health, HealthCategory::Disabled);
    assert_eq!(capture_one(&engine), Admission::NotAdmitted);
    assert_eq!(status.dropped_events, 0, "not admitted is not dropped");
    // Both places of the contract still say disabled.
    assert_eq!(
        s.state_file(),
        Some(StateMirror {
            enabled: false,
            paused: false
        })
    );
    // Until the owner enables it again, through annal: then both places say so.
    let status = engine.enable().unwrap();
    assert!(status.enabled && !status.paused);
    assert_eq!(capture_one(&engine), Admission::Accepted);
    engine.flush().unwrap();
    engine.shutdown();
    assert_eq!(
        s.state_file(),
        Some(StateMirror {
            enabled: true,
            paused: false
        })
    );
    let events = s.events();
    let controls = control_operations(&events);
    // The owner's enable is the last lifecycle word (the flush after it is no lifecycle change).
    let lifecycle: Vec<_> = controls
        .iter()
        .filter(|op| **op != ControlOperation::Flush)
        .collect();
    assert_eq!(
        lifecycle.last().copied(),
        Some(&ControlOperation::Enable),
        "{controls:?}"
    );
    assert!(controls.contains(&ControlOperation::Disable));
    // annal journaled what it observed, and where: the reference's event, by its sequence.
    let reference_disable = events
        .iter()
        .find(|e| {
            e.data.payload
                == (Payload::Control {
                    operation: ControlOperation::Disable,
                })
        })
        .unwrap()
        .data
        .sequence
        .get();
    let observed: Vec<JournalEvent> = s
        .journal()
        .into_iter()
        .filter(|e| matches!(e, JournalEvent::ContractObserved { .. }))
        .collect();
    assert_eq!(
        observed,
        [JournalEvent::ContractObserved {
            operation: ControlOperation::Disable,
            source: ContractSource::ControlEvent,
            sequence: reference_disable,
        }],
        "the disable observed once, from the event (the state file then agreed)"
    );
    // The enable holds across a restart: the reference's disable was taken once, not again.
    let engine = s.start();
    assert!(engine.status().unwrap().enabled);
    assert_eq!(capture_one(&engine), Admission::Accepted);
    engine.shutdown();
}

#[test]
fn a_store_the_reference_paused_starts_paused_and_admits_nothing_until_resumed() {
    let s = setup();
    let engine = narrowed_by_the_reference(&s, ControlOperation::Pause);
    let status = engine.status().unwrap();
    assert!(status.enabled && status.paused, "{status:?}");
    assert_eq!(status.health, HealthCategory::Paused);
    assert_eq!(capture_one(&engine), Admission::NotAdmitted);
    assert_eq!(
        s.state_file(),
        Some(StateMirror {
            enabled: true,
            paused: true
        })
    );
    let status = engine.resume().unwrap();
    assert!(status.enabled && !status.paused);
    assert_eq!(capture_one(&engine), Admission::Accepted);
    engine.shutdown();
    assert_eq!(
        s.state_file(),
        Some(StateMirror {
            enabled: true,
            paused: false
        })
    );
    let engine = s.start();
    let status = engine.status().unwrap();
    assert!(status.enabled && !status.paused, "{status:?}");
    engine.shutdown();
}

#[test]
fn a_disable_in_state_json_alone_wins_too() {
    // A crash of the reference between its two writes (state.json first): the file says
    // disabled, the stream's newest control event still says enabled. Narrowing wins, and annal
    // writes the contract's disable event so both places agree.
    let s = setup();
    let engine = s.start();
    engine.enable().unwrap();
    engine.shutdown();
    {
        let storage = open_store(&s.layout, Access::Write).unwrap();
        write_state_mirror(
            &storage,
            StateMirror {
                enabled: false,
                paused: false,
            },
        )
        .unwrap();
    }
    let engine = s.start();
    let status = engine.status().unwrap();
    assert!(!status.enabled, "{status:?}");
    assert_eq!(capture_one(&engine), Admission::NotAdmitted);
    engine.shutdown();
    let controls = control_operations(&s.events());
    assert_eq!(
        controls.last(),
        Some(&ControlOperation::Disable),
        "{controls:?}"
    );
}

#[test]
fn an_enable_written_elsewhere_never_widens_a_store_annal_disabled() {
    let s = setup();
    let engine = s.start();
    engine.enable().unwrap();
    engine.disable().unwrap();
    engine.shutdown();
    {
        let storage = open_store(&s.layout, Access::Write).unwrap();
        write_state_mirror(
            &storage,
            StateMirror {
                enabled: true,
                paused: false,
            },
        )
        .unwrap();
    }
    let engine = s.start();
    assert!(!engine.status().unwrap().enabled);
    assert_eq!(capture_one(&engine), Admission::NotAdmitted);
    engine.shutdown();
    assert_eq!(
        s.state_file(),
        Some(StateMirror {
            enabled: false,
            paused: false
        }),
        "annal's answer is written back"
    );
}

/// `flush` writes the contract's `control` event, as the reference's does (issue 28, item 5),
/// after everything captured before it, each time it is asked; on a store that is not enabled
/// (never, or any more) it writes nothing and still answers.
#[test]
fn a_flush_writes_the_contracts_control_event_as_the_reference_does() {
    let s = setup();
    let engine = s.start();
    assert!(engine.flush().is_ok(), "a flush before enable answers");
    engine.enable().unwrap();
    assert_eq!(capture_one(&engine), Admission::Accepted);
    engine.flush().unwrap();
    engine.flush().unwrap();
    engine.disable().unwrap();
    assert!(engine.flush().is_ok(), "a flush after disable answers");
    engine.shutdown();
    let events = s.events();
    assert_eq!(
        control_operations(&events),
        [
            ControlOperation::Enable,
            ControlOperation::Flush,
            ControlOperation::Flush,
            ControlOperation::Disable
        ]
    );
    let action = events
        .iter()
        .position(|e| !matches!(e.data.payload, Payload::Control { .. }))
        .unwrap();
    let first_flush = events
        .iter()
        .position(|e| {
            matches!(
                e.data.payload,
                Payload::Control {
                    operation: ControlOperation::Flush
                }
            )
        })
        .unwrap();
    assert!(
        action < first_flush,
        "the flush follows what it made durable"
    );
}

#[test]
fn twenty_clean_restarts_leave_no_gap_in_the_sequence() {
    let s = setup();
    for round in 0..CLEAN_RESTARTS {
        let engine = s.start();
        if round == 0 {
            engine.enable().unwrap();
        }
        for _ in 0..3 {
            assert_eq!(capture_one(&engine), Admission::Accepted);
        }
        engine.flush().unwrap();
        engine.shutdown();
    }
    let sequences = sequences(&s.events());
    assert!(sequences.len() > 3 * CLEAN_RESTARTS, "{sequences:?}");
    let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
    assert_eq!(sequences, expected, "no gap, no repeat");
}

#[test]
fn the_first_event_after_a_clean_restart_follows_the_last_one_before_it() {
    let s = setup();
    let engine = s.start();
    engine.enable().unwrap();
    engine.shutdown();
    let engine = s.start();
    assert_eq!(capture_one(&engine), Admission::Accepted);
    engine.flush().unwrap();
    engine.shutdown();
    // The enable's control event, the action, the flush's control event: 1, 2, 3 (not 1,
    // 65538, ...).
    assert_eq!(sequences(&s.events()), vec![1, 2, 3]);
}

/// An engine on `storage` (a fault-injecting store) in `in_boot`, given up on after `restarts`
/// writer failures, whose group-commit tick never comes (only a flush syncs); with
/// `flush_drains_only`, nothing but a flush drains the capture queue either.
fn start_faulty(
    s: &Setup,
    storage: &annal_engine::storage::FaultyStorage,
    in_boot: Option<BootId>,
    restarts: u32,
    flush_drains_only: bool,
) -> Engine {
    let mut config = EngineConfig::new(s.layout.clone(), s.namespace.clone());
    config.boot = in_boot;
    config.restart_policy.max_restarts = restarts;
    config.sync_interval = std::time::Duration::from_secs(600);
    if flush_drains_only {
        config.drain_tick = std::time::Duration::from_secs(600);
        config.drain_idle_tick = std::time::Duration::from_secs(600);
    }
    Engine::start_with(
        config,
        Arc::clone(&s.provider) as Arc<dyn KeyProvider>,
        Arc::new(SystemClock),
        Some(Arc::new(storage.clone())),
    )
    .unwrap()
}

/// A boot of the machine, as a test names it.
fn boot(n: u8) -> Option<BootId> {
    Some(BootId::from_bytes([n; 16]))
}

/// Captures until a writer generation newer than the one that held `before` took an event and
/// made it durable.
fn capture_until_a_new_writer_wrote(s: &Setup, engine: &Engine, before: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let _ = capture_one(engine);
        if engine.flush().is_ok() && sequences(&s.events()).iter().any(|&q| q > before + 1) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "no writer came back");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The gaps in `sequences`, as `(first, last)` missing.
fn gaps(sequences: &[u64]) -> Vec<(u64, u64)> {
    sequences
        .windows(2)
        .filter(|w| w[1] > w[0] + 1)
        .map(|w| (w[0] + 1, w[1] - 1))
        .collect()
}

#[test]
fn after_a_writer_crash_in_the_same_boot_the_next_event_follows_with_no_gap() {
    // A panic ends the writer without its clean stop (no release). The page cache survived
    // (same boot): the restarted writer makes what it found durable and releases the rest of
    // the reservation, so the next event follows the last one written.
    let s = setup();
    let mut config = s.config();
    config.boot = boot(1);
    let engine = s.start_with(config);
    engine.enable().unwrap();
    for _ in 0..3 {
        assert_eq!(capture_one(&engine), Admission::Accepted);
    }
    engine.flush().unwrap();
    let before = sequences(&s.events()).last().copied().unwrap();
    engine.inject_writer_panic();
    capture_until_a_new_writer_wrote(&s, &engine, before);
    engine.shutdown();
    let sequences = sequences(&s.events());
    let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
    assert_eq!(sequences, expected, "no gap, no repeat");
    let journal = s.journal();
    let state = State::replay(&journal);
    assert!(state.skipped.is_empty(), "{:?}", state.skipped);
    assert!(state.lost.is_empty(), "{:?}", state.lost);
    assert!(
        journal.iter().any(|e| matches!(
            e,
            JournalEvent::SequenceReleased { high_water, .. } if *high_water >= before
        )),
        "the crashed writer's reservation was released at the next open"
    );
}

/// An engine in `boot` whose writer is given up on at its first failure; it panics, so the
/// engine stops with the writer's reservation never released (as a power loss leaves it).
fn crash_the_writer_for_good(s: &Setup, in_boot: Option<BootId>) -> u64 {
    let mut config = s.config();
    config.boot = in_boot;
    config.restart_policy = annal_engine::supervision::RestartPolicy {
        max_restarts: 0,
        window: std::time::Duration::from_secs(600),
    };
    let engine = s.start_with(config);
    engine.enable().unwrap();
    for _ in 0..3 {
        assert_eq!(capture_one(&engine), Admission::Accepted);
    }
    engine.flush().unwrap();
    engine.inject_writer_panic();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while engine.status().unwrap().health != HealthCategory::WriterStopped {
        assert!(std::time::Instant::now() < deadline, "never gave up");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    engine.shutdown();
    sequences(&s.events()).last().copied().unwrap()
}

#[test]
fn after_a_crash_in_another_boot_the_skip_is_recorded_and_accounts_for_the_only_gap() {
    // After another boot (a power loss), a reader may have seen records the disk lost: the
    // reservation is skipped, and that gap, and only that one, has a record saying why.
    let s = setup();
    let last = crash_the_writer_for_good(&s, boot(1));
    let mut config = s.config();
    config.boot = boot(2);
    let engine = s.start_with(config);
    assert_eq!(capture_one(&engine), Admission::Accepted);
    engine.flush().unwrap();
    engine.shutdown();
    let sequences = sequences(&s.events());
    let state = State::replay(&s.journal());
    assert_eq!(state.skipped.len(), 1, "{:?}", state.skipped);
    assert_eq!(*state.skipped[0].start(), last + 1, "{:?}", state.skipped);
    // A skip is not a loss: no record was reported lost.
    assert!(state.lost.is_empty(), "{:?}", state.lost);
    let gaps = gaps(&sequences);
    assert_eq!(gaps.len(), 1, "{sequences:?}");
    let (first, last) = gaps[0];
    assert!(
        state.skipped[0].contains(&first) && state.skipped[0].contains(&last),
        "gap {first}..={last} not accounted for by {:?}",
        state.skipped
    );
    assert!(
        last - first < annal_engine::history::IN_FLIGHT_SEQUENCES_MAX,
        "bounded by what the crashed writer may have had in flight, not by its reservation"
    );
}

/// A power loss with more appended than the in-flight bound since the last flush: the writer
/// synced on its own before it ran further ahead, so the power loss takes at most the bound,
/// and the next writer (another boot) skips only that far, every record lost inside the skip.
#[test]
fn a_power_loss_loses_and_skips_at_most_the_in_flight_bound() {
    use annal_engine::history::IN_FLIGHT_SEQUENCES_MAX;
    use annal_engine::storage::FaultyStorage;
    // Well past the bound, with no sync but the writer's own.
    const APPENDED: u64 = 3 * IN_FLIGHT_SEQUENCES_MAX;
    let s = setup();
    annal_engine::store::create_store(&s.layout).unwrap();
    let storage = FaultyStorage::new(open_store(&s.layout, Access::Write).unwrap());
    // Appended on the drain tick; the group commit's tick never comes.
    let start_in = |in_boot| start_faulty(&s, &storage, in_boot, 0, false);
    let engine = start_in(boot(1));
    engine.enable().unwrap();
    engine.flush().unwrap();
    let before = sequences(&s.events()).len() as u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut accepted = 0;
    while accepted < APPENDED {
        // Under the capture queue's capacity, then until the writer appended them.
        for _ in 0..400 {
            if capture_one(&engine) == Admission::Accepted {
                accepted += 1;
            }
        }
        while (sequences(&s.events()).len() as u64) < before + accepted {
            assert!(std::time::Instant::now() < deadline, "never appended");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    // The writer dies (no clean stop), then the power fails, keeping nothing unsynced.
    engine.inject_writer_panic();
    while engine.status().unwrap().health != HealthCategory::WriterStopped {
        assert!(std::time::Instant::now() < deadline, "never gave up");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let seen = sequences(&s.events());
    storage.crash(&mut |_| 0).unwrap();
    engine.shutdown();
    let kept = sequences(&s.events());
    let lost: Vec<u64> = seen.iter().filter(|q| !kept.contains(q)).copied().collect();
    assert!(
        (lost.len() as u64) <= IN_FLIGHT_SEQUENCES_MAX,
        "{} of {} records seen were lost",
        lost.len(),
        seen.len()
    );
    let engine = start_in(boot(2));
    assert_eq!(capture_one(&engine), Admission::Accepted);
    engine.flush().unwrap();
    engine.shutdown();
    drop(storage);
    let state = State::replay(&s.journal());
    assert_eq!(state.skipped.len(), 1, "{:?}", state.skipped);
    let skip = state.skipped[0].clone();
    assert!(
        lost.iter().all(|q| skip.contains(q)),
        "lost {lost:?} outside the skip {skip:?}"
    );
    assert!(
        skip.clone().count() as u64 <= IN_FLIGHT_SEQUENCES_MAX,
        "skip {skip:?}"
    );
    let after = sequences(&s.events());
    let gaps = gaps(&after);
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert!(skip.contains(&gaps[0].0) && skip.contains(&gaps[0].1));
}

#[test]
fn the_same_crash_followed_by_the_same_boot_leaves_no_gap() {
    // The control of the test above: only the boot differs.
    let s = setup();
    crash_the_writer_for_good(&s, boot(1));
    let mut config = s.config();
    config.boot = boot(1);
    let engine = s.start_with(config);
    assert_eq!(capture_one(&engine), Admission::Accepted);
    engine.flush().unwrap();
    engine.shutdown();
    let sequences = sequences(&s.events());
    assert!(gaps(&sequences).is_empty(), "{sequences:?}");
    assert!(State::replay(&s.journal()).skipped.is_empty());
}

/// A writer crashed in this boot left records in the page cache only. The next writer of the
/// same boot makes them durable before it releases the reservation: a power loss after that
/// loses none of them, so no sequence the release let it hand out again was ever seen.
#[test]
fn a_recovering_writer_makes_the_crashed_writers_unsynced_records_durable_first() {
    use annal_engine::storage::FaultyStorage;
    let s = setup();
    annal_engine::store::create_store(&s.layout).unwrap();
    let storage = FaultyStorage::new(open_store(&s.layout, Access::Write).unwrap());
    // Appended on the drain tick, synced only by a flush.
    let start_in = |in_boot, restarts| start_faulty(&s, &storage, in_boot, restarts, false);
    // Life 1: three durable, then five appended and never synced; the writer crashes.
    let engine = start_in(boot(1), 0);
    engine.enable().unwrap();
    for _ in 0..3 {
        assert_eq!(capture_one(&engine), Admission::Accepted);
    }
    engine.flush().unwrap();
    let durable = sequences(&s.events()).len();
    for _ in 0..5 {
        assert_eq!(capture_one(&engine), Admission::Accepted);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sequences(&s.events()).len() < durable + 5 {
        assert!(std::time::Instant::now() < deadline, "never appended");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    engine.inject_writer_panic();
    while engine.status().unwrap().health != HealthCategory::WriterStopped {
        assert!(std::time::Instant::now() < deadline, "never gave up");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    engine.shutdown();
    let seen = sequences(&s.events());
    assert_eq!(
        seen.len(),
        durable + 5,
        "a reader sees the unsynced records"
    );
    // Life 2, same boot: recovers (no gap) and writes on; then the power fails before its
    // own next sync, keeping nothing unsynced.
    let engine = start_in(boot(1), 0);
    assert_eq!(capture_one(&engine), Admission::Accepted);
    engine.flush().unwrap();
    storage.crash(&mut |_| 0).unwrap();
    drop(engine);
    // Life 3, after the reboot: every record a reader saw before is still there.
    let engine = start_in(boot(2), 0);
    engine.shutdown();
    drop(storage);
    let after = sequences(&s.events());
    assert!(
        seen.iter().all(|q| after.contains(q)),
        "records seen before the recovery were lost: saw {seen:?}, now {after:?}"
    );
    let expected: Vec<u64> = (1..=after.len() as u64).collect();
    assert_eq!(after, expected, "no gap, no repeat");
}

/// Bytes of the regular files directly in `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap())
        .filter(|meta| meta.is_file())
        .map(|meta| meta.len())
        .sum()
}

#[test]
fn bytes_used_counts_the_contract_stores_chunks_as_the_reference_does() {
    let s = setup();
    let engine = s.start();
    engine.enable().unwrap();
    for _ in 0..5 {
        assert_eq!(capture_one(&engine), Admission::Accepted);
    }
    let status = engine.flush().unwrap();
    let chunks = dir_bytes(&s.layout.history_root().join("chunks"));
    let journal = dir_bytes(&s.layout.sidecar().unwrap().join("journal"));
    assert!(chunks > 0 && journal > 0);
    // The reference's `bytes_used`: its `chunks/` only, never annal's sidecar journal.
    assert_eq!(status.bytes_used, chunks);
    engine.shutdown();
    let engine = s.start();
    let chunks = dir_bytes(&s.layout.history_root().join("chunks"));
    assert_eq!(engine.status().unwrap().bytes_used, chunks);
    // annal's own total beside it: the journal too, which is what the quota counts. The
    // writer's figure is as it last read the journal, which only grows (its own ticks append),
    // so it is at most what is on disk by the time this looks.
    let usage = engine.usage().unwrap();
    let journal = dir_bytes(&s.layout.sidecar().unwrap().join("journal"));
    assert_eq!(usage.history_bytes, chunks);
    assert!(
        usage.journal_bytes > 0 && usage.journal_bytes <= journal,
        "{usage:?}, {journal} on disk"
    );
    assert_eq!(
        usage.quota_counted_bytes(),
        usage.history_bytes + usage.journal_bytes
    );
    engine.shutdown();
}

/// The sequences missing between 1 and the highest on disk.
fn missing(sequences: &[u64]) -> Vec<u64> {
    let present: std::collections::BTreeSet<u64> = sequences.iter().copied().collect();
    let top = sequences.last().copied().unwrap_or(0);
    (1..=top).filter(|q| !present.contains(q)).collect()
}

/// A store walked through clean stops, a failed sync, a writer crash in the same boot and one
/// followed by another boot: every missing sequence has its cause in the journal (lost by the
/// failed sync, or skipped after the other boot's crash), and the clean stops and the
/// same-boot crash add none. (Drops of the capture queue never take a sequence;
/// retention's gaps are the `chunk_pruned` chunks' ranges, tested in `engine.rs`.)
#[test]
fn every_gap_has_a_recorded_cause() {
    use annal_engine::storage::{Area, FaultyStorage, SyncFailure};
    let s = setup();
    annal_engine::store::create_store(&s.layout).unwrap();
    let storage = FaultyStorage::new(open_store(&s.layout, Access::Write).unwrap());
    // Only a flush drains and syncs, so the failed sync below meets a known batch.
    let start_in = |in_boot, restarts| start_faulty(&s, &storage, in_boot, restarts, true);
    let start = || {
        start_in(
            boot(1),
            annal_engine::supervision::RestartPolicy::default().max_restarts,
        )
    };
    let capture = |engine: &Engine, n: usize| {
        for _ in 0..n {
            assert_eq!(capture_one(engine), Admission::Accepted);
        }
    };
    // Life 1: clean.
    let engine = start();
    engine.enable().unwrap();
    capture(&engine, 3);
    engine.flush().unwrap();
    engine.shutdown();
    // Life 2: a failed sync loses a batch; the disk recovers; a clean stop.
    let engine = start();
    capture(&engine, 3);
    engine.flush().unwrap();
    storage.fail_next_sync_in(Area::Chunks, SyncFailure::DataLost);
    capture(&engine, 4);
    assert!(engine.flush().is_err());
    storage.clear_faults();
    capture(&engine, 2);
    engine.flush().unwrap();
    engine.shutdown();
    // Life 3: the writer crashes (no clean stop) and comes back in the same boot; then a
    // clean stop.
    let engine = start();
    capture(&engine, 2);
    engine.flush().unwrap();
    let before = s.events().last().unwrap().data.sequence.get();
    engine.inject_writer_panic();
    capture_until_a_new_writer_wrote(&s, &engine, before);
    engine.shutdown();
    // Life 4: the writer crashes for good (never released), and the machine reboots.
    let engine = start_in(boot(1), 0);
    capture(&engine, 2);
    engine.flush().unwrap();
    engine.inject_writer_panic();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while engine.status().unwrap().health != HealthCategory::WriterStopped {
        assert!(std::time::Instant::now() < deadline, "never gave up");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    engine.shutdown();
    // Life 5: clean, in another boot.
    let engine = start_in(
        boot(2),
        annal_engine::supervision::RestartPolicy::default().max_restarts,
    );
    capture(&engine, 3);
    engine.flush().unwrap();
    engine.shutdown();
    drop(storage);

    let sequences = sequences(&s.events());
    let state = State::replay(&s.journal());
    assert!(
        !state.lost.is_empty(),
        "the failed sync's records were lost"
    );
    assert_eq!(
        state.skipped.len(),
        1,
        "one crash before another boot: {:?}",
        state.skipped
    );
    let unexplained: Vec<u64> = missing(&sequences)
        .into_iter()
        .filter(|&q| !state.is_lost(q) && !state.skipped.iter().any(|r| r.contains(&q)))
        .collect();
    assert!(
        unexplained.is_empty(),
        "gaps without a cause: {unexplained:?}"
    );
    // The same-boot crash left none: the only gaps are the lost batch and the skip.
    assert_eq!(
        gaps(&sequences).len(),
        state.lost.len() + 1,
        "{sequences:?}"
    );
    // The newest events, after the last clean restart, follow on with no gap.
    let tail = &sequences[sequences.len() - 4..];
    assert!(tail.windows(2).all(|w| w[1] == w[0] + 1), "{tail:?}");
}
