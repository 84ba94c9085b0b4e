//! The journal's pure core, through a given/when/then harness: decisions, the projection, the
//! closed schema, and their properties.

use crate::policy::{
    ActorId, AuditOutcome, CursorRefusal, DenyReason, GrantSource, Operation, PolicyEvent,
    Principal, Refusal, Verdict,
};
use std::num::NonZeroU64;

use annal_schema::{ControlOperation, HealthCategory, OpaqueId, Sequence, WriteRuleViolation};
use proptest::prelude::*;

use super::*;
use crate::boot::BootId;
use crate::health::{Child, FailureCategory, Signal, SignalKind, StorageFault};
use crate::keys::KeyReference;
use crate::profile::{ChunkId, PlaintextFault, RecordSchema};
use crate::store::{RecordIdentity, Stream};
use crate::test_strategies;

// ---- The harness ----

/// The journal so far.
struct Given {
    state: State,
}

/// A command decided against it.
struct When {
    state: State,
    result: Result<Vec<JournalEvent>, CommandError>,
}

/// Starts from the state `events` project to.
fn given(events: &[JournalEvent]) -> Given {
    Given {
        state: State::replay(events),
    }
}

impl Given {
    /// The owner asks for `command` through the CLI.
    fn when(self, command: Command) -> When {
        self.when_by(CallerKind::OwnerCli, command)
    }

    /// `caller` asks for `command`.
    fn when_by(self, caller: CallerKind, command: Command) -> When {
        let result = decide(&self.state, command, caller);
        When {
            state: self.state,
            result,
        }
    }
}

impl When {
    /// The decision appends exactly `events`; returns the state after applying them.
    #[track_caller]
    fn then_expect(self, events: &[JournalEvent]) -> State {
        let got = self.result.expect("the command was refused");
        assert_eq!(got, events);
        let mut state = self.state;
        for event in &got {
            state.apply(event);
        }
        state
    }

    /// The decision is an idempotent no-op.
    #[track_caller]
    fn then_expect_nothing(self) {
        self.then_expect(&[]);
    }

    /// The decision refuses with `error`.
    #[track_caller]
    fn then_expect_error(self, error: CommandError) {
        assert_eq!(self.result, Err(error));
    }
}

fn control(operation: ControlOperation) -> JournalEvent {
    JournalEvent::ControlApplied {
        operation,
        caller: CallerKind::OwnerCli,
    }
}

fn enabled() -> JournalEvent {
    control(ControlOperation::Enable)
}

fn paused() -> JournalEvent {
    control(ControlOperation::Pause)
}

fn reference(text: &str) -> KeyReference {
    KeyReference::new(text).unwrap()
}

