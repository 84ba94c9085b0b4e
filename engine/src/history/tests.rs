//! The history writer's rules through a given/when/then harness: given what the writer knows,
//! when an input arrives (a batch planned, appended or failed, a store or key failure), then
//! these effects, in this order, and this state after them.

use std::ops::RangeInclusive;

use annal_schema::{EventDraft, EventTime, HealthCategory, Payload, Platform, Subject};

use super::*;
use crate::journal::JournalEvent;

// ---- The harness ----

/// What the writer knows before the input.
struct Given {
    state: State,
}

/// The state after an input, and the effects it returned.
struct Then {
    state: State,
    effects: Vec<Effect>,
}

/// A writer that opened a store holding sequences through `high_water`.
fn given_opened(high_water: u64) -> Given {
    let mut state = State::default();
    state.opened(high_water);
    Given { state }
}

impl Given {
    /// Events lost earlier, not yet reported by a marker.
    fn lost_earlier(mut self, events: u64) -> Self {
        self.state.count_lost(events);
        self
    }

    /// The store failed before.
    fn storage_failing(mut self) -> Self {
        let _ = self.state.storage_fault(HealthCategory::StorageUnavailable);
        self
    }

    /// The key failed before.
    fn key_failing(mut self) -> Self {
        let _ = self.state.key_fault(HealthCategory::KeyUnavailable);
        self
    }

    /// Applies `input` to the state.
    fn when(mut self, input: impl FnOnce(&mut State) -> Vec<Effect>) -> Then {
        let effects = input(&mut self.state);
        Then {
            state: self.state,
            effects,
        }
    }
}

impl Then {
    /// The input returned exactly `effects`; returns the state after it.
    #[track_caller]
    fn then_expect(self, effects: &[Effect]) -> State {
        assert_eq!(self.effects, effects);
        self.state
    }
}

/// A draft of `payload` (the rules read only the payload).
fn draft(payload: Payload) -> EventDraft {
    EventDraft {
        subject: Subject::new("writer").unwrap(),
        time: EventTime::from_unix(std::time::Duration::from_secs(1_800_000_000)).unwrap(),
        session_id: None,
        action_id: None,
        platform: Platform::Linux,
        capability: None,
        application: None,
        payload,
    }
}

/// A drop marker of `count` drops.
fn marker(count: u64) -> EventDraft {
    draft(Payload::Health {
        category: HealthCategory::EventsDropped,
        count,
    })
}

/// An event that is not a marker.
fn event() -> EventDraft {
    draft(Payload::Session {
        phase: annal_schema::SessionPhase::Started,
    })
}

fn drops_recorded(count: u64) -> Effect {
    Effect::Record(vec![JournalEvent::DropsRecorded { count }])
}

fn records_lost(range: RangeInclusive<u64>) -> [Effect; 2] {
    [
        Effect::Record(vec![JournalEvent::RecordsLost {
            first_sequence: *range.start(),
            last_sequence: *range.end(),
        }]),
        Effect::ForgetLost(range),
    ]
}

fn unavailable() -> Effect {
    Effect::Signal(SignalKind::StorageFailed {
        category: crate::health::StorageFault::StorageUnavailable,
    })
}

/// Plans `drafts` at `next`, in `state`.
fn plan(state: &State, drafts: &[EventDraft], counted: u64, next: u64) -> AppendPlan {
    state.plan_append(drafts, counted, Some(next)).unwrap()
}

// ---- Batch markers: what a failed append cost ----

/// Sequences 11..=15, a marker of 3 drops at index 1 and one of 2 drops at index 4.
fn batch() -> BatchMarkers {
    BatchMarkers::new(vec![(1, 3), (4, 2)])
}

#[test]
fn a_failure_that_lost_nothing_counts_no_drop_and_keeps_every_markers_drops() {
    assert_eq!(
        batch().lost(11, 5, None),
        FailedAppend {
            lost_events: 0,
            durable_drops: 5
        }
    );
}

#[test]
fn only_the_lost_tail_of_a_batch_is_counted_and_its_durable_markers_drops_are_kept() {
    // 11 and 12 reached a chunk the append closed; 13..=15 are lost, the second marker
    // with them: two events, and the 2 drops it carried, are reported again.
    assert_eq!(
        batch().lost(11, 5, Some(&(13..=15))),
        FailedAppend {
            lost_events: 4,
            durable_drops: 3
        }
    );
}

#[test]
fn lost_records_of_earlier_batches_count_one_each() {
    // 8..=10 were written by earlier batches and never made durable.
    assert_eq!(
        batch().lost(11, 5, Some(&(8..=15))),
        FailedAppend {
            lost_events: 3 + 3 + 5,
            durable_drops: 0
        }
    );
}

#[test]
fn markers_are_found_by_their_place_in_the_batch() {
    let drafts = [event(), marker(3), event(), event(), marker(2)];
    assert_eq!(BatchMarkers::of(&drafts), batch());
    assert_eq!(batch().count(), 2);
    assert_eq!(batch().drops(), 5);
}

// ---- The sequence reservation ----

#[test]
fn a_batch_within_the_reservation_reserves_nothing() {
    let mut state = State::default();
    state.opened(10);
    let reserved = plan(&state, &[event(), event()], 0, 1);
    assert_eq!(reserved.reservation(), None);
}

#[test]
fn a_batch_past_the_reservation_reserves_a_block_above_its_last_sequence() {
    let state = given_opened(10).state;
    let plan = plan(&state, &[event(), event()], 0, 10);
    assert_eq!(
        plan.reservation(),
        Some(JournalEvent::SequenceMarked {
            high_water: 11 + SEQUENCE_RESERVE_BLOCK,
            boot: None,
            in_flight_max: Some(IN_FLIGHT_SEQUENCES_MAX),
        })
    );
}

#[test]
fn a_batch_that_would_run_too_far_past_what_is_durable_is_synced_first() {
    let state = given_opened(0).state;
    // Durable through 100: a batch ending at 100 + the bound may go; one more may not.
    let within = plan(&state, &[event(), event()], 0, 99 + IN_FLIGHT_SEQUENCES_MAX);
    assert!(!State::must_sync_first(&within, 100));
    let past = plan(
        &state,
        &[event(), event()],
        0,
        100 + IN_FLIGHT_SEQUENCES_MAX,
    );
    assert!(State::must_sync_first(&past, 100));
    assert!(!State::must_sync_first(&past, 101));
}

#[test]
fn a_durable_reservation_covers_the_next_batches_and_never_goes_down() {
    let mut state = given_opened(0).state;
    let first = plan(&state, &[event()], 0, 1);
    state.reserved(&first);
    assert_eq!(state.reserved_through(), 1 + SEQUENCE_RESERVE_BLOCK);
    let next = plan(&state, &[event()], 0, 2);
    assert_eq!(next.reservation(), None);
    // A plan made before a later reservation never lowers it.
    state.reserved(&first);
    assert_eq!(state.reserved_through(), 1 + SEQUENCE_RESERVE_BLOCK);
}

