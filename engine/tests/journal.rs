//! The engine journal on a real store: events decided by the pure core are written with
//! `StoreWriter::<Journal>`, read back with `StoreReader::<Journal>`, and rebuild the same state
//! and health; the journal's chunks live only in the sidecar, and no plaintext reaches disk.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::num::NonZeroU64;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use annal_engine::clock::{Clock, ManualClock};
use annal_engine::health::{Child, FailureCategory, Signal, SignalKind};
use annal_engine::journal::{
    CallerKind, Command, Journal, JournalEntry, JournalEvent, OnQuota, State, decide,
};
use annal_engine::keys::{JournalKeys, KeyReference};
use annal_engine::store::{StoreReader, StoreWriter};
use annal_engine::supervision::{Decision, RestartPolicy};
use annal_schema::HealthCategory;
use common::*;

/// Planted in an event field: it must never appear on disk in the clear.
const MARKER: &str = "PLANTED-journal-marker-5f1e.v1";

fn journal_keys() -> JournalKeys {
    JournalKeys::from_namespace_root(&fixture_key())
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            out.extend(files_under(&entry.path()));
        } else {
            out.push(entry.path());
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The shell's loop, minus threads: decide, stamp with the injected clock, append, sync, apply.
struct Shell {
    state: State,
    writer: StoreWriter<Journal>,
    clock: ManualClock,
}

impl Shell {
    fn run(&mut self, caller: CallerKind, command: Command) {
        let events = decide(&self.state, command, caller).unwrap();
        let time_ms = u64::try_from(self.clock.now_since_epoch().as_millis()).unwrap();
        let entries = events
            .iter()
            .map(|event| JournalEntry {
                time_ms,
                event: event.clone(),
            })
            .collect();
        self.writer.append(entries).unwrap();
        self.writer.sync().unwrap();
        for event in &events {
            self.state.apply(event);
        }
        self.clock.advance(Duration::from_millis(250));
    }

    fn signal(&mut self, kind: SignalKind) {
        let at_ms = u64::try_from(self.clock.now_since_epoch().as_millis()).unwrap();
        self.run(
            CallerKind::Daemon,
            Command::RecordSignal(Signal { at_ms, kind }),
        );
    }
}

#[test]
fn the_journal_rebuilds_the_same_state_from_a_real_store() {
    let (_dir, layout) = new_store();
    let storage = open_write(&layout);
    let clock = ManualClock::new(Duration::from_secs(1_764_540_843));
    let mut config = writer_config();
    config.max_records_per_chunk = 4;
    let open = |clock: &ManualClock| {
        StoreWriter::<Journal>::open(
            storage.clone(),
            journal_keys(),
            config.clone(),
            Arc::new(clock.clone()),
        )
        .unwrap()
    };
    let mut shell = Shell {
        state: State::default(),
        writer: open(&clock),
        clock: clock.clone(),
    };
    let owner = CallerKind::OwnerCli;
    let daemon = CallerKind::Daemon;
    shell.run(
        daemon,
        Command::StartKeyEpoch {
            epoch: NonZeroU64::MIN,
            reference: KeyReference::new(MARKER).unwrap(),
        },
    );
    shell.signal(SignalKind::ChildStarted {
        child: Child::Writer,
    });
    shell.run(owner, Command::Enable);
    shell.run(owner, Command::SetRetention { days: 30 });
    shell.run(
        CallerKind::Embedder,
        Command::SetQuota {
            bytes: 1 << 30,
            on_quota: OnQuota::EvictOldest,
        },
    );
    shell.run(owner, Command::Pause);
    shell.run(owner, Command::Resume);
    shell.run(daemon, Command::RecordDrops { count: 3 });
    shell.run(
        daemon,
        Command::MarkSequence {
            high_water: 41,
            boot: None,
            in_flight_max: None,
        },
    );
    shell.run(owner, Command::Flush);

    // A new writer generation (a process restart): the state so far is read back first.
    drop(shell.writer);
    shell.writer = open(&clock);
    let reread = StoreReader::<Journal>::new(open_read(&layout))
        .read(&journal_keys())
        .unwrap();
    let events: Vec<JournalEvent> = reread.records().map(|r| r.event.event.clone()).collect();
    assert_eq!(State::replay(&events), shell.state);

    // The writer crash-loops; the supervisor decides from the persisted signals each time.
    for _ in 0..6 {
        shell.signal(SignalKind::ChildFailed {
            child: Child::Writer,
            category: FailureCategory::StorageUnavailable,
        });
        let now_ms = u64::try_from(shell.clock.now_since_epoch().as_millis()).unwrap();
        let history = shell.state.restart_history(Child::Writer);
        match annal_engine::supervision::decide(&history, now_ms, &RestartPolicy::default()) {
            Decision::Restart => shell.signal(SignalKind::ChildRestarted {
                child: Child::Writer,
            }),
            Decision::GiveUp => shell.signal(SignalKind::RestartLimitReached {
                child: Child::Writer,
            }),
        }
    }
    shell.run(
        daemon,
        Command::MarkSequence {
            high_water: 97,
            boot: None,
            in_flight_max: None,
        },
    );
    drop(shell.writer);

    // Read everything back from disk and rebuild.
    let report = StoreReader::<Journal>::new(open_read(&layout))
        .read(&journal_keys())
        .unwrap();
    assert!(!report.has_corruption() && !report.has_unreadable());
    let sequences: Vec<u64> = report.records().map(|r| r.event.sequence.get()).collect();
    assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");
    let streams: std::collections::BTreeSet<_> =
        report.records().map(|r| r.event.stream.clone()).collect();
    assert_eq!(streams.len(), 2, "one stream per writer generation");
    assert!(report.chunks.len() >= 3, "rotated into several chunks");
    let events: Vec<JournalEvent> = report.records().map(|r| r.event.event.clone()).collect();
    let rebuilt = State::replay(&events);
    assert_eq!(rebuilt, shell.state);
    let flags = rebuilt.status_flags();
    assert!(flags.enabled && !flags.paused);
    assert_eq!(
        (
            flags.retention_days,
            flags.quota_bytes,
            flags.dropped_events
        ),
        (30, 1 << 30, 3)
    );
    assert_eq!(rebuilt.on_quota, OnQuota::EvictOldest);
    assert_eq!(rebuilt.history_high_water, Some(97));
    assert_eq!(
        rebuilt.key_epoch.as_ref().map(|k| k.reference.as_str()),
        Some(MARKER)
    );
    // Five restarts within the window, the sixth failure gives up: the writer is stopped, and
    // replaying the persisted signals says so after the restart too.
    assert_eq!(rebuilt.restart_history(Child::Writer), Vec::<u64>::new());
    assert_eq!(rebuilt.health(true, 0), HealthCategory::WriterStopped);
    assert_eq!(rebuilt.health(true, 0), shell.state.health(true, 0));
    // Record times come from the injected clock.
    let first = report.records().next().unwrap();
    assert_eq!(first.event.time_ms, 1_764_540_843_000);

    // The journal's chunks are in the sidecar only; history is untouched.
    let sidecar = layout.sidecar().unwrap().join("journal");
    let journal_files = files_under(&sidecar);
    assert_eq!(journal_files.len(), report.chunks.len());
    let history_files = files_under(layout.history_root());
    for chunk in &report.chunks {
        assert!(
            !history_files
                .iter()
                .any(|f| f.file_name().unwrap().to_string_lossy() == chunk.file_name),
            "{} leaked into computer-history/",
            chunk.file_name
        );
    }
    assert!(read_events(&layout).is_empty());
    // No plaintext anywhere: neither the planted marker nor the schema's own words.
    for file in journal_files.iter().chain(&history_files) {
        let bytes = std::fs::read(file).unwrap();
        for needle in [MARKER, "engine-journal", "key_epoch_started", "owner_cli"] {
            assert!(
                !contains(&bytes, needle.as_bytes()),
                "{needle} in {}",
                file.display()
            );
        }
    }
    for file in files_under(layout.sidecar().unwrap()) {
        assert!(!contains(&std::fs::read(&file).unwrap(), MARKER.as_bytes()));
    }
}

#[test]
fn a_journal_writer_refuses_out_of_bound_entries_before_assigning_a_sequence() {
    let (_dir, layout) = new_store();
    let mut writer = StoreWriter::<Journal>::open(
        open_write(&layout),
        journal_keys(),
        writer_config(),
        clock(),
    )
    .unwrap();
    let bad = JournalEntry {
        time_ms: 1,
        event: JournalEvent::RetentionSet {
            days: 0,
            caller: CallerKind::OwnerCli,
        },
    };
    assert!(writer.append(vec![bad]).is_err());
    assert_eq!(writer.high_water(), None);
}

#[test]
fn a_writer_opened_after_the_callers_own_read_continues_exactly_as_one_that_reads_for_itself() {
    let (_dir, layout) = new_store();
    let storage = open_write(&layout);
    let entry = |days| JournalEntry {
        time_ms: 1,
        event: JournalEvent::RetentionSet {
            days,
            caller: CallerKind::OwnerCli,
        },
    };
    let mut first =
        StoreWriter::<Journal>::open(storage.clone(), journal_keys(), writer_config(), clock())
            .unwrap();
    first.append(vec![entry(3), entry(4), entry(5)]).unwrap();
    first.sync().unwrap();
    drop(first);

    let report = StoreReader::<Journal>::new(storage.clone())
        .read(&journal_keys())
        .unwrap();
    let mut after_read = StoreWriter::<Journal>::open_after_read(
        storage.clone(),
        journal_keys(),
        writer_config(),
        clock(),
        &report,
    )
    .unwrap();
    assert_eq!(after_read.high_water().map(|s| s.get()), Some(3));
    after_read.append(vec![entry(6)]).unwrap();
    after_read.sync().unwrap();
    drop(after_read);
    let sequences: Vec<u64> = StoreReader::<Journal>::new(storage.clone())
        .read(&journal_keys())
        .unwrap()
        .records()
        .map(|r| r.event.sequence.get())
        .collect();
    assert_eq!(sequences, [1, 2, 3, 4], "no sequence repeated or skipped");

    // It checks what `open` checks.
    let mut too_big = writer_config();
    too_big.max_records_per_chunk = 0;
    assert!(
        StoreWriter::<Journal>::open_after_read(storage, journal_keys(), too_big, clock(), &report)
            .is_err()
    );
}