fn epoch(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

// ---- Defaults and status ----

#[test]
fn the_default_state_is_the_contract_defaults() {
    let state = State::default();
    assert_eq!(
        state.status_flags(),
        StatusFlags {
            enabled: false,
            paused: false,
            retention_days: 7,
            quota_bytes: 104_857_600,
            dropped_events: 0,
        }
    );
    assert_eq!(state.on_quota, OnQuota::StopCapture);
    assert_eq!(state.history_high_water, None);
    assert_eq!(state.key_epoch, None);
    assert_eq!(State::replay([]), state);
    assert_eq!(state.health(true, 0), HealthCategory::Disabled);
    assert_eq!(state.health(false, 0), HealthCategory::NotAdmitted);
}

// ---- Lifecycle decisions ----

#[test]
fn enable_from_disabled_is_recorded_and_repeating_it_is_a_no_op() {
    let state = given(&[]).when(Command::Enable).then_expect(&[enabled()]);
    assert!(state.enabled && !state.paused);
    assert_eq!(state.health(true, 0), HealthCategory::Ready);
    given(&[enabled()])
        .when(Command::Enable)
        .then_expect_nothing();
}

#[test]
fn disable_clears_a_pause_and_repeating_it_is_a_no_op() {
    let state = given(&[enabled(), paused()])
        .when(Command::Disable)
        .then_expect(&[control(ControlOperation::Disable)]);
    assert!(!state.enabled && !state.paused);
    given(&[]).when(Command::Disable).then_expect_nothing();
    // A later enable captures at once.
    let state = given(&[enabled(), paused(), control(ControlOperation::Disable)])
        .when(Command::Enable)
        .then_expect(&[enabled()]);
    assert!(state.enabled && !state.paused);
}

#[test]
fn pause_and_resume_need_capture_enabled() {
    given(&[])
        .when(Command::Pause)
        .then_expect_error(CommandError::NotEnabled);
    given(&[])
        .when(Command::Resume)
        .then_expect_error(CommandError::NotEnabled);
    let state = given(&[enabled()])
        .when(Command::Pause)
        .then_expect(&[paused()]);
    assert!(state.paused);
    assert_eq!(state.health(true, 0), HealthCategory::Paused);
    given(&[enabled(), paused()])
        .when(Command::Pause)
        .then_expect_nothing();
    let state = given(&[enabled(), paused()])
        .when(Command::Resume)
        .then_expect(&[control(ControlOperation::Resume)]);
    assert!(!state.paused);
    given(&[enabled()])
        .when(Command::Resume)
        .then_expect_nothing();
}

#[test]
fn flush_is_always_recorded_and_changes_no_state() {
    for history in [vec![], vec![enabled()], vec![enabled(), paused()]] {
        let before = State::replay(&history);
        let after = given(&history)
            .when(Command::Flush)
            .then_expect(&[control(ControlOperation::Flush)]);
        assert_eq!(after, before);
    }
    given(&[])
        .when_by(CallerKind::Daemon, Command::Flush)
        .then_expect(&[JournalEvent::ControlApplied {
            operation: ControlOperation::Flush,
            caller: CallerKind::Daemon,
        }]);
}

#[test]
fn the_caller_is_recorded_as_a_closed_kind() {
    given(&[])
        .when_by(CallerKind::Embedder, Command::Enable)
        .then_expect(&[JournalEvent::ControlApplied {
            operation: ControlOperation::Enable,
            caller: CallerKind::Embedder,
        }]);
}

/// Who may ask for what: every command against every caller kind.
#[test]
fn caller_decision_table() {
    let signal = Signal {
        at_ms: 1,
        kind: SignalKind::QuotaReached,
    };
    let owner = [CallerKind::OwnerCli, CallerKind::Embedder];
    let all_but_agent = [
        CallerKind::OwnerCli,
        CallerKind::Embedder,
        CallerKind::Daemon,
    ];
    let daemon = [CallerKind::Daemon];
    let table: Vec<(Command, &[CallerKind])> = vec![
        (Command::Enable, &owner),
        (Command::Disable, &owner),
        (Command::Pause, &owner),
        (Command::Resume, &owner),
        (Command::SetRetention { days: 30 }, &owner),
        (
            Command::SetQuota {
                bytes: 1 << 30,
                on_quota: OnQuota::EvictOldest,
            },
            &owner,
        ),
        (Command::Flush, &all_but_agent),
        (Command::RecordDrops { count: 1 }, &daemon),
        (
            Command::MarkSequence {
                high_water: 9,
                boot: None,
                in_flight_max: None,
            },
            &daemon,
        ),
        (
            Command::StartKeyEpoch {
                epoch: epoch(1),
                reference: reference("ns.history.v1"),
            },
            &daemon,
        ),
        (Command::RecordSignal(signal), &daemon),
        (
            Command::ObserveContract {
                operation: ControlOperation::Disable,
                source: ContractSource::StateFile,
                sequence: 0,
            },
            &daemon,
        ),
        (Command::ReleaseSequences { high_water: 3 }, &daemon),
        (
            Command::RecordSkip {
                first_sequence: 4,
                last_sequence: 9,
            },
            &daemon,
        ),
    ];
    // An enabled, paused journal, so pause and resume are not refused for state.
    let state = State::replay(&[enabled()]);
    for (command, allowed) in table {
        for caller in CallerKind::ALL {
            let result = decide(&state, command.clone(), caller);
            if allowed.contains(&caller) {
                assert!(result.is_ok(), "{command:?} by {caller:?}: {result:?}");
            } else {
                assert_eq!(
                    result,
                    Err(CommandError::CallerNotPermitted { caller }),
                    "{command:?} by {caller:?}"
                );
            }
        }
    }
}

// ---- Settings ----

#[test]
fn retention_decision_table() {
    let set = |days, caller| JournalEvent::RetentionSet { days, caller };
    let out_of_range = CommandError::RetentionOutOfRange {
        min_days: RETENTION_MIN_DAYS,
        max_days: RETENTION_MAX_DAYS,
    };
    for days in [0, RETENTION_MAX_DAYS + 1, u32::MAX] {
        given(&[])
            .when(Command::SetRetention { days })
            .then_expect_error(out_of_range);
    }
    for days in [RETENTION_MIN_DAYS, 30, RETENTION_MAX_DAYS] {
        let state = given(&[])
            .when(Command::SetRetention { days })
            .then_expect(&[set(days, CallerKind::OwnerCli)]);
        assert_eq!(state.status_flags().retention_days, days);
    }
    // The default, or the current value, is a no-op.
    given(&[])
        .when(Command::SetRetention { days: 7 })
        .then_expect_nothing();
    given(&[set(30, CallerKind::Embedder)])
        .when(Command::SetRetention { days: 30 })
        .then_expect_nothing();
}

#[test]
fn quota_decision_table() {
    let command = |bytes, on_quota| Command::SetQuota { bytes, on_quota };
    let set = |bytes, on_quota| JournalEvent::QuotaSet {
        bytes,
        on_quota,
        caller: CallerKind::OwnerCli,
    };
    for bytes in [0, 1, QUOTA_MIN_BYTES - 1] {
        given(&[])
            .when(command(bytes, OnQuota::StopCapture))
            .then_expect_error(CommandError::QuotaBelowMinimum {
                min_bytes: QUOTA_MIN_BYTES,
            });
    }
    given(&[])
        .when(command(QUOTA_MAX_BYTES + 1, OnQuota::StopCapture))
        .then_expect_error(CommandError::QuotaAboveMaximum {
            max_bytes: QUOTA_MAX_BYTES,
        });
    let state = given(&[])
        .when(command(QUOTA_MIN_BYTES, OnQuota::EvictOldest))
        .then_expect(&[set(QUOTA_MIN_BYTES, OnQuota::EvictOldest)]);
    assert_eq!(state.quota_bytes, QUOTA_MIN_BYTES);
    assert_eq!(state.on_quota, OnQuota::EvictOldest);
    given(&[])
        .when(command(104_857_600, OnQuota::StopCapture))
        .then_expect_nothing();
    // The same bytes with another policy is a change.
    given(&[])
        .when(command(104_857_600, OnQuota::EvictOldest))
        .then_expect(&[set(104_857_600, OnQuota::EvictOldest)]);
    given(&[])
        .when(command(QUOTA_MAX_BYTES, OnQuota::StopCapture))
        .then_expect(&[set(QUOTA_MAX_BYTES, OnQuota::StopCapture)]);
}

// ---- Engine facts ----

#[test]
fn drops_add_to_the_lifetime_total() {
    let daemon = CallerKind::Daemon;
    let state = given(&[JournalEvent::DropsRecorded { count: 3 }])
        .when_by(daemon, Command::RecordDrops { count: 4 })
        .then_expect(&[JournalEvent::DropsRecorded { count: 4 }]);
    assert_eq!(state.status_flags().dropped_events, 7);
    given(&[])
        .when_by(daemon, Command::RecordDrops { count: 0 })
        .then_expect_nothing();
    // The total saturates rather than wrapping.
    let state = State::replay(&[
        JournalEvent::DropsRecorded { count: u64::MAX },
        JournalEvent::DropsRecorded { count: 5 },
    ]);
    assert_eq!(state.dropped_total, u64::MAX);
}

#[test]
fn the_high_water_mark_never_goes_backwards() {
    let daemon = CallerKind::Daemon;
    let mark = |high_water| JournalEvent::SequenceMarked {
        high_water,
        boot: None,
        in_flight_max: None,
    };
    let state = given(&[])
        .when_by(
            daemon,
            Command::MarkSequence {
                high_water: 10,
                boot: None,
                in_flight_max: None,
            },
        )
        .then_expect(&[mark(10)]);
    assert_eq!(state.history_high_water, Some(10));
    given(&[mark(10)])
        .when_by(
            daemon,
            Command::MarkSequence {
                high_water: 9,
                boot: None,
                in_flight_max: None,
            },
        )
        .then_expect_error(CommandError::HighWaterWouldDecrease { current: 10 });
    given(&[mark(10)])
        .when_by(
            daemon,
            Command::MarkSequence {
                high_water: 10,
                boot: None,
                in_flight_max: None,
            },
        )
        .then_expect_nothing();
    given(&[])
        .when_by(
            daemon,
            Command::MarkSequence {
                high_water: 0,
                boot: None,
                in_flight_max: None,
            },
        )
        .then_expect_error(CommandError::HighWaterZero);
    // A lower mark in a journal (never decided) changes nothing.
    assert_eq!(
        State::replay(&[mark(10), mark(3)]).history_high_water,
        Some(10)
    );
}

// ---- One truth about on and off: the contract's state observed at open ----

fn observe(operation: ControlOperation, source: ContractSource, sequence: u64) -> Command {
    Command::ObserveContract {
        operation,
        source,
        sequence,
    }
}

fn observed(operation: ControlOperation, source: ContractSource, sequence: u64) -> JournalEvent {
    JournalEvent::ContractObserved {
        operation,
        source,
        sequence,
    }
}

#[test]
fn a_disable_written_elsewhere_wins_and_is_recorded_with_its_source() {
    let daemon = CallerKind::Daemon;
    let (disable, event, file) = (
        ControlOperation::Disable,
        ContractSource::ControlEvent,
        ContractSource::StateFile,
    );
    let state = given(&[enabled()])
        .when_by(daemon, observe(disable, event, 40))
        .then_expect(&[observed(disable, event, 40)]);
    assert!(!state.enabled && !state.paused);
    assert_eq!(state.contract_read_through, 40);
    let state = given(&[enabled(), paused()])
        .when_by(daemon, observe(disable, file, 0))
        .then_expect(&[observed(disable, file, 0)]);
    assert!(!state.enabled && !state.paused);
    assert_eq!(state.contract_read_through, 0);
    // A delete left in the stream (its removal crashed) disables too.
    let state = given(&[enabled()])
        .when_by(daemon, observe(ControlOperation::Delete, event, 7))
        .then_expect(&[observed(ControlOperation::Delete, event, 7)]);
    assert!(!state.enabled);
    // Already as narrow: the file changes nothing and records nothing.
    given(&[])
        .when_by(daemon, observe(disable, file, 0))
        .then_expect_nothing();
}

#[test]
fn a_pause_written_elsewhere_pauses_an_enabled_store_only() {
    let daemon = CallerKind::Daemon;
    let (pause, event, file) = (
        ControlOperation::Pause,
        ContractSource::ControlEvent,
        ContractSource::StateFile,
    );
    let state = given(&[enabled()])
        .when_by(daemon, observe(pause, file, 0))
        .then_expect(&[observed(pause, file, 0)]);
    assert!(state.enabled && state.paused);
    given(&[enabled(), paused()])
        .when_by(daemon, observe(pause, file, 0))
        .then_expect_nothing();
    // Paused is never set on a disabled store (the event still moves what was read).
    let state = given(&[])
        .when_by(daemon, observe(pause, event, 3))
        .then_expect(&[observed(pause, event, 3)]);
    assert!(!state.enabled && !state.paused);
    given(&[])
        .when_by(daemon, observe(pause, file, 0))
        .then_expect_nothing();
}

#[test]
fn a_widening_written_elsewhere_is_read_but_never_taken() {
    let daemon = CallerKind::Daemon;
    let event = ContractSource::ControlEvent;
    for operation in [ControlOperation::Enable, ControlOperation::Resume] {
        let state = given(&[enabled(), paused(), control(ControlOperation::Disable)])
            .when_by(daemon, observe(operation, event, 12))
            .then_expect(&[observed(operation, event, 12)]);
        assert!(!state.enabled && !state.paused, "{operation:?}");
        assert_eq!(state.contract_read_through, 12);
        let state = given(&[enabled(), paused()])
            .when_by(daemon, observe(operation, event, 12))
            .then_expect(&[observed(operation, event, 12)]);
        assert!(state.enabled && state.paused, "{operation:?}");
    }
    // From the state file a widening is not even an observation.
    for operation in [ControlOperation::Enable, ControlOperation::Resume] {
        given(&[])
            .when_by(daemon, observe(operation, ContractSource::StateFile, 0))
            .then_expect_error(CommandError::ObservationOutOfBounds);
    }
}

#[test]
fn a_control_event_read_once_is_never_taken_again() {
    // An unsealed chunk (a crash's torn one) is read at every open: its old pause must not
    // undo a resume the owner made since.
    let daemon = CallerKind::Daemon;
    let (pause, event) = (ControlOperation::Pause, ContractSource::ControlEvent);
    let history = [
        enabled(),
        observed(ControlOperation::Resume, event, 9),
        paused(),
        control(ControlOperation::Resume),
    ];
    given(&history)
        .when_by(daemon, observe(pause, event, 8))
        .then_expect_nothing();
    given(&history)
        .when_by(daemon, observe(pause, event, 9))
        .then_expect_nothing();
    let state = given(&history)
        .when_by(daemon, observe(pause, event, 10))
        .then_expect(&[observed(pause, event, 10)]);
    assert!(state.paused);
    // What was read never goes back.
    assert_eq!(
        State::replay(&[observed(pause, event, 10), observed(pause, event, 4)])
            .contract_read_through,
        10
    );
}

#[test]
fn an_observation_outside_its_bounds_is_refused_and_changes_nothing_replayed() {
    let daemon = CallerKind::Daemon;
    let bad = [
        (ControlOperation::Flush, ContractSource::ControlEvent, 5),
        (ControlOperation::Flush, ContractSource::StateFile, 0),
        (ControlOperation::Disable, ContractSource::ControlEvent, 0),
        (ControlOperation::Disable, ContractSource::StateFile, 5),
        (ControlOperation::Delete, ContractSource::StateFile, 0),
    ];
    for (operation, source, sequence) in bad {
        given(&[enabled()])
            .when_by(daemon, observe(operation, source, sequence))
            .then_expect_error(CommandError::ObservationOutOfBounds);
        let state = State::replay(&[enabled(), observed(operation, source, sequence)]);
        assert!(state.enabled, "{operation:?} {source:?} {sequence}");
        assert_eq!(
            observed(operation, source, sequence).check_bounds(),
            Err(BoundViolation::ContractObserved)
        );
    }
}

// ---- No gap without a cause: releases and skips ----

#[test]
fn a_clean_stop_releases_the_rest_of_its_reservation() {
    let daemon = CallerKind::Daemon;
    let mark = |high_water| JournalEvent::SequenceMarked {
        high_water,
        boot: None,
        in_flight_max: None,
    };
    let released = |reserved, high_water| JournalEvent::SequenceReleased {
        reserved,
        high_water,
    };
    let state = given(&[mark(65_575)])
        .when_by(daemon, Command::ReleaseSequences { high_water: 39 })
        .then_expect(&[released(65_575, 39)]);
    assert_eq!(state.history_high_water, Some(39));
    // Nothing reserved beyond what was handed out, nothing reserved at all, or 0: no event.
    for (history, high_water) in [
        (vec![mark(39)], 39),
        (vec![mark(39)], 40),
        (vec![], 5),
        (vec![mark(39)], 0),
    ] {
        given(&history)
            .when_by(daemon, Command::ReleaseSequences { high_water })
            .then_expect_nothing();
    }
    assert_eq!(
        released(10, 11).check_bounds(),
        Err(BoundViolation::SequenceReleased)
    );
    assert_eq!(
        released(10, 0).check_bounds(),
        Err(BoundViolation::SequenceReleased)
    );
}

#[test]
fn a_crash_in_the_reservations_boot_releases_it_down_to_what_is_on_disk() {
    let daemon = CallerKind::Daemon;
    let this_boot = BootId::from_bytes([7; 16]);
    let other_boot = BootId::from_bytes([8; 16]);
    let mark = |high_water, boot| JournalEvent::SequenceMarked {
        high_water,
        boot,
        in_flight_max: None,
    };
    let recover = |on_disk| Command::RecoverSequences {
        boot: this_boot,
        on_disk,
    };
    let released = |reserved, high_water| JournalEvent::SequenceReleased {
        reserved,
        high_water,
    };
    // Given a reservation made in this boot, when the next writer finds 39 on disk, then the
    // rest is released: it goes on at 40.
    let state = given(&[mark(65_575, Some(this_boot))])
        .when_by(daemon, recover(39))
        .then_expect(&[released(65_575, 39)]);
    assert_eq!(state.history_high_water, Some(39));
    assert_eq!(
        state.history_mark_boot, None,
        "a released mark is no reservation"
    );
    // Sequences recorded lost (a failed sync may have shown them) or skipped (an earlier
    // crash) stay behind the release, even when the disk holds less.
    given(&[
        mark(65_575, Some(this_boot)),
        JournalEvent::RecordsLost {
            first_sequence: 40,
            last_sequence: 44,
        },
    ])
    .when_by(daemon, recover(39))
    .then_expect(&[released(65_575, 44)]);
    given(&[
        mark(65_536, None),
        JournalEvent::SequencesSkipped {
            first_sequence: 3,
            last_sequence: 65_536,
        },
        mark(131_100, Some(this_boot)),
    ])
    .when_by(daemon, recover(2))
    .then_expect(&[released(131_100, 65_536)]);
    // Never for a reservation of another boot (a power loss may have taken records a reader
    // saw), nor one journaled before boot ids were, nor one a newer mark without a boot
    // replaced; nor with nothing to release or nothing at all on disk.
    for (history, on_disk) in [
        (vec![mark(65_575, Some(other_boot))], 39),
        (vec![mark(65_575, None)], 39),
        (vec![mark(100, Some(this_boot)), mark(200, None)], 39),
        (vec![mark(39, Some(this_boot))], 39),
        (vec![mark(39, Some(this_boot))], 40),
        (vec![mark(65_575, Some(this_boot))], 0),
        (vec![], 5),
    ] {
        given(&history)
            .when_by(daemon, recover(on_disk))
            .then_expect_nothing();
    }
    // Only the daemon's writer recovers.
    given(&[mark(65_575, Some(this_boot))])
        .when_by(CallerKind::OwnerCli, recover(39))
        .then_expect_error(CommandError::CallerNotPermitted {
            caller: CallerKind::OwnerCli,
        });
}

#[test]
fn a_crash_in_another_boot_skips_only_what_may_have_been_in_flight() {
    let daemon = CallerKind::Daemon;
    let mark = |high_water, in_flight_max| JournalEvent::SequenceMarked {
        high_water,
        boot: Some(BootId::from_bytes([7; 16])),
        in_flight_max,
    };
    let skip_after_crash = |on_disk| Command::SkipAfterCrash { on_disk };
    let skipped = |first_sequence, last_sequence| JournalEvent::SequencesSkipped {
        first_sequence,
        last_sequence,
    };
    let released = |reserved, high_water| JournalEvent::SequenceReleased {
        reserved,
        high_water,
    };
    // Given a writer that opened at 39 and reserved through 65,575 with an in-flight bound of
    // 1,024, when the next writer (another boot) finds 39 on disk, then it skips 40..=1,063
    // and releases the rest.
    let opened_at_39 = [
        mark(65_536, None),
        released(65_536, 39),
        mark(65_575, Some(1_024)),
    ];
    let state = given(&opened_at_39)
        .when_by(daemon, skip_after_crash(39))
        .then_expect(&[skipped(40, 1_063), released(65_575, 1_063)]);
    assert_eq!(state.history_high_water, Some(1_063));
    // What it synced counts through what is on disk: found at 500, skip 501..=1,524.
    given(&opened_at_39)
        .when_by(daemon, skip_after_crash(500))
        .then_expect(&[skipped(501, 1_524), released(65_575, 1_524)]);
    // A power loss that took everything it wrote: the bound counts from its floor at open.
    given(&opened_at_39)
        .when_by(daemon, skip_after_crash(20))
        .then_expect(&[skipped(21, 1_063), released(65_575, 1_063)]);
    // A range journaled lost counts as accounted for.
    let mut lost = opened_at_39.to_vec();
    lost.push(JournalEvent::RecordsLost {
        first_sequence: 40,
        last_sequence: 90,
    });
    given(&lost)
        .when_by(daemon, skip_after_crash(39))
        .then_expect(&[skipped(40, 1_114), released(65_575, 1_114)]);
    // No in-flight bound journaled (a writer before the rule), or a bound that reaches the
    // reservation's end anyway: nothing here (the caller records the skip through the mark).
    for (history, on_disk) in [
        (vec![mark(65_575, None)], 39),
        (vec![mark(1_000, Some(1_024))], 39),
        (vec![mark(39, Some(1_024))], 39),
        (vec![], 5),
    ] {
        given(&history)
            .when_by(daemon, skip_after_crash(on_disk))
            .then_expect_nothing();
    }
}

#[test]
fn a_release_appended_after_a_newer_reservation_changes_nothing() {
    // A release the journal retried late (after a failed sync) behind the next writer's
    // reservation must not lower the mark below what that writer hands out.
    let mark = |high_water| JournalEvent::SequenceMarked {
        high_water,
        boot: None,
        in_flight_max: None,
    };
    let released = JournalEvent::SequenceReleased {
        reserved: 100,
        high_water: 39,
    };
    assert_eq!(
        State::replay(&[mark(100), mark(200), released.clone()]).history_high_water,
        Some(200)
    );
    assert_eq!(
        State::replay(&[mark(100), released.clone(), mark(200), released]).history_high_water,
        Some(200)
    );
}

#[test]
fn a_skip_after_a_crash_is_recorded_once_and_apart_from_drops() {
    let daemon = CallerKind::Daemon;
    let skip = |first_sequence, last_sequence| Command::RecordSkip {
        first_sequence,
        last_sequence,
    };
    let skipped = |first_sequence, last_sequence| JournalEvent::SequencesSkipped {
        first_sequence,
        last_sequence,
    };
    let state = given(&[])
        .when_by(daemon, skip(40, 65_575))
        .then_expect(&[skipped(40, 65_575)]);
    assert_eq!(state.skipped, [40..=65_575]);
    assert_eq!(state.dropped_total, 0, "a skip is not a drop");
    assert!(state.lost.is_empty());
    // The same skip found by the next open again: nothing new.
    given(&[skipped(40, 65_575)])
        .when_by(daemon, skip(40, 65_575))
        .then_expect_nothing();
    // Sequences a failed append already reported lost are accounted for.
    let lost = JournalEvent::RecordsLost {
        first_sequence: 5,
        last_sequence: 10,
    };
    given(std::slice::from_ref(&lost))
        .when_by(daemon, skip(5, 10))
        .then_expect_nothing();
    given(&[lost.clone(), skipped(11, 20)])
        .when_by(daemon, skip(5, 20))
        .then_expect_nothing();
    given(&[lost])
        .when_by(daemon, skip(5, 12))
        .then_expect(&[skipped(5, 12)]);
    given(&[])
        .when_by(daemon, skip(0, 3))
        .then_expect_error(CommandError::SkipOutOfBounds);
    given(&[])
        .when_by(daemon, skip(5, 4))
        .then_expect_error(CommandError::SkipOutOfBounds);
    assert_eq!(
        State::replay(&[skipped(30, 40), skipped(10, 20), skipped(21, 25)]).skipped,
        [10..=25, 30..=40]
    );
}

#[test]
fn key_epochs_only_go_up() {
    let daemon = CallerKind::Daemon;
    let start = |n, r: &str| Command::StartKeyEpoch {
        epoch: epoch(n),
        reference: reference(r),
    };
    let started = |n, r: &str| JournalEvent::KeyEpochStarted {
        epoch: epoch(n),
        reference: reference(r),
    };
    let state = given(&[])
        .when_by(daemon, start(1, "a.history.v1"))
        .then_expect(&[started(1, "a.history.v1")]);
    assert_eq!(
        state.key_epoch,
        Some(KeyEpoch {
            epoch: epoch(1),
            reference: reference("a.history.v1")
        })
    );
    let history = [started(2, "a.history.v1")];
    given(&history)
        .when_by(daemon, start(2, "a.history.v1"))
        .then_expect_nothing();
    let refused = CommandError::KeyEpochNotIncreasing { current: epoch(2) };
    given(&history)
        .when_by(daemon, start(2, "b.history.v1"))
        .then_expect_error(refused);
    given(&history)
        .when_by(daemon, start(1, "a.history.v1"))
        .then_expect_error(refused);
    given(&history)
        .when_by(daemon, start(3, "b.history.v1"))
        .then_expect(&[started(3, "b.history.v1")]);
    // An older epoch in a journal (never decided) changes nothing.
    let state = State::replay(&[started(2, "a.history.v1"), started(1, "b.history.v1")]);
    assert_eq!(state.key_epoch.map(|k| k.epoch), Some(epoch(2)));
}

#[test]
fn signals_are_journaled_and_health_folds_over_them() {
    let daemon = CallerKind::Daemon;
    let failed = Signal {
        at_ms: 5,
        kind: SignalKind::StorageFailed {
            category: StorageFault::StorageCorrupt,
        },
    };
    let state = given(&[enabled()])
        .when_by(daemon, Command::RecordSignal(failed))
        .then_expect(&[JournalEvent::SupervisorSignalled(failed)]);
    assert_eq!(state.health_fold, crate::health::fold(&[failed]));
    assert_eq!(state.health(true, 0), HealthCategory::StorageCorrupt);
    let restarted = Signal {
        at_ms: 6,
        kind: SignalKind::ChildRestarted {
            child: Child::Writer,
        },
    };
    let state = given(&[JournalEvent::SupervisorSignalled(restarted)]).state;
    assert_eq!(state.restart_history(Child::Writer), [6]);
    for bad in [
        Signal {
            at_ms: JOURNAL_TIME_MAX_MS + 1,
            kind: SignalKind::QuotaReached,
        },
        Signal {
            at_ms: 1,
            kind: SignalKind::DropsObserved { count: 0 },
        },
        Signal {
            at_ms: 1,
            kind: SignalKind::DropsMarked { count: 0 },
        },
    ] {
        given(&[])
            .when_by(daemon, Command::RecordSignal(bad))
            .then_expect_error(CommandError::SignalOutOfBounds);
    }
}

#[test]
fn applying_covers_every_event_deterministically() {
    let chunk = ChunkId([3; 16]);
    let events = [
        JournalEvent::ControlApplied {
            operation: ControlOperation::Delete,
            caller: CallerKind::OwnerCli,
        },
        JournalEvent::TornTailRecorded {
            chunk,
            bytes_left_out: 17,
        },
        JournalEvent::TornTailRecorded {
            chunk,
            bytes_left_out: 17,
        },
        JournalEvent::ChunkQuarantined {
            chunk,
            caller: CallerKind::OwnerCli,
        },
        JournalEvent::ChunkQuarantined {
            chunk,
            caller: CallerKind::OwnerCli,
        },
        JournalEvent::ChunkPruned {
            chunk,
            reason: PruneReason::Retention,
            last_time_ms: 5,
            records: 2,
        },
        JournalEvent::ChunkPruned {
            chunk,
            reason: PruneReason::EvictOldest,
            last_time_ms: 5,
            records: 2,
        },
    ];
    let state = State::replay(
        &[enabled(), paused()]
            .iter()
            .chain(&events)
            .cloned()
            .collect::<Vec<_>>(),
    );
    assert!(
        !state.enabled && !state.paused,
        "delete returns to disabled"
    );
    assert_eq!(state.quarantined, [chunk]);
    assert_eq!(state.torn_tails, [chunk], "a tear is recorded once");
    assert_eq!(
        state.pruned.iter().copied().collect::<Vec<_>>(),
        [chunk],
        "a prune is recorded once"
    );
    // A pause recorded while disabled (never decided) changes nothing.
    assert!(!State::replay(&[paused()]).paused);
    // Events out of bounds (never written, never read) change nothing.
    let out_of_bounds = [
        JournalEvent::RetentionSet {
            days: 0,
            caller: CallerKind::OwnerCli,
        },
        JournalEvent::QuotaSet {
            bytes: 1,
            on_quota: OnQuota::EvictOldest,
            caller: CallerKind::OwnerCli,
        },
        JournalEvent::SequenceMarked {
            high_water: 0,
            boot: None,
            in_flight_max: None,
        },
        JournalEvent::DropsRecorded { count: 0 },
        JournalEvent::TornTailRecorded {
            chunk,
            bytes_left_out: 0,
        },
        JournalEvent::ChunkPruned {
            chunk,
            reason: PruneReason::Retention,
            last_time_ms: 5,
            records: 0,
        },
        JournalEvent::SupervisorSignalled(Signal {
            at_ms: u64::MAX,
            kind: SignalKind::QuotaReached,
        }),
    ];
    assert_eq!(State::replay(&out_of_bounds), State::default());
}

// ---- The stored form ----

fn record(event: JournalEvent) -> JournalRecord {
    JournalRecord {
        sequence: Sequence::new(7).unwrap(),
        time_ms: 1_764_540_843_753,
        stream: OpaqueId::new("6dd3aa1eef99854a9a3d39ba1e2315f1").unwrap(),
        event,
    }
}

fn text(record: &JournalRecord) -> String {
    String::from_utf8(record.to_json_vec()).unwrap()
}

fn parse(text: &str) -> Result<JournalRecord, PlaintextFault> {
    JournalSchema::parse(text.as_bytes())
}

const PREFIX: &str = r#"{"dataschema":"urn:annal:schema:engine-journal:v1","sequence":7,"time_ms":1764540843753,"stream":"6dd3aa1eef99854a9a3d39ba1e2315f1","event":"#;

/// One example of every event kind and its exact stored form.
fn golden() -> Vec<(JournalEvent, &'static str)> {
    let chunk = ChunkId::from_hex("0123456789abcdef0123456789abcdef").unwrap();
    vec![
        (
            JournalEvent::ControlApplied {
                operation: ControlOperation::Enable,
                caller: CallerKind::OwnerCli,
            },
            r#"{"kind":"control_applied","operation":"enable","caller":"owner_cli"}"#,
        ),
        (
            JournalEvent::RetentionSet {
                days: 30,
                caller: CallerKind::Embedder,
            },
            r#"{"kind":"retention_set","days":30,"caller":"embedder"}"#,
        ),
        (
            JournalEvent::QuotaSet {
                bytes: 1_048_576,
                on_quota: OnQuota::EvictOldest,
                caller: CallerKind::OwnerCli,
            },
            r#"{"kind":"quota_set","bytes":1048576,"on_quota":"evict_oldest","caller":"owner_cli"}"#,
        ),
        (
            JournalEvent::KeyEpochStarted {
                epoch: epoch(2),
                reference: reference("default.history.v1"),
            },
            r#"{"kind":"key_epoch_started","epoch":2,"reference":"default.history.v1"}"#,
        ),
        (
            JournalEvent::SupervisorSignalled(Signal {
                at_ms: 12,
                kind: SignalKind::ChildFailed {
                    child: Child::KeyCustody,
                    category: FailureCategory::KeyLocked,
                },
            }),
            r#"{"kind":"supervisor_signalled","at_ms":12,"signal":{"kind":"child_failed","child":"key_custody","category":"key_locked"}}"#,
        ),
        (
            JournalEvent::SupervisorSignalled(Signal {
                at_ms: 13,
                kind: SignalKind::StorageRecovered,
            }),
            r#"{"kind":"supervisor_signalled","at_ms":13,"signal":{"kind":"storage_recovered"}}"#,
        ),
        (
            JournalEvent::DropsRecorded { count: 4 },
            r#"{"kind":"drops_recorded","count":4}"#,
        ),
        (
            JournalEvent::SequenceMarked {
                high_water: 99,
                boot: None,
                in_flight_max: None,
            },
            r#"{"kind":"sequence_marked","high_water":99}"#,
        ),
        (
            JournalEvent::SequenceMarked {
                high_water: 99,
                boot: Some(BootId::from_bytes([0xab; 16])),
                in_flight_max: Some(1024),
            },
            r#"{"kind":"sequence_marked","high_water":99,"boot":"abababababababababababababababab","in_flight_max":1024}"#,
        ),
        (
            JournalEvent::TornTailRecorded {
                chunk,
                bytes_left_out: 5,
            },
            r#"{"kind":"torn_tail_recorded","chunk":"0123456789abcdef0123456789abcdef","bytes_left_out":5}"#,
        ),
        (
            JournalEvent::ChunkQuarantined {
                chunk,
                caller: CallerKind::OwnerCli,
            },
            r#"{"kind":"chunk_quarantined","chunk":"0123456789abcdef0123456789abcdef","caller":"owner_cli"}"#,
        ),
        (
            JournalEvent::Policy(PolicyEvent::GrantIssued {
                actor: ActorId::new("agent-a").expect("valid"),
                operation: Operation::Query,
                source: GrantSource::Owner,
                issued_at_ms: 1_000,
                expires_at_ms: 3_601_000,
                idle_timeout_ms: 600_000,
            }),
            r#"{"kind":"grant_issued","actor":"agent-a","operation":"query","source":"owner","issued_at_ms":1000,"expires_at_ms":3601000,"idle_timeout_ms":600000}"#,
        ),
        (
            JournalEvent::Policy(PolicyEvent::ActorRevoked {
                actor: ActorId::new("agent-a").expect("valid"),
            }),
            r#"{"kind":"actor_revoked","actor":"agent-a"}"#,
        ),
        (
            JournalEvent::Policy(PolicyEvent::AgentsSwitched { enabled: false }),
            r#"{"kind":"agents_switched","enabled":false}"#,
        ),
        (
            JournalEvent::Policy(PolicyEvent::AuditStarted {
                audit: 7,
                at_ms: 2_000,
                principal: Principal::Owner,
                operation: Operation::Status,
                verdict: Verdict::Denied(DenyReason::IdleTimeout),
            }),
            r#"{"kind":"audit_started","audit":7,"at_ms":2000,"principal":"@owner","operation":"status","verdict":"idle_timeout"}"#,
        ),
        (
            JournalEvent::Policy(PolicyEvent::AuditFinished {
                audit: 7,
                outcome: AuditOutcome::Refused(Refusal::Cursor(CursorRefusal::Replayed)),
                returned_events: 0,
            }),
            r#"{"kind":"audit_finished","audit":7,"outcome":"cursor_replayed","returned_events":0}"#,
        ),
        (
            JournalEvent::ChunkPruned {
                chunk,
                reason: PruneReason::EvictOldest,
                last_time_ms: 1_764_540_843_753,
                records: 6_096,
            },
            r#"{"kind":"chunk_pruned","chunk":"0123456789abcdef0123456789abcdef","reason":"evict_oldest","last_time_ms":1764540843753,"records":6096}"#,
        ),
        (
            JournalEvent::Policy(PolicyEvent::UnknownToolRefused {
                audit: 8,
                at_ms: 2_100,
                principal: Principal::Agent(ActorId::new("agent-a").expect("valid")),
            }),
            r#"{"kind":"unknown_tool_refused","audit":8,"at_ms":2100,"principal":"agent-a"}"#,
        ),
        (
            JournalEvent::Policy(PolicyEvent::OwnerExported {
                audit: 9,
                at_ms: 2_200,
                events: 4_096,
                first_sequence: 3,
                last_sequence: 4_200,
                encrypted: true,
            }),
            r#"{"kind":"owner_exported","audit":9,"at_ms":2200,"events":4096,"first_sequence":3,"last_sequence":4200,"encrypted":true}"#,
        ),
        (
            JournalEvent::Policy(PolicyEvent::OwnerAccessSwitched { enabled: false }),
            r#"{"kind":"owner_access_switched","enabled":false}"#,
        ),
        (
            JournalEvent::SupervisorSignalled(Signal {
                at_ms: 14,
                kind: SignalKind::CheckpointVerified,
            }),
            r#"{"kind":"supervisor_signalled","at_ms":14,"signal":{"kind":"checkpoint_verified"}}"#,
        ),
        (
            JournalEvent::ContractObserved {
                operation: ControlOperation::Disable,
                source: ContractSource::ControlEvent,
                sequence: 40,
            },
            r#"{"kind":"contract_observed","operation":"disable","source":"control_event","sequence":40}"#,
        ),
        (
            JournalEvent::ContractObserved {
                operation: ControlOperation::Pause,
                source: ContractSource::StateFile,
                sequence: 0,
            },
            r#"{"kind":"contract_observed","operation":"pause","source":"state_file","sequence":0}"#,
        ),
        (
            JournalEvent::SequenceReleased {
                reserved: 65_575,
                high_water: 39,
            },
            r#"{"kind":"sequence_released","reserved":65575,"high_water":39}"#,
        ),
        (
            JournalEvent::SequencesSkipped {
                first_sequence: 40,
                last_sequence: 65_575,
            },
            r#"{"kind":"sequences_skipped","first_sequence":40,"last_sequence":65575}"#,
        ),
        (
            JournalEvent::RecordsLost {
                first_sequence: 6,
                last_sequence: 10,
            },
            r#"{"kind":"records_lost","first_sequence":6,"last_sequence":10}"#,
        ),
        (
            JournalEvent::Policy(PolicyEvent::GrantWithdrawn {
                actor: ActorId::new("agent-a").expect("valid"),
                operation: Operation::Status,
            }),
            r#"{"kind":"grant_withdrawn","actor":"agent-a","operation":"status"}"#,
        ),
    ]
}

#[test]
fn every_event_kind_has_its_exact_stored_form_and_reads_back() {
    for (event, event_json) in golden() {
        let record = record(event);
        let want = format!("{PREFIX}{event_json}}}");
        assert_eq!(text(&record), want);
        assert_eq!(parse(&want), Ok(record));
    }
}

/// Replaces the first occurrence of `from` in the stored form of a golden record.
fn edited(index: usize, from: &str, to: &str) -> String {
    let (event, _) = golden().swap_remove(index);
    let text = text(&record(event));
    assert!(text.contains(from), "{text} lacks {from}");
    text.replacen(from, to, 1)
}

#[test]
fn the_schema_is_closed() {
    let invalid = Err(PlaintextFault::InvalidEvent);
    let cases = [
        // Unknown fields at every level, including beside a data-less signal.
        edited(0, r#""sequence""#, r#""extra":1,"sequence""#),
        edited(0, r#""caller""#, r#""extra":1,"caller""#),
        edited(4, r#""child":"#, r#""extra":1,"child":"#),
        edited(
            5,
            r#""kind":"storage_recovered""#,
            r#""kind":"storage_recovered","x":1"#,
        ),
        // Unknown kinds and enum values.
        edited(0, "control_applied", "control_forgotten"),
        edited(4, "child_failed", "child_vanished"),
        edited(0, r#""enable""#, r#""reboot""#),
        edited(0, "owner_cli", "alice"),
        edited(2, "evict_oldest", "evict_newest"),
        edited(4, "key_custody", "browser"),
        edited(4, "key_locked", "ready"),
        // null anywhere, and missing fields.
        edited(1, r#""days":30"#, r#""days":null"#),
        edited(0, r#""sequence":7"#, r#""sequence":null"#),
        edited(0, r#""urn:annal:schema:engine-journal:v1""#, "null"),
        edited(
            0,
            r#""dataschema":"urn:annal:schema:engine-journal:v1","#,
            "",
        ),
        edited(1, r#","caller":"embedder""#, ""),
        // Duplicate keys.
        edited(1, r#""days":30"#, r#""days":30,"days":31"#),
        edited(
            0,
            r#""kind":"control_applied""#,
            r#""kind":"control_applied","kind":"control_applied""#,
        ),
        // Out of bounds.
        edited(1, r#""days":30"#, r#""days":0"#),
        edited(1, r#""days":30"#, r#""days":3651"#),
        edited(2, "1048576", "1048575"),
        edited(3, r#""epoch":2"#, r#""epoch":0"#),
        edited(3, "default.history.v1", "default history"),
        edited(3, "default.history.v1", ""),
        edited(6, r#""count":4"#, r#""count":0"#),
        edited(7, r#""high_water":99"#, r#""high_water":0"#),
        edited(8, r#""high_water":99"#, r#""high_water":0"#),
        // A boot id is exactly 32 lowercase hex digits.
        edited(
            8,
            "abababababababababababababababab",
            "ababababababababababababababab",
        ),
        edited(
            8,
            "abababababababababababababababab",
            "ABABABABABABABABABABABABABABABAB",
        ),
        edited(
            8,
            "abababababababababababababababab",
            "abababab-abab-abab-abab-abababababab",
        ),
        edited(8, r#""abababababababababababababababab""#, "null"),
        edited(8, r#""in_flight_max":1024"#, r#""in_flight_max":0"#),
        edited(8, r#""in_flight_max":1024"#, r#""in_flight_max":null"#),
        edited(8, r#""in_flight_max":1024"#, r#""in_flight_max":-1"#),
        edited(9, r#""bytes_left_out":5"#, r#""bytes_left_out":0"#),
        edited(
            9,
            "0123456789abcdef0123456789abcdef",
            "0123456789ABCDEF0123456789ABCDEF",
        ),
        edited(10, "0123456789abcdef0123456789abcdef", "0123"),
        edited(16, "evict_oldest", "evict_newest"),
        edited(16, r#""records":6096"#, r#""records":0"#),
        edited(16, r#""records":6096"#, r#""records":1048577"#),
        edited(16, "1764540843753", "16756761600000"),
        edited(16, r#","records":6096"#, ""),
        // An unknown-tool refusal: bounded, and no field for the name that was called.
        edited(17, r#""audit":8"#, r#""audit":0"#),
        edited(17, "2100", "16756761600000"),
        edited(17, r#""at_ms""#, r#""tool":"history_delete","at_ms""#),
        edited(17, r#","principal":"agent-a""#, ""),
        edited(
            golden().len() - 2,
            r#""first_sequence":6"#,
            r#""first_sequence":0"#,
        ),
        edited(
            golden().len() - 2,
            r#""last_sequence":10"#,
            r#""last_sequence":5"#,
        ),
        edited(golden().len() - 2, r#","last_sequence":10"#, ""),
        edited(golden().len() - 1, r#""status""#, r#""delete""#),
        edited(golden().len() - 1, r#","operation":"status""#, ""),
        edited(golden().len() - 1, "agent-a", "-agent"),
        edited(golden().len() - 6, r#""control_event""#, r#""rumour""#),
        edited(golden().len() - 6, r#""sequence":40"#, r#""sequence":0"#),
        edited(golden().len() - 6, r#""disable""#, r#""flush""#),
        edited(golden().len() - 5, r#""pause""#, r#""enable""#),
        edited(golden().len() - 5, r#""sequence":0"#, r#""sequence":3"#),
        edited(golden().len() - 5, r#","sequence":0"#, ""),
        edited(
            golden().len() - 4,
            r#""high_water":39"#,
            r#""high_water":0"#,
        ),
        edited(
            golden().len() - 4,
            r#""high_water":39"#,
            r#""high_water":65576"#,
        ),
        edited(
            golden().len() - 3,
            r#""first_sequence":40"#,
            r#""first_sequence":0"#,
        ),
        edited(
            golden().len() - 3,
            r#""last_sequence":65575"#,
            r#""last_sequence":39"#,
        ),
        edited(0, r#""sequence":7"#, r#""sequence":0"#),
        edited(0, "1764540843753", "16756761600000"),
        edited(0, "1764540843753", "-1"),
        edited(0, "1764540843753", "1.5"),
        edited(
            0,
            "6dd3aa1eef99854a9a3d39ba1e2315f1",
            "6DD3AA1EEF99854A9A3D39BA1E2315F1",
        ),
        // Free-form text has nowhere to go.
        edited(
            0,
            r#""caller":"owner_cli""#,
            r#""caller":"owner_cli","label":"secret""#,
        ),
        // Not one JSON object.
        format!("{} trailing", text(&record(golden()[0].0.clone()))),
        "not json".to_owned(),
        "[]".to_owned(),
    ];
    for case in &cases {
        assert_eq!(parse(case), invalid, "{case}");
    }
}

#[test]
fn another_dataschema_is_unsupported_rather_than_invalid() {
    let future = edited(0, "engine-journal:v1", "engine-journal:v2");
    assert_eq!(parse(&future), Err(PlaintextFault::UnsupportedDataschema));
    let history = edited(
        0,
        "urn:annal:schema:engine-journal:v1",
        "urn:cua-driver:schema:history-event:v0",
    );
    assert_eq!(parse(&history), Err(PlaintextFault::UnsupportedDataschema));
    // A v0 history event is not a journal record.
    let v0 = br#"{"specversion":"1.0","dataschema":"urn:cua-driver:schema:history-event:v0"}"#;
    assert_eq!(
        JournalSchema::parse(v0),
        Err(PlaintextFault::UnsupportedDataschema)
    );
}

#[test]
fn the_stream_binding_finishes_and_checks_entries() {
    let stream_id = OpaqueId::new("6dd3aa1eef99854a9a3d39ba1e2315f1").unwrap();
    let identity = RecordIdentity {
        id: OpaqueId::new("00000000000000000000000000000001").unwrap(),
        stream_id: &stream_id,
        source: &annal_schema::SourceUrn::for_stream(&stream_id),
        sequence: Sequence::new(7).unwrap(),
    };
    let entry = JournalEntry {
        time_ms: 1_764_540_843_753,
        event: enabled(),
    };
    assert_eq!(Journal::check_write_rules(&entry), Ok(()));
    let finished = Journal::finish(entry, &identity);
    assert_eq!(finished, record(enabled()));
    let mut out = Vec::new();
    Journal::encode(&finished, &mut out);
    assert_eq!(out, finished.to_json_vec());
    assert_eq!(JournalSchema::sequence(&finished), 7);
    assert_eq!(
        JournalSchema::time_since_epoch(&finished).as_millis(),
        1_764_540_843_753
    );
    assert_eq!(JournalSchema::identity(&finished), None);
    // Out-of-bound values are refused before a sequence is assigned.
    let late = JournalEntry {
        time_ms: JOURNAL_TIME_MAX_MS + 1,
        event: enabled(),
    };
    assert_eq!(
        Journal::check_write_rules(&late),
        Err(WriteRuleViolation::JournalTime)
    );
    for event in [
        JournalEvent::RetentionSet {
            days: 0,
            caller: CallerKind::OwnerCli,
        },
        JournalEvent::QuotaSet {
            bytes: QUOTA_MAX_BYTES + 1,
            on_quota: OnQuota::StopCapture,
            caller: CallerKind::OwnerCli,
        },
        JournalEvent::DropsRecorded { count: 0 },
        JournalEvent::SequenceMarked {
            high_water: 0,
            boot: None,
            in_flight_max: None,
        },
        JournalEvent::TornTailRecorded {
            chunk: ChunkId([0; 16]),
            bytes_left_out: TORN_TAIL_MAX_BYTES + 1,
        },
        JournalEvent::SupervisorSignalled(Signal {
            at_ms: JOURNAL_TIME_MAX_MS + 1,
            kind: SignalKind::KeyRecovered,
        }),
    ] {
        let entry = JournalEntry { time_ms: 1, event };
        assert_eq!(
            Journal::check_write_rules(&entry),
            Err(WriteRuleViolation::JournalEvent),
            "{entry:?}"
        );
    }
    assert_eq!(WriteRuleViolation::JournalEvent.field(), "event");
}

#[test]
fn the_time_bound_is_the_end_of_annals_time_range() {
    // 2501-01-01T00:00:00Z minus one millisecond.
    let end = annal_schema::EventTime::parse("2500-12-31T23:59:59.999Z").unwrap();
    assert_eq!(
        end.since_epoch().as_millis(),
        u128::from(JOURNAL_TIME_MAX_MS)
    );
    assert_eq!(annal_schema::time::TIME_MAX_YEAR, 2500);
}

// ---- Properties ----

fn arbitrary_record() -> impl Strategy<Value = JournalRecord> {
    (
        1..=u64::MAX,
        0..=JOURNAL_TIME_MAX_MS,
        any::<[u8; 16]>(),
        test_strategies::event(),
    )
        .prop_map(|(sequence, time_ms, stream, event)| JournalRecord {
            sequence: Sequence::new(sequence).unwrap(),
            time_ms,
            stream: OpaqueId::from_bytes(stream),
            event,
        })
}

proptest! {
    #[test]
    fn every_record_in_bounds_round_trips_as_compact_json(record in arbitrary_record()) {
        let bytes = record.to_json_vec();
        prop_assert!(!bytes.iter().any(|b| b.is_ascii_whitespace()));
        prop_assert_eq!(JournalSchema::parse(&bytes), Ok(record.clone()));
        let entry = JournalEntry { time_ms: record.time_ms, event: record.event.clone() };
        prop_assert_eq!(Journal::check_write_rules(&entry), Ok(()));
    }

    #[test]
    fn replay_is_deterministic_and_equals_incremental_apply(
        events in proptest::collection::vec(test_strategies::event(), 0..48),
    ) {
        let once = State::replay(&events);
        prop_assert_eq!(&once, &State::replay(&events.clone()));
        let mut incremental = State::default();
        for event in &events {
            incremental.apply(event);
        }
        prop_assert_eq!(&incremental, &once);
        prop_assert_eq!(
            once.health(true, 0),
            State::replay(&events).health(true, 0)
        );
    }

    /// The projection folds signals as they arrive instead of keeping them: its health and
    /// restart histories are exactly what replaying the whole list gives, for any inputs.
    #[test]
    fn the_folded_signals_give_what_replaying_them_all_gives(
        signals in proptest::collection::vec(test_strategies::signal(), 0..64),
        admitted: bool,
        enabled: bool,
        paused: bool,
        pending_drops in 0..3u64,
    ) {
        let events: Vec<JournalEvent> = signals
            .iter()
            .copied()
            .map(JournalEvent::SupervisorSignalled)
            .collect();
        let mut state = State::replay(&events);
        state.enabled = enabled;
        state.paused = paused;
        let inputs = crate::health::HealthInputs { admitted, enabled, paused, pending_drops };
        prop_assert_eq!(
            state.health(admitted, pending_drops),
            crate::health::replay(inputs, &signals)
        );
        prop_assert_eq!(state.unmarked_drops(), crate::health::fold(&signals).unmarked_drops());
        for child in Child::ALL {
            // The rule, restated over the whole list: restarts since the last give-up.
            let mut expected = Vec::new();
            for signal in &signals {
                match signal.kind {
                    SignalKind::ChildRestarted { child: c } if c == child => expected.push(signal.at_ms),
                    SignalKind::RestartLimitReached { child: c } if c == child => expected.clear(),
                    _ => {}
                }
            }
            prop_assert_eq!(state.restart_history(child), expected);
            let category = crate::health::fold(&signals).category(&inputs);
            prop_assert!(state.holds(category, admitted, pending_drops));
        }
    }

    #[test]
    fn decisions_never_lower_the_drop_total_nor_the_mark_but_by_a_release(
        steps in proptest::collection::vec(
            (test_strategies::command(), test_strategies::caller()), 0..64),
    ) {
        let mut state = State::default();
        let mut journal = Vec::new();
        for (command, caller) in steps {
            let before = state.clone();
            let release = matches!(command, Command::ReleaseSequences { .. });
            if let Ok(events) = decide(&state, command, caller) {
                for event in &events {
                    prop_assert_eq!(event.check_bounds(), Ok(()));
                    state.apply(event);
                }
                journal.extend(events);
            } else {
                // A refusal appends nothing, so the state cannot change.
            }
            // Only a clean stop's release lowers the mark (tested apart).
            prop_assert!(release || state.history_high_water >= before.history_high_water);
            prop_assert!(state.dropped_total >= before.dropped_total);
            prop_assert!(state.key_epoch.as_ref().map(|k| k.epoch) >= before.key_epoch.as_ref().map(|k| k.epoch));
            prop_assert!(!state.paused || state.enabled);
            prop_assert!((RETENTION_MIN_DAYS..=RETENTION_MAX_DAYS).contains(&state.retention_days));
            prop_assert!((QUOTA_MIN_BYTES..=QUOTA_MAX_BYTES).contains(&state.quota_bytes));
        }
        // The journal alone gives the same state back.
        prop_assert_eq!(State::replay(&journal), state);
    }

    #[test]
    fn an_agent_never_changes_state(
        history in proptest::collection::vec(test_strategies::event(), 0..16),
        command in test_strategies::command(),
    ) {
        let state = State::replay(&history);
        prop_assert_eq!(
            decide(&state, command, CallerKind::Agent),
            Err(CommandError::CallerNotPermitted { caller: CallerKind::Agent })
        );
    }
}

#[test]
fn lost_ranges_merge_when_they_touch_or_overlap_and_refuse_an_empty_or_zero_range() {
    let lost = |first_sequence, last_sequence| JournalEvent::RecordsLost {
        first_sequence,
        last_sequence,
    };
    let state = State::replay(&[
        lost(20, 25),
        lost(6, 10),
        lost(11, 12),
        lost(24, 30),
        lost(40, 40),
        lost(6, 10),
    ]);
    assert_eq!(state.lost, [6..=12, 20..=30, 40..=40]);
    assert!(state.is_lost(12) && state.is_lost(40) && state.is_lost(20));
    assert!(!state.is_lost(13) && !state.is_lost(39) && !state.is_lost(5));
    assert_eq!(lost(0, 3).check_bounds(), Err(BoundViolation::LostRange));
    assert_eq!(lost(5, 4).check_bounds(), Err(BoundViolation::LostRange));
    assert_eq!(lost(5, 5).check_bounds(), Ok(()));
}

/// The owner's access-event setting is a journaled fact: replayed, the last switch holds
/// (default on); a failed commit of switching it back on leaves it off.
#[test]
fn the_owners_access_setting_replays_and_a_failed_switch_on_is_withdrawn() {
    use crate::journal::{Outbox, Widenings};
    let off = JournalEvent::Policy(PolicyEvent::OwnerAccessSwitched { enabled: false });
    let on = JournalEvent::Policy(PolicyEvent::OwnerAccessSwitched { enabled: true });
    assert!(given(&[]).state.policy.owner_access_events());
    assert!(
        !given(std::slice::from_ref(&off))
            .state
            .policy
            .owner_access_events()
    );
    assert!(
        given(&[off.clone(), on.clone()])
            .state
            .policy
            .owner_access_events()
    );
    // Given off, when switching on fails to commit, then it stays off and the undo is held.
    let mut state = given(std::slice::from_ref(&off)).state;
    let mut widenings = Widenings::default();
    widenings.note(&state, &on);
    state.apply(&on);
    let mut outbox = Outbox::default();
    outbox.hold([on.clone()]);
    widenings.withdraw(&mut state, &mut outbox);
    assert!(!state.policy.owner_access_events());
    assert_eq!(outbox.held(), [off]);
}