#[test]
fn a_store_with_no_sequence_left_reserves_without_overflowing() {
    let state = given_opened(10).state;
    let plan = plan_none_left(&state);
    assert_eq!(
        plan.reservation(),
        Some(JournalEvent::SequenceMarked {
            high_water: u64::MAX,
            boot: None,
            in_flight_max: Some(IN_FLIGHT_SEQUENCES_MAX),
        })
    );
}

fn plan_none_left(state: &State) -> AppendPlan {
    state.plan_append(&[event(), event()], 0, None).unwrap()
}

#[test]
fn an_empty_batch_plans_nothing() {
    assert_eq!(State::default().plan_append(&[], 0, Some(1)), None);
}

// ---- Drop accounting of an append ----

#[test]
fn an_appended_marker_puts_its_drops_in_the_lifetime_total() {
    let given = given_opened(100);
    let plan = plan(&given.state, &[marker(4), event()], 0, 1);
    let state = given
        .when(|s| s.appended(&plan))
        .then_expect(&[drops_recorded(4)]);
    assert_eq!(state.projection.dropped_total, 4);
    assert_eq!(state.lost_unreported(), 0);
}

#[test]
fn an_appended_marker_of_owed_drops_signals_them_marked_and_never_counts_them_again() {
    let given = given_opened(100);
    // 4 owed (counted in an earlier life), 0 new.
    let plan = plan(&given.state, &[marker(4)], 4, 1);
    let state = given
        .when(|s| s.appended(&plan))
        .then_expect(&[Effect::Signal(SignalKind::DropsMarked { count: 4 })]);
    assert_eq!(state.projection.dropped_total, 0);
}

#[test]
fn an_append_after_a_store_failure_signals_recovery_once() {
    let given = given_opened(100).storage_failing();
    let plan = plan(&given.state, &[event()], 0, 1);
    let mut state = given
        .when(|s| s.appended(&plan))
        .then_expect(&[Effect::Signal(SignalKind::StorageRecovered)]);
    assert_eq!(state.appended(&plan), Vec::new());
}

#[test]
fn a_batch_not_appended_reports_its_events_and_new_drops_by_the_next_marker() {
    let given = given_opened(100).lost_earlier(1);
    // Two events and a marker of 3 drops, 1 of them owed already: 2 + 2 to report.
    let plan = plan(&given.state, &[event(), marker(3), event()], 1, 1);
    let mut state = given.state;
    state.not_appended(&plan);
    assert_eq!(state.lost_unreported(), 1 + 4);
    assert_eq!(state.projection.dropped_total, 0);
}

#[test]
fn a_refused_append_loses_the_whole_batch_and_journals_the_range() {
    let given = given_opened(100);
    let plan = plan(&given.state, &[event(), marker(3), event()], 0, 7);
    let [record, forget] = records_lost(7..=9);
    let state = given
        .when(|s| s.append_failed(&plan, true, None, None))
        // 2 events and the 3 drops the lost marker carried, reported again.
        .then_expect(&[record, forget, unavailable()]);
    assert_eq!(state.lost_unreported(), 5);
    assert_eq!(state.projection.dropped_total, 0);
}

#[test]
fn a_failed_append_whose_marker_reached_the_disk_counts_its_drops_once() {
    let given = given_opened(100);
    // 7 (the marker) reached a chunk the append closed; 8 and 9 are lost.
    let plan = plan(&given.state, &[marker(3), event(), event()], 0, 7);
    let [record, forget] = records_lost(8..=9);
    let state = given
        .when(|s| {
            s.append_failed(
                &plan,
                false,
                Some(8..=9),
                Some(HealthCategory::StorageCorrupt),
            )
        })
        .then_expect(&[
            record,
            forget,
            drops_recorded(3),
            Effect::Signal(SignalKind::StorageFailed {
                category: crate::health::StorageFault::StorageCorrupt,
            }),
        ]);
    assert_eq!(state.lost_unreported(), 2);
    assert_eq!(state.projection.dropped_total, 3);
}

#[test]
fn owed_drops_whose_marker_was_lost_stay_owed_and_are_not_reported_again() {
    let given = given_opened(100);
    let plan = plan(&given.state, &[marker(4)], 4, 1);
    let [record, forget] = records_lost(1..=1);
    let state = given
        .when(|s| s.append_failed(&plan, true, None, None))
        .then_expect(&[record, forget, unavailable()]);
    assert_eq!(state.lost_unreported(), 0);
}

#[test]
fn a_failure_that_lost_nothing_journals_no_range() {
    let given = given_opened(100);
    let plan = plan(&given.state, &[event()], 0, 1);
    given
        .when(|s| s.append_failed(&plan, false, None, None))
        .then_expect(&[unavailable()]);
}

#[test]
fn a_failed_sync_counts_each_lost_record_once() {
    let state = given_opened(100)
        .lost_earlier(2)
        .when(|s| s.records_lost_to(Some(3..=5)))
        .then_expect(&records_lost(3..=5));
    assert_eq!(state.lost_unreported(), 2 + 3);
}

#[test]
fn a_lost_range_outside_the_journals_bounds_is_forgotten_but_not_journaled() {
    given_opened(0)
        .when(|s| s.records_lost(Some(0..=0), 1))
        .then_expect(&[Effect::ForgetLost(0..=0)]);
}

#[test]
fn a_marker_about_to_be_written_takes_every_unreported_loss() {
    let mut state = given_opened(0).lost_earlier(3).state;
    state.count_lost(2);
    assert_eq!(state.take_lost_unreported(), 5);
    assert_eq!(state.lost_unreported(), 0);
}

// ---- Store and key failure signals ----

#[test]
fn a_storage_failure_says_corrupt_only_for_corruption() {
    given_opened(0)
        .when(|s| vec![s.storage_fault(HealthCategory::KeyUnavailable)])
        .then_expect(&[unavailable()]);
}

#[test]
fn a_key_failure_keeps_its_category_and_recovers_once() {
    let mut state = given_opened(0)
        .when(|s| vec![s.key_fault(HealthCategory::KeyLocked)])
        .then_expect(&[Effect::Signal(SignalKind::KeyFailed {
            category: crate::health::KeyFault::KeyLocked,
        })]);
    assert_eq!(
        state.key_ok(),
        Some(Effect::Signal(SignalKind::KeyRecovered))
    );
    assert_eq!(state.key_ok(), None);
}

#[test]
fn a_key_success_with_no_failure_before_signals_nothing() {
    given_opened(0)
        .key_failing()
        .when(|s| s.key_ok().into_iter().collect())
        .then_expect(&[Effect::Signal(SignalKind::KeyRecovered)]);
    let mut fresh = State::default();
    assert_eq!(fresh.key_ok(), None);
    assert_eq!(fresh.storage_ok(), None);
}

// ---- Drafts from drained captures ----

mod drafts {
    use std::sync::Arc;
    use std::time::Duration;

    use annal_schema::{
        ActionOutcome, Capability, EventDraft, EventTime, EvidenceKinds, HealthCategory, Payload,
        Platform, Route, SessionPhase,
    };

    use super::super::*;
    use crate::capture::{CaptureDrain, CaptureHandle, Captured, Drained, capture_channel};
    use crate::clock::ManualClock;
    use crate::keys::RootKey;

    /// A raw session label that must never reach a draft.
    const SECRET_LABEL: &str = "s3cret-session-label-41";

    /// When the captures happen.
    const CAPTURED_AT: Duration = Duration::from_secs(1_800_000_000);

    /// When the writer drafts them (a marker's time).
    const NOW: Duration = Duration::from_secs(1_800_000_060);

    /// The action-id seed of the writer in these tests.
    const SEED: [u8; 32] = [9; 32];

    fn channel(capacity: usize) -> (CaptureHandle, CaptureDrain) {
        let clock = ManualClock::new(CAPTURED_AT);
        let (handle, drain) = capture_channel(capacity, Arc::new(clock)).unwrap();
        drain.control().set_accepting(true);
        (handle, drain)
    }

    fn drained(drain: &mut CaptureDrain) -> Vec<Drained<Captured>> {
        let mut out = Vec::new();
        drain.drain(usize::MAX, &mut out);
        out
    }

    fn key() -> crate::keys::SessionIdKey {
        RootKey::from_bytes([3; 32]).session_id_key()
    }

    fn outcome() -> ActionOutcome {
        ActionOutcome {
            effect: annal_schema::Effect::Confirmed,
            route: Route::Accessibility,
            delivery: None,
            delivered_count: Some(1),
            evidence_kinds: EvidenceKinds::default(),
            escalation_kind: None,
        }
    }

    /// Drafts `batch` in `state`, with the session-id key.
    fn draft_all(state: &mut State, batch: Vec<Drained<Captured>>) -> Vec<EventDraft> {
        let mut drafter = Drafter::new(Platform::Linux, SEED);
        state.drafts(&mut drafter, batch, Some(&key()), NOW)
    }

    fn dropped_count(draft: &EventDraft) -> Option<u64> {
        match draft.payload {
            Payload::Health {
                category: HealthCategory::EventsDropped,
                count,
            } => Some(count),
            _ => None,
        }
    }

    #[test]
    fn an_action_and_its_completion_share_the_id_the_seed_gives_and_their_capture_time() {
        let (handle, mut drain) = channel(8);
        let session = handle.session_started(SECRET_LABEL);
        let token = handle.action_started(Capability::new("click").unwrap(), None, Some(&session));
        handle.action_completed(token, outcome());
        let mut state = State::default();
        let drafts = draft_all(&mut state, drained(&mut drain));
        assert_eq!(drafts.len(), 3);
        let (start, done) = (&drafts[1], &drafts[2]);
        assert_eq!(start.payload, Payload::ActionStarted);
        assert_eq!(done.payload, Payload::ActionCompleted(outcome()));
        assert_eq!(start.action_id, done.action_id);
        let id = start.action_id.clone().unwrap();
        assert!((0..4).any(|n| crate::capture::action_id(&SEED, n) == id));
        assert_eq!(start.capability, Some(Capability::new("click").unwrap()));
        assert_eq!(done.capability, start.capability);
        assert_eq!(start.time, EventTime::from_unix(CAPTURED_AT).unwrap());
        assert_eq!(start.platform, Platform::Linux);
        assert_eq!(state.lost_unreported(), 0);
    }

    #[test]
    fn a_session_id_is_keyed_the_same_for_every_event_of_a_session_and_never_the_label() {
        let (handle, mut drain) = channel(8);
        let first = handle.session_started(SECRET_LABEL);
        let second = handle.session_started("another-label");
        let _ = handle.action_started(Capability::new("type").unwrap(), None, Some(&first));
        handle.session_ended(first);
        handle.session_ended(second);
        let drafts = draft_all(&mut State::default(), drained(&mut drain));
        assert_eq!(drafts.len(), 5);
        let expected = key().session_id(SECRET_LABEL);
        for index in [0, 2, 3] {
            assert_eq!(
                drafts[index].session_id.as_ref(),
                Some(&expected),
                "{index}"
            );
        }
        assert_eq!(
            drafts[1].session_id,
            Some(key().session_id("another-label"))
        );
        assert_eq!(
            drafts[3].payload,
            Payload::Session {
                phase: SessionPhase::Ended
            }
        );
        // The raw label reaches no draft, in any form the writer could store or print.
        for draft in &drafts {
            assert!(!format!("{draft:?}").contains(SECRET_LABEL));
            assert!(!format!("{:?}", draft.subject).contains(SECRET_LABEL));
        }
    }

    #[test]
    fn without_the_session_key_no_session_id_is_written() {
        let (handle, mut drain) = channel(8);
        let _session = handle.session_started(SECRET_LABEL);
        let mut drafter = Drafter::new(Platform::Linux, SEED);
        let drafts = State::default().drafts(&mut drafter, drained(&mut drain), None, NOW);
        assert_eq!(drafts.len(), 1);
        assert_eq!(drafts[0].session_id, None);
    }

    /// `n` captured actions, drained.
    fn actions(n: usize) -> Vec<Drained<Captured>> {
        let (handle, mut drain) = channel(n);
        for _ in 0..n {
            let _ = handle.action_started(Capability::new("a").unwrap(), None, None);
        }
        drained(&mut drain)
    }

    fn dropped(count: u64) -> Drained<Captured> {
        Drained::Dropped { count }
    }

    #[test]
    fn one_marker_goes_before_the_first_event_after_drops_with_the_earlier_losses() {
        let mut events = actions(3).into_iter();
        let mut next = || events.next().unwrap();
        let batch = vec![next(), dropped(2), dropped(1), next(), next()];
        // 4 lost by the writer earlier.
        let mut state = State::default();
        state.count_lost(4);
        let drafts = draft_all(&mut state, batch);
        let markers: Vec<_> = drafts.iter().map(dropped_count).collect();
        assert_eq!(markers, [Some(4), None, Some(3), None, None]);
        assert_eq!(drafts[0].time, EventTime::from_unix(NOW).unwrap());
        assert_eq!(state.lost_unreported(), 0);
    }

    #[test]
    fn drops_no_event_follows_wait_for_the_next_batch_and_are_never_marked_twice() {
        let mut events = actions(2).into_iter();
        let mut state = State::default();
        let first = vec![events.next().unwrap(), dropped(5)];
        let drafts = draft_all(&mut state, first);
        assert_eq!(drafts.iter().filter_map(dropped_count).count(), 0);
        assert_eq!(state.lost_unreported(), 5);
        let drafts = draft_all(&mut state, vec![events.next().unwrap()]);
        let markers: Vec<_> = drafts.iter().map(dropped_count).collect();
        assert_eq!(markers, [Some(5), None]);
        assert_eq!(state.lost_unreported(), 0);
        // Nothing is marked twice: a batch with no drops has no marker.
        let drafts = draft_all(&mut state, actions(1));
        assert_eq!(drafts.iter().filter_map(dropped_count).count(), 0);
    }

    #[test]
    fn an_empty_batch_drafts_nothing_and_keeps_the_losses_for_later() {
        let mut state = State::default();
        state.count_lost(2);
        assert!(draft_all(&mut state, Vec::new()).is_empty());
        assert_eq!(state.lost_unreported(), 2);
    }

    #[test]
    fn a_drafter_never_shows_its_seed() {
        let drafter = Drafter::new(Platform::Linux, SEED);
        assert!(!format!("{drafter:?}").contains("9, 9"));
    }
}

// ---- Admission, quota, retention and the group-commit tick ----

mod admission {
    use std::time::Duration;

    use super::super::*;
    use crate::health::SignalKind;
    use crate::journal::{CallerKind, Command, CommandError, OnQuota, decide};
    use crate::query::RetentionCutoff;
    use crate::store::Eviction;

    /// An admitted, drained writer whose store is open and enabled, with `quota_bytes` and
    /// `on_quota`.
    fn running(quota_bytes: u64, on_quota: OnQuota) -> State {
        let mut state = State::default();
        state.admit(true, true);
        state.opened(0);
        for command in [
            Command::Enable,
            Command::SetQuota {
                bytes: quota_bytes,
                on_quota,
            },
        ] {
            for event in decide(&state.projection, command, CallerKind::OwnerCli).unwrap() {
                state.projection.apply(&event);
            }
        }
        state
    }

    const QUOTA: u64 = 1 << 30;

    #[test]
    fn a_running_writer_accepts_and_every_reason_to_stop_closes_capture() {
        assert!(running(QUOTA, OnQuota::StopCapture).accepting());
        /// One reason capture closes, and how it comes about.
        type Reason = (&'static str, fn(&mut State));
        let closed: [Reason; 6] = [
            ("not admitted", |s| s.admit(false, true)),
            ("undrained", |s| s.undrained()),
            ("disabled", |s| s.projection.enabled = false),
            ("paused", |s| s.projection.paused = true),
            ("not open", |s| s.open = false),
            ("at the quota", |s| {
                let _ = s.check_quota(QUOTA);
            }),
        ];
        for (why, change) in closed {
            let mut state = running(QUOTA, OnQuota::StopCapture);
            change(&mut state);
            assert!(!state.accepting(), "{why}");
        }
    }

    #[test]
    fn a_writer_that_never_opened_never_accepts_and_is_never_at_the_quota() {
        let mut state = State::default();
        state.admit(true, true);
        state.projection.enabled = true;
        assert!(!state.accepting());
        assert_eq!(state.check_quota(u64::MAX), None);
        assert!(!state.at_quota());
    }

    #[test]
    fn reaching_the_quota_signals_once_and_falling_below_clears_it_once() {
        let mut state = running(QUOTA, OnQuota::StopCapture);
        assert_eq!(state.check_quota(QUOTA - 1), None);
        assert_eq!(
            state.check_quota(QUOTA),
            Some(Effect::Signal(SignalKind::QuotaReached))
        );
        assert_eq!(state.check_quota(QUOTA + 1), None);
        assert!(state.at_quota());
        assert_eq!(
            state.check_quota(QUOTA - 1),
            Some(Effect::Signal(SignalKind::QuotaCleared))
        );
        assert_eq!(state.check_quota(0), None);
        assert!(state.accepting());
    }

    #[test]
    fn a_new_open_starts_below_the_quota() {
        let mut state = running(QUOTA, OnQuota::StopCapture);
        let _ = state.check_quota(QUOTA);
        state.opened(10);
        assert!(!state.at_quota());
    }

    #[test]
    fn only_evict_oldest_lets_pruning_evict() {
        assert_eq!(running(QUOTA, OnQuota::StopCapture).eviction(7), None);
        assert_eq!(
            running(QUOTA, OnQuota::EvictOldest).eviction(7),
            Some(Eviction {
                used_bytes: 7,
                quota_bytes: QUOTA
            })
        );
    }

    #[test]
    fn retention_cuts_off_the_configured_days_before_now() {
        let now = Duration::from_secs(1_800_000_000);
        let state = running(QUOTA, OnQuota::StopCapture);
        assert_eq!(
            state.retention_cutoff(now),
            RetentionCutoff::new(now, state.projection.retention_days)
        );
    }

    #[test]
    fn the_chunk_size_follows_the_quota() {
        let small = running(crate::journal::QUOTA_MIN_BYTES, OnQuota::StopCapture);
        let large = running(QUOTA, OnQuota::StopCapture);
        assert_eq!(
            small.chunk_size_limit_bytes(),
            crate::store::chunk_size_limit_for_quota(crate::journal::QUOTA_MIN_BYTES)
        );
        assert!(small.chunk_size_limit_bytes() <= large.chunk_size_limit_bytes());
    }

    #[test]
    fn the_tick_syncs_only_records_that_waited_the_interval_and_rearms_for_younger_ones() {
        let interval = Duration::from_millis(5);
        assert_eq!(commit_tick(None, interval), Tick::Synced);
        assert_eq!(commit_tick(Some(interval), interval), Tick::Sync);
        assert_eq!(commit_tick(Some(interval * 2), interval), Tick::Sync);
        assert_eq!(
            commit_tick(Some(Duration::from_millis(2)), interval),
            Tick::Rearm(Duration::from_millis(3))
        );
    }

    // ---- Settings ----

    #[test]
    fn a_setting_is_the_journals_decision() {
        let state = running(QUOTA, OnQuota::StopCapture);
        let setting = Setting::Retention { days: 30 };
        assert_eq!(
            state.decide_setting(setting, CallerKind::OwnerCli),
            decide(&state.projection, setting.command(), CallerKind::OwnerCli)
        );
        assert!(
            !state
                .decide_setting(setting, CallerKind::OwnerCli)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn no_setting_is_decided_before_the_writer_opened() {
        let state = State::default();
        assert_eq!(
            state.decide_setting(Setting::Retention { days: 30 }, CallerKind::OwnerCli),
            Err(CommandError::NotEnabled)
        );
    }

    #[test]
    fn a_setting_out_of_bounds_is_refused_and_never_clamped() {
        let state = running(QUOTA, OnQuota::StopCapture);
        let huge = Setting::Retention { days: u32::MAX };
        assert!(!huge.in_bounds());
        assert!(state.decide_setting(huge, CallerKind::OwnerCli).is_err());
        assert!(Setting::Retention { days: 7 }.in_bounds());
        assert!(
            !Setting::Quota {
                bytes: 0,
                on_quota: OnQuota::EvictOldest
            }
            .in_bounds()
        );
    }
}

// ---- On and off: control operations, the contract at open, skips and releases ----

mod contract {
    use annal_schema::ControlOperation;

    use super::super::*;
    use crate::journal::{CallerKind, CommandError, ContractSource, JournalEvent};
    use crate::store::{ControlRead, StateMirror};

    const RUNNING: StateMirror = StateMirror {
        enabled: true,
        paused: false,
    };
    const PAUSED: StateMirror = StateMirror {
        enabled: true,
        paused: true,
    };
    const DISABLED: StateMirror = StateMirror {
        enabled: false,
        paused: false,
    };

    /// An open writer whose journal holds `events`.
    fn given(events: &[JournalEvent]) -> State {
        let mut state = State {
            projection: crate::journal::State::replay(events),
            ..State::default()
        };
        state.opened(0);
        state
    }

    fn enabled() -> JournalEvent {
        JournalEvent::ControlApplied {
            operation: ControlOperation::Enable,
            caller: CallerKind::OwnerCli,
        }
    }

    fn applied(operation: ControlOperation) -> JournalEvent {
        JournalEvent::ControlApplied {
            operation,
            caller: CallerKind::OwnerCli,
        }
    }

    fn contract_observed(
        operation: ControlOperation,
        source: ContractSource,
        sequence: u64,
    ) -> JournalEvent {
        JournalEvent::ContractObserved {
            operation,
            source,
            sequence,
        }
    }

    #[test]
    fn pause_narrows_and_writes_a_control_event_resume_widens() {
        let state = given(&[enabled()]);
        let pause = state
            .decide_control(ControlOperation::Pause, CallerKind::OwnerCli)
            .unwrap();
        assert!(pause.narrowing);
        assert!(pause.writes_control_event);
        assert_eq!(pause.events.len(), 1);
        let resume = state
            .decide_control(ControlOperation::Resume, CallerKind::OwnerCli)
            .unwrap();
        // Running already: nothing changes, and no control event is written.
        assert_eq!(resume.events, Vec::new());
        assert!(!resume.narrowing);
        assert!(!resume.writes_control_event);
    }

    #[test]
    fn every_flush_writes_a_control_event_even_when_nothing_changes() {
        let flush = given(&[enabled()])
            .decide_control(ControlOperation::Flush, CallerKind::OwnerCli)
            .unwrap();
        assert!(flush.writes_control_event);
        assert!(!flush.narrowing);
        // Paused: still the contract's event. Disabled: recorded in the journal, and nothing is
        // written to the history.
        let paused = given(&[enabled(), applied(ControlOperation::Pause)])
            .decide_control(ControlOperation::Flush, CallerKind::OwnerCli)
            .unwrap();
        assert!(paused.writes_control_event);
        let disabled = given(&[enabled(), applied(ControlOperation::Disable)])
            .decide_control(ControlOperation::Flush, CallerKind::OwnerCli)
            .unwrap();
        assert!(!disabled.writes_control_event);
        assert_eq!(disabled.events.len(), 1, "the journal records the flush");
    }

    #[test]
    fn delete_is_no_control_the_writer_carries_out_and_a_closed_writer_refuses_all() {
        assert_eq!(control_command(ControlOperation::Delete), None);
        assert_eq!(
            given(&[enabled()]).decide_control(ControlOperation::Delete, CallerKind::OwnerCli),
            Err(CommandError::NotEnabled)
        );
        assert_eq!(
            State::default().decide_control(ControlOperation::Pause, CallerKind::OwnerCli),
            Err(CommandError::NotEnabled)
        );
    }

    #[test]
    fn a_contract_state_narrows_only_when_it_is_disabled_or_paused() {
        assert_eq!(narrowing_of(RUNNING), None);
        assert_eq!(narrowing_of(PAUSED), Some(ControlOperation::Pause));
        assert_eq!(narrowing_of(DISABLED), Some(ControlOperation::Disable));
        assert_eq!(implied_by(ControlOperation::Delete), DISABLED);
        assert_eq!(implied_by(ControlOperation::Pause), PAUSED);
        assert_eq!(implied_by(ControlOperation::Resume), RUNNING);
        assert!(narrows(ControlOperation::Disable) && narrows(ControlOperation::Pause));
        assert!(!narrows(ControlOperation::Enable) && !narrows(ControlOperation::Flush));
    }

    #[test]
    fn agreeing_places_are_observed_without_a_write() {
        let mut state = given(&[enabled()]);
        let observed = state.observe_contract(None, Some(RUNNING));
        assert_eq!(observed.events, Vec::new());
        assert_eq!(
            state.contract_answer(&observed),
            ContractAnswer {
                write_state_file: false,
                control_event: None
            }
        );
    }

    #[test]
    fn a_state_file_that_pauses_wins_and_the_stream_gets_the_pause() {
        let mut state = given(&[enabled()]);
        let observed = state.observe_contract(None, Some(PAUSED));
        assert_eq!(
            observed.events,
            [contract_observed(
                ControlOperation::Pause,
                ContractSource::StateFile,
                0
            )]
        );
        assert!(state.projection.paused);
        assert_eq!(
            state.contract_answer(&observed),
            ContractAnswer {
                write_state_file: false,
                control_event: Some(ControlOperation::Pause)
            }
        );
    }

    #[test]
    fn an_unread_disable_event_wins_and_the_state_file_is_written_back() {
        let mut state = given(&[enabled()]);
        let read = ControlRead {
            operation: ControlOperation::Disable,
            sequence: 9,
        };
        let observed = state.observe_contract(Some(read), Some(RUNNING));
        assert_eq!(
            observed.events,
            [contract_observed(
                ControlOperation::Disable,
                ContractSource::ControlEvent,
                9
            )]
        );
        assert!(!state.projection.enabled);
        // The stream's last word is the disable already: only the file disagrees.
        assert_eq!(
            state.contract_answer(&observed),
            ContractAnswer {
                write_state_file: true,
                control_event: None
            }
        );
        assert!(!state.accepting());
    }

    #[test]
    fn a_widening_is_never_taken_and_a_control_event_read_before_is_never_read_again() {
        let mut state = given(&[
            enabled(),
            JournalEvent::ControlApplied {
                operation: ControlOperation::Pause,
                caller: CallerKind::OwnerCli,
            },
            contract_observed(ControlOperation::Pause, ContractSource::ControlEvent, 9),
        ]);
        let resume = ControlRead {
            operation: ControlOperation::Resume,
            sequence: 12,
        };
        let observed_resume = state.observe_contract(Some(resume), Some(PAUSED));
        assert!(state.projection.paused, "a resume read is never taken");
        // The stream's newest word (resume) disagrees with annal's pause: the pause is
        // written to the stream again.
        assert_eq!(
            state.contract_answer(&observed_resume).control_event,
            Some(ControlOperation::Pause)
        );
        let old_disable = ControlRead {
            operation: ControlOperation::Disable,
            sequence: 9,
        };
        let observed_old = state.observe_contract(Some(old_disable), Some(PAUSED));
        assert_eq!(observed_old.events, Vec::new());
        assert!(state.projection.enabled);
    }

    #[test]
    fn a_missing_state_file_is_written() {
        let mut state = given(&[enabled()]);
        let observed = state.observe_contract(None, None);
        assert!(state.contract_answer(&observed).write_state_file);
    }

    #[test]
    fn the_gap_above_the_store_through_the_journals_mark_is_recorded_skipped_once() {
        let mut state = given(&[enabled()]);
        let skip = JournalEvent::SequencesSkipped {
            first_sequence: 11,
            last_sequence: 40,
        };
        assert_eq!(
            state.record_skip(Some(40), Some(10)),
            Some(Effect::Record(vec![skip]))
        );
        assert_eq!(state.record_skip(Some(40), Some(10)), None, "recorded once");
        assert_eq!(state.record_skip(Some(10), Some(10)), None, "no gap");
        assert_eq!(state.record_skip(None, Some(10)), None);
        assert_eq!(
            given(&[]).record_skip(Some(3), None),
            Some(Effect::Record(vec![JournalEvent::SequencesSkipped {
                first_sequence: 1,
                last_sequence: 3
            }]))
        );
    }

    #[test]
    fn a_writer_journals_its_boot_with_each_reservation_and_recovers_only_its_own_boots() {
        use crate::boot::BootId;
        let boot = BootId::from_bytes([1; 16]);
        // Given a writer in a known boot, when a batch passes the reservation, then the
        // reservation carries the boot.
        let mut state = super::given_opened(10).state;
        state.set_boot(Some(boot));
        let reservation = super::plan(&state, &[super::event()], 0, 11).reservation();
        assert_eq!(
            reservation,
            Some(JournalEvent::SequenceMarked {
                high_water: 11 + SEQUENCE_RESERVE_BLOCK,
                boot: Some(boot),
                in_flight_max: Some(IN_FLIGHT_SEQUENCES_MAX),
            })
        );
        // Given that reservation and a crash, the next writer of the same boot releases it
        // down to what is on disk; one of another boot, or of no known boot, releases nothing.
        let reserved = [enabled(), reservation.unwrap()];
        let mut next = given(&reserved);
        next.set_boot(Some(boot));
        assert_eq!(
            next.recover_sequences(Some(11)),
            [JournalEvent::SequenceReleased {
                reserved: 11 + SEQUENCE_RESERVE_BLOCK,
                high_water: 11,
            }]
        );
        let mut other = given(&reserved);
        other.set_boot(Some(BootId::from_bytes([2; 16])));
        assert_eq!(other.recover_sequences(Some(11)), Vec::new());
        assert_eq!(given(&reserved).recover_sequences(Some(11)), Vec::new());
    }

    #[test]
    fn a_clean_stop_releases_only_what_it_never_handed_out() {
        let state = given(&[
            enabled(),
            JournalEvent::SequenceMarked {
                high_water: 100,
                boot: None,
                in_flight_max: None,
            },
        ]);
        assert_eq!(
            state.release_sequences(42),
            [JournalEvent::SequenceReleased {
                reserved: 100,
                high_water: 42
            }]
        );
        assert_eq!(state.release_sequences(100), Vec::new());
        assert_eq!(state.release_sequences(0), Vec::new());
    }
}

// ---- Seals: chaining, what the jobs found, a crash's leftovers ----

mod seals {
    use std::time::Duration;

    use annal_schema::HealthCategory;

    use super::super::*;
    use crate::health::{KeyFault, SignalKind, StorageFault};
    use crate::journal::JournalEvent;
    use crate::profile::ChunkId;
    use crate::seal::{SealFault, SealRead, prepare_seal};
    use crate::store::{ClosedChunk, TornTailFound};

    fn id(n: u8) -> ChunkId {
        ChunkId([n; 16])
    }

    /// Chunk `n`, holding sequences `4n-3..=4n`.
    fn closed(n: u8) -> ClosedChunk {
        ClosedChunk {
            chunk_id: id(n),
            stream_id: annal_schema::OpaqueId::new("6dd3aa1eef99854a9a3d39ba1e2315f1").unwrap(),
            records: 4,
            len_bytes: 100,
            first_sequence: u64::from(n) * 4 - 3,
            last_sequence: u64::from(n) * 4,
            first_time: Duration::from_secs(1_800_000_000),
            last_time: Duration::from_secs(1_800_000_000),
            latest_time: Duration::from_secs(1_800_000_000),
            chain: [n; 32],
        }
    }

    /// A chunk no seal can be prepared for (no records).
    fn empty(n: u8) -> ClosedChunk {
        ClosedChunk {
            records: 0,
            ..closed(n)
        }
    }

    fn storage(category: StorageFault) -> Effect {
        Effect::Signal(SignalKind::StorageFailed { category })
    }

    #[test]
    fn closed_chunks_are_sealed_in_order_each_chained_to_the_one_before() {
        let mut state = State::default();
        let plan = state.chain_seals(&[closed(1), closed(2)]);
        assert_eq!(plan.unsealable, Vec::new());
        assert_eq!(plan.effects, Vec::new());
        let [(first_chunk, first), (second_chunk, second)] = &plan.jobs[..] else {
            panic!("two jobs expected: {plan:?}")
        };
        assert_eq!(
            (first_chunk.chunk_id, second_chunk.chunk_id),
            (id(1), id(2))
        );
        assert_eq!((first.ordinal, second.ordinal), (1, 2));
        assert_eq!(second.previous, first.digest());
        assert_eq!(state.chain_tip(), Some(second));
        // The next one chains to the tip.
        let next = state.chain_seals(&[closed(3)]);
        assert_eq!(next.jobs[0].1.previous, second.digest());
    }

    #[test]
    fn a_chain_goes_on_from_the_tip_found_at_open() {
        let tip = prepare_seal(&closed(1), None).unwrap();
        let mut state = State::default();
        state.set_chain_tip(Some(tip.clone()));
        let plan = state.chain_seals(&[closed(2)]);
        assert_eq!(plan.jobs[0].1.ordinal, tip.ordinal + 1);
        assert_eq!(plan.jobs[0].1.previous, tip.digest());
    }

    #[test]
    fn a_chunk_no_seal_can_be_prepared_for_is_never_sealed_is_signalled_and_breaks_no_chain() {
        let mut state = State::default();
        let plan = state.chain_seals(&[closed(1), empty(2), closed(3)]);
        assert_eq!(plan.unsealable, [id(2)]);
        assert_eq!(plan.effects, [storage(StorageFault::StorageUnavailable)]);
        assert_eq!(plan.jobs.len(), 2);
        assert_eq!(plan.jobs[1].1.previous, plan.jobs[0].1.digest());
    }

    #[test]
    fn a_kept_checkpoint_ends_a_key_failure_once() {
        let mut state = State::default();
        let _ = state.key_fault(HealthCategory::KeyUnavailable);
        assert_eq!(
            state.seal_jobs_ended(&[CheckpointOutcome::Kept, CheckpointOutcome::Kept], false),
            [Effect::Signal(SignalKind::KeyRecovered)]
        );
    }

    #[test]
    fn a_verified_chain_clears_a_rollback_only_when_one_is_held() {
        let mut state = State::default();
        assert_eq!(
            state.seal_jobs_ended(&[CheckpointOutcome::Verified], false),
            Vec::new()
        );
        let rolled_back = [JournalEvent::SupervisorSignalled(crate::health::Signal {
            at_ms: 1,
            kind: SignalKind::StorageFailed {
                category: StorageFault::StorageCorrupt,
            },
        })];
        let mut state = State {
            projection: crate::journal::State::replay(&rolled_back),
            ..State::default()
        };
        assert_eq!(
            state.seal_jobs_ended(&[CheckpointOutcome::Verified], false),
            [Effect::Signal(SignalKind::CheckpointVerified)]
        );
        // Kept (not a first comparison) never clears it.
        assert_eq!(
            state.seal_jobs_ended(&[CheckpointOutcome::Kept], false),
            Vec::new()
        );
    }

    #[test]
    fn failures_keep_their_category_and_a_rollback_is_corruption() {
        let mut state = State::default();
        assert_eq!(
            state.seal_jobs_ended(
                &[
                    CheckpointOutcome::Untouched,
                    CheckpointOutcome::Failed(HealthCategory::KeyLocked),
                    CheckpointOutcome::Failed(HealthCategory::StorageUnavailable),
                    CheckpointOutcome::RolledBack,
                ],
                true
            ),
            [
                Effect::Signal(SignalKind::KeyFailed {
                    category: KeyFault::KeyLocked
                }),
                storage(StorageFault::StorageUnavailable),
                storage(StorageFault::StorageCorrupt),
                // A seal not written: last, once.
                storage(StorageFault::StorageUnavailable),
            ]
        );
    }

    fn seal_read(chunk: ChunkId) -> SealRead {
        SealRead {
            file_name: format!("{}.seal", chunk.to_hex()),
            chunk_id: Some(chunk),
            seal: Err(SealFault::BadName),
        }
    }

    #[test]
    fn at_open_only_unnamed_leftovers_above_the_tip_are_sealed() {
        let tip = prepare_seal(&closed(2), None).unwrap();
        let unsealed = [closed(1), closed(3), closed(4)];
        // 1 is below the tip; 3 has a seal file (mismatched: verify's to report); 4 is sealed.
        let leftovers = leftovers_to_seal(&unsealed, &[seal_read(id(3))], Some(&tip));
        assert_eq!(leftovers, [closed(4)]);
        assert_eq!(leftovers_to_seal(&unsealed, &[], None), unsealed);
    }

    #[test]
    fn a_torn_tail_is_journaled_once_and_only_within_bounds() {
        let tear = |n: u8, bytes_left_out: u64| TornTailFound {
            chunk_id: id(n),
            bytes_left_out,
            prunable: None,
        };
        let recorded = JournalEvent::TornTailRecorded {
            chunk: id(1),
            bytes_left_out: 7,
        };
        let projection = crate::journal::State::replay(std::slice::from_ref(&recorded));
        let torn = [tear(1, 7), tear(2, 9), tear(3, u64::MAX)];
        assert_eq!(
            tears_to_record(&projection, &torn),
            [JournalEvent::TornTailRecorded {
                chunk: id(2),
                bytes_left_out: 9
            }]
        );
    }
}

// ---- Drops at the ends of a writer's life ----

mod ends_of_life {
    use super::super::*;
    use crate::health::{Signal, SignalKind};
    use crate::journal::{CallerKind, JournalEvent};

    fn enabled() -> JournalEvent {
        JournalEvent::ControlApplied {
            operation: annal_schema::ControlOperation::Enable,
            caller: CallerKind::OwnerCli,
        }
    }

    fn state(events: &[JournalEvent], open: bool) -> State {
        let mut state = State {
            projection: crate::journal::State::replay(events),
            ..State::default()
        };
        if open {
            state.opened(0);
        }
        state
    }

    #[test]
    fn at_a_stop_waiting_drops_get_a_marker_of_their_own_when_history_is_written() {
        let mut state = state(&[enabled()], true);
        state.count_lost(3);
        assert_eq!(state.trailing_drops(), TrailingDrops::Mark(3));
        assert_eq!(state.lost_unreported(), 0);
        assert_eq!(state.trailing_drops(), TrailingDrops::None);
    }

    #[test]
    fn at_a_stop_with_history_disabled_or_closed_the_drops_are_journaled_without_a_marker() {
        for (events, open) in [(&[][..], true), (&[enabled()][..], false)] {
            let mut state = state(events, open);
            state.count_lost(3);
            assert_eq!(
                state.trailing_drops(),
                TrailingDrops::Record(Effect::Record(vec![JournalEvent::DropsRecorded {
                    count: 3
                }]))
            );
            // In the total now, never counted again.
            assert_eq!(state.projection.dropped_total, 3);
            assert_eq!(state.lost_unreported(), 0);
        }
    }

    #[test]
    fn drops_an_earlier_life_never_marked_are_owed_a_marker_only_while_enabled() {
        let observed = JournalEvent::SupervisorSignalled(Signal {
            at_ms: 1,
            kind: SignalKind::DropsObserved { count: 4 },
        });
        let recorded = JournalEvent::DropsRecorded { count: 4 };
        let owed = [enabled(), recorded.clone(), observed.clone()];
        assert_eq!(state(&owed, true).owed_drops(), Some(4));
        assert_eq!(state(&[recorded, observed], true).owed_drops(), None);
        assert_eq!(state(&[enabled()], true).owed_drops(), None);
    }
}

// ---- The checkpoint's standing, handed from seal job to seal job ----

mod checkpoint {
    use annal_schema::HealthCategory;

    use super::super::*;

    use CheckpointAnswer as A;
    use CheckpointOutcome as O;
    use CheckpointStep as Step;
    use CheckpointSync as Sync;

    #[test]
    fn what_a_job_does_with_the_checkpoint_given_where_it_stands() {
        // (standing, seal written, has a seal of its own) -> step
        let table = [
            (Sync::Unchecked, false, true, Step::Nothing),
            (Sync::Following, false, true, Step::Nothing),
            (Sync::Frozen, true, true, Step::Nothing),
            (Sync::Frozen, true, false, Step::Nothing),
            (Sync::Unchecked, true, true, Step::Reconcile),
            (Sync::Unchecked, true, false, Step::Reconcile),
            (Sync::Following, true, true, Step::Store),
            (Sync::Following, true, false, Step::Nothing),
        ];
        for (sync, written, sealing, step) in table {
            assert_eq!(
                sync.step(written, sealing),
                step,
                "{sync:?} {written} {sealing}"
            );
        }
    }

    #[test]
    fn what_the_answer_makes_of_the_job_and_the_standing_it_hands_on() {
        let failed = A::Failed(HealthCategory::KeyLocked);
        let table = [
            (
                Sync::Unchecked,
                Step::Reconcile,
                Some(A::Done),
                O::Verified,
                Sync::Following,
            ),
            (
                Sync::Unchecked,
                Step::Reconcile,
                Some(A::RolledBack),
                O::RolledBack,
                Sync::Frozen,
            ),
            // A failed comparison is made again by the next job.
            (
                Sync::Unchecked,
                Step::Reconcile,
                Some(failed),
                O::Failed(HealthCategory::KeyLocked),
                Sync::Unchecked,
            ),
            (
                Sync::Following,
                Step::Store,
                Some(A::Done),
                O::Kept,
                Sync::Following,
            ),
            // Moved by another history's writer: never followed again in this life.
            (
                Sync::Following,
                Step::Store,
                Some(A::RolledBack),
                O::RolledBack,
                Sync::Frozen,
            ),
            (
                Sync::Following,
                Step::Store,
                Some(failed),
                O::Failed(HealthCategory::KeyLocked),
                Sync::Following,
            ),
            (
                Sync::Frozen,
                Step::Nothing,
                None,
                O::Untouched,
                Sync::Frozen,
            ),
            (
                Sync::Unchecked,
                Step::Nothing,
                None,
                O::Untouched,
                Sync::Unchecked,
            ),
            (
                Sync::Following,
                Step::Store,
                None,
                O::Untouched,
                Sync::Following,
            ),
        ];
        for (sync, step, answer, outcome, next) in table {
            assert_eq!(
                sync.after(step, answer),
                (outcome, next),
                "{sync:?} {step:?} {answer:?}"
            );
        }
    }

    #[test]
    fn a_frozen_checkpoint_stays_frozen_whatever_follows() {
        let mut sync = Sync::Unchecked;
        for answer in [A::RolledBack, A::Done, A::Done] {
            let step = sync.step(true, true);
            let answer = (step != Step::Nothing).then_some(answer);
            sync = sync.after(step, answer).1;
        }
        assert_eq!(sync, Sync::Frozen);
    }
}

// ---- A property: nothing lost silently, nothing reported twice ----

mod conservation {
    use std::sync::Arc;
    use std::time::Duration;

    use annal_schema::{Capability, EventDraft, HealthCategory, Payload, Platform};
    use proptest::prelude::*;

    use super::super::*;
    use crate::capture::{Captured, Drained, capture_channel};
    use crate::clock::ManualClock;

    const NOW: Duration = Duration::from_secs(1_800_000_000);

    /// `n` captured actions, drained.
    fn actions(n: usize) -> Vec<Drained<Captured>> {
        let (handle, mut drain) =
            capture_channel(n.max(1), Arc::new(ManualClock::new(NOW))).unwrap();
        drain.control().set_accepting(true);
        for _ in 0..n {
            let _ = handle.action_started(Capability::new("a").unwrap(), None, None);
        }
        let mut out = Vec::new();
        drain.drain(usize::MAX, &mut out);
        out
    }

    /// What became of one batch's append.
    #[derive(Debug, Clone, Copy)]
    enum Outcome {
        /// All of it durable.
        Appended,
        /// None of it reached the disk.
        Refused,
        /// The last `k` records lost; the rest reached a chunk the append closed.
        LostTail(usize),
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![
            3 => Just(Outcome::Appended),
            1 => Just(Outcome::Refused),
            1 => (1usize..6).prop_map(Outcome::LostTail),
        ]
    }

    fn marker_drops(draft: &EventDraft) -> Option<u64> {
        match draft.payload {
            Payload::Health {
                category: HealthCategory::EventsDropped,
                count,
            } => Some(count),
            _ => None,
        }
    }

    proptest! {
        /// Every captured event and every queue drop ends in exactly one place: a durable
        /// event, the lifetime drop total (carried by a durable marker), or the drops still
        /// waiting for the next marker.
        #[test]
        fn every_event_is_durable_or_counted_dropped_exactly_once(
            batches in proptest::collection::vec((0usize..5, 0u64..4, outcome()), 1..24),
        ) {
            let mut state = State::default();
            state.opened(0);
            let mut drafter = Drafter::new(Platform::Linux, [5; 32]);
            let (mut offered, mut durable_events, mut durable_marked) = (0u64, 0u64, 0u64);
            let mut next_sequence = 1u64;
            for (events, queue_drops, outcome) in batches {
                let mut batch = Vec::new();
                if queue_drops > 0 {
                    batch.push(Drained::Dropped { count: queue_drops });
                }
                batch.extend(actions(events));
                offered += events as u64 + queue_drops;
                let drafts = state.drafts(&mut drafter, batch, None, NOW);
                let Some(plan) = state.plan_append(&drafts, 0, Some(next_sequence)) else {
                    continue;
                };
                if plan.reservation().is_some() {
                    state.reserved(&plan);
                }
                let count = drafts.len();
                let kept = match outcome {
                    Outcome::Appended => {
                        let _ = state.appended(&plan);
                        count
                    }
                    Outcome::Refused => {
                        let _ = state.append_failed(&plan, true, None, None);
                        0
                    }
                    Outcome::LostTail(k) => {
                        let k = k.min(count);
                        let first_lost = next_sequence + (count - k) as u64;
                        let last = next_sequence + count as u64 - 1;
                        let _ = state.append_failed(&plan, false, Some(first_lost..=last), None);
                        count - k
                    }
                };
                for draft in &drafts[..kept] {
                    match marker_drops(draft) {
                        Some(drops) => durable_marked += drops,
                        None => durable_events += 1,
                    }
                }
                if !matches!(outcome, Outcome::Refused) {
                    next_sequence += count as u64;
                }
            }
            prop_assert_eq!(state.projection.dropped_total, durable_marked);
            prop_assert_eq!(
                durable_events + state.projection.dropped_total + state.lost_unreported(),
                offered
            );
        }
    }
}

// ---- The journal's answer, and the state file while no key loads ----

mod projection {
    use super::super::*;
    use crate::journal::{CallerKind, JournalEvent};
    use crate::store::StateMirror;

    #[test]
    fn the_journals_answer_replaces_what_the_writer_knew() {
        let mut state = State::default();
        let enabled = crate::journal::State::replay(&[JournalEvent::ControlApplied {
            operation: annal_schema::ControlOperation::Enable,
            caller: CallerKind::OwnerCli,
        }]);
        state.adopt(enabled.clone());
        assert_eq!(state.projection, enabled);
    }

    #[test]
    fn the_state_file_is_shown_while_no_key_loads_but_never_opens_capture() {
        let mut state = State::default();
        state.admit(true, true);
        state.show_mirror(StateMirror {
            enabled: true,
            paused: false,
        });
        assert!(state.projection.enabled && !state.projection.paused);
        assert!(!state.accepting(), "no writer is open");
    }
}
