//! [`Widenings`]: what a journal commit that could not be made durable leaves in effect.
//!
//! A control operation or a policy change returns after its journal records are durable; when
//! the append or the `fsync` fails, the caller is told the change failed. The rule, in one
//! place, so the journal actor, the writer and the gate agree:
//!
//! - **A failed commit never widens** what is captured or what agents may read (`enable`,
//!   `resume`, a longer retention, a larger quota or another quota mode, a grant, agents
//!   switched back on, the owner's `access` events switched back on). Those events are
//!   withdrawn: out of the projection and out of the
//!   events held for the next append. The caller was told no, so the change must not happen
//!   behind their back later.
//! - **A narrowing or neutral event stays** (`disable`, `pause`, a shorter retention, a smaller
//!   quota, a revocation, agents switched off, the owner's `access` events switched off, audit
//!   records, signals): in effect at once, held
//!   and appended again until durable (the outbox's at-least-once). Capture stops on a failed
//!   `disable` instead of going on while status says it stopped.
//! - **A withdrawn event may be on disk all the same**: a failed `fsync` does not unwrite what
//!   `write` gave the kernel, and a later open replays it. So each withdrawn event's undo
//!   (events restoring the state before it, issued by the engine, `CallerKind::Daemon`) is
//!   held behind it, with a higher sequence: replayed after the withdrawn record if that one
//!   survived, a no-op if it did not.

use super::outbox::Outbox;
use super::schema::{CallerKind, JournalEvent};
use super::state::State;
use annal_schema::ControlOperation;

/// The widening events of a commit in progress and their undo: noted as the journal applies
/// each event, used only if the commit fails ([`Widenings::withdraw`]). Judging each event
/// against the projection right before it is exact for a commit of several events, and needs
/// no copy of the projection.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Widenings {
    /// The commit's widening events, in commit order, each with the events that restore the
    /// projection before it.
    noted: Vec<(JournalEvent, Vec<JournalEvent>)>,
}

impl Widenings {
    /// Notes `event`, about to be applied to `before` (the projection right before it).
    pub fn note(&mut self, before: &State, event: &JournalEvent) {
        if let Some(undo) = undo_widening(before, event) {
            self.noted.push((event.clone(), undo));
        }
    }

    /// Whether the commit widens anything (only then does a failure change what it left).
    pub fn is_empty(&self) -> bool {
        self.noted.is_empty()
    }

    /// The commit failed: takes its widening events back out of the events `outbox` holds for
    /// the next append, restores `state` (the undo applied newest first, each an assignment
    /// of what the event changed, so what the narrowing events did stays) and holds the undo
    /// behind everything else, to be appended like any event.
    pub fn withdraw(self, state: &mut State, outbox: &mut Outbox) {
        let (withdrawn, undo): (Vec<_>, Vec<_>) = self.noted.into_iter().unzip();
        outbox.withdraw(&withdrawn);
        let undo: Vec<JournalEvent> = undo.into_iter().rev().flatten().collect();
        for event in &undo {
            state.apply(event);
        }
        outbox.hold(undo);
    }
}

/// When `event` widens capture or reading against `state` (the state before it): the events
/// that restore `state`. `None` when it narrows them or leaves them alone.
fn undo_widening(state: &State, event: &JournalEvent) -> Option<Vec<JournalEvent>> {
    let by_engine = CallerKind::Daemon;
    let control = |operation| {
        Some(vec![JournalEvent::ControlApplied {
            operation,
            caller: by_engine,
        }])
    };
    match event {
        // Enable is decided only while disabled (and then not paused: a disable clears it).
        JournalEvent::ControlApplied {
            operation: ControlOperation::Enable,
            ..
        } if !state.enabled => control(ControlOperation::Disable),
        JournalEvent::ControlApplied {
            operation: ControlOperation::Resume,
            ..
        } if state.enabled && state.paused => control(ControlOperation::Pause),
        JournalEvent::RetentionSet { days, .. } if *days > state.retention_days => {
            Some(vec![JournalEvent::RetentionSet {
                days: state.retention_days,
                caller: by_engine,
            }])
        }
        JournalEvent::QuotaSet {
            bytes, on_quota, ..
        } if *bytes > state.quota_bytes || *on_quota != state.on_quota => {
            Some(vec![JournalEvent::QuotaSet {
                bytes: state.quota_bytes,
                on_quota: state.on_quota,
                caller: by_engine,
            }])
        }
        JournalEvent::Policy(event) => state
            .policy
            .undo_widening(event)
            .map(|undo| undo.into_iter().map(JournalEvent::Policy).collect()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{ActorId, GrantSource, Operation, PolicyEvent};
    use crate::test_strategies;
    use proptest::prelude::*;

    fn control(operation: ControlOperation) -> JournalEvent {
        JournalEvent::ControlApplied {
            operation,
            caller: CallerKind::OwnerCli,
        }
    }

    fn grant(actor: &str, operation: Operation, issued_at_ms: u64) -> JournalEvent {
        JournalEvent::Policy(PolicyEvent::GrantIssued {
            actor: ActorId::new(actor).unwrap(),
            operation,
            source: GrantSource::Owner,
            issued_at_ms,
            expires_at_ms: issued_at_ms + 3_600_000,
            idle_timeout_ms: 600_000,
        })
    }

    /// Notes and applies `events` as the journal does for a commit, holds them, and rolls the
    /// commit back as failed. Returns the state and what stays held.
    fn fail(before: &State, events: &[JournalEvent]) -> (State, Vec<JournalEvent>) {
        let (state, held, _) = fail_withdrawing(before, events);
        (state, held)
    }

    /// [`fail`], also returning the events withdrawn.
    fn fail_withdrawing(
        before: &State,
        events: &[JournalEvent],
    ) -> (State, Vec<JournalEvent>, Vec<JournalEvent>) {
        let mut state = before.clone();
        let mut widenings = Widenings::default();
        for event in events {
            widenings.note(&state, event);
            state.apply(event);
        }
        let mut outbox = Outbox::default();
        outbox.hold(events.to_vec());
        let withdrawn = widenings
            .noted
            .iter()
            .map(|(event, _)| event.clone())
            .collect();
        widenings.withdraw(&mut state, &mut outbox);
        (state, outbox.held().to_vec(), withdrawn)
    }

    #[test]
    fn a_failed_enable_is_withdrawn_and_undone_by_the_engine() {
        let before = State::default();
        let (state, held) = fail(&before, &[control(ControlOperation::Enable)]);
        assert_eq!(state, before);
        assert_eq!(
            held,
            [JournalEvent::ControlApplied {
                operation: ControlOperation::Disable,
                caller: CallerKind::Daemon,
            }]
        );
    }

    #[test]
    fn a_failed_disable_or_pause_stays_in_effect_and_held() {
        let enabled = State::replay(&[control(ControlOperation::Enable)]);
        for narrowing in [ControlOperation::Disable, ControlOperation::Pause] {
            let (state, held) = fail(&enabled, &[control(narrowing)]);
            let mut expected = enabled.clone();
            expected.apply(&control(narrowing));
            assert_eq!(state, expected, "{narrowing:?}");
            assert_eq!(held, [control(narrowing)], "{narrowing:?}");
        }
    }

    #[test]
    fn a_failed_grant_restores_the_actors_policy_exactly() {
        let a = || ActorId::new("a").unwrap();
        // No grant before: the grant alone goes, the actor is not marked revoked.
        let other = grant("a", Operation::Status, 1_000);
        let before = State::replay(std::slice::from_ref(&other));
        let (state, held) = fail(&before, &[grant("a", Operation::Query, 2_000)]);
        assert_eq!(state, before);
        assert!(!state.policy.is_revoked(&a()));
        assert!(state.policy.grant(&a(), Operation::Status).is_some());
        assert_eq!(
            held,
            [JournalEvent::Policy(PolicyEvent::GrantWithdrawn {
                actor: a(),
                operation: Operation::Query,
            })]
        );
        // An earlier grant for the operation comes back with its own terms and idle clock.
        let before = State::replay(&[grant("a", Operation::Query, 1_000)]);
        let (state, _) = fail(&before, &[grant("a", Operation::Query, 5_000)]);
        assert_eq!(state, before);
        // A revoked actor is revoked again.
        let before = State::replay(&[
            grant("a", Operation::Query, 1_000),
            JournalEvent::Policy(PolicyEvent::ActorRevoked { actor: a() }),
        ]);
        let (state, held) = fail(
            &before,
            &[
                grant("a", Operation::Query, 5_000),
                grant("a", Operation::Status, 5_000),
            ],
        );
        assert_eq!(state, before);
        assert!(state.policy.is_revoked(&a()));
        assert_eq!(held.len(), 2, "{held:?}");
    }

    #[test]
    fn neutral_and_narrowing_settings_stay_and_widening_ones_go() {
        let before = State::default();
        let shorter = JournalEvent::RetentionSet {
            days: before.retention_days - 1,
            caller: CallerKind::OwnerCli,
        };
        let longer = JournalEvent::RetentionSet {
            days: before.retention_days + 1,
            caller: CallerKind::OwnerCli,
        };
        let drops = JournalEvent::DropsRecorded { count: 3 };
        let (state, held) = fail(&before, &[shorter.clone(), drops.clone()]);
        assert_eq!(state.retention_days, before.retention_days - 1);
        assert_eq!(state.dropped_total, 3);
        assert_eq!(held, [shorter, drops]);
        let (state, held) = fail(&before, &[longer]);
        assert_eq!(state, before);
        assert_eq!(
            held,
            [JournalEvent::RetentionSet {
                days: before.retention_days,
                caller: CallerKind::Daemon,
            }]
        );
    }

    #[test]
    fn withdrawing_takes_the_newest_held_copy_only() {
        let enable = control(ControlOperation::Enable);
        let mut outbox = Outbox::default();
        outbox.hold([
            enable.clone(),
            JournalEvent::DropsRecorded { count: 1 },
            enable.clone(),
        ]);
        outbox.withdraw(std::slice::from_ref(&enable));
        assert_eq!(
            outbox.held(),
            [enable.clone(), JournalEvent::DropsRecorded { count: 1 }]
        );
        outbox.withdraw(&[JournalEvent::DropsRecorded { count: 2 }]);
        assert_eq!(outbox.held().len(), 2, "an event not held is left alone");
    }

    /// Journal events whose policy events name one of two actors, so that grants,
    /// revocations and withdrawals of the same actor meet.
    fn event_of_two_actors() -> impl Strategy<Value = JournalEvent> {
        (test_strategies::event(), any::<bool>()).prop_map(|(event, first)| {
            let name = ActorId::new(if first { "a" } else { "b" }).unwrap();
            match event {
                JournalEvent::Policy(PolicyEvent::GrantIssued {
                    operation,
                    source,
                    issued_at_ms,
                    expires_at_ms,
                    idle_timeout_ms,
                    ..
                }) => JournalEvent::Policy(PolicyEvent::GrantIssued {
                    actor: name,
                    operation,
                    source,
                    issued_at_ms,
                    expires_at_ms,
                    idle_timeout_ms,
                }),
                JournalEvent::Policy(PolicyEvent::GrantWithdrawn { operation, .. }) => {
                    JournalEvent::Policy(PolicyEvent::GrantWithdrawn {
                        actor: name,
                        operation,
                    })
                }
                JournalEvent::Policy(PolicyEvent::ActorRevoked { .. }) => {
                    JournalEvent::Policy(PolicyEvent::ActorRevoked { actor: name })
                }
                other => other,
            }
        })
    }

    proptest! {
        /// Whatever the state and the failed commit: what it widened is gone from the state
        /// and from what is held, what it narrowed stays, and a later replay gives the same
        /// state whether or not the failed records reached the disk.
        #[test]
        fn a_failed_commit_never_widens_and_replays_the_same_whether_or_not_it_was_written(
            history in proptest::collection::vec(event_of_two_actors(), 0..24),
            commit in proptest::collection::vec(event_of_two_actors(), 1..4),
        ) {
            let before = State::replay(&history);
            // An idle clock past the grant's end cannot come from a real allowed call.
            prop_assume!(before.policy.grants().all(|(_, _, g)| g.last_used_ms <= g.expires_at_ms));
            let (state, held, withdrawn) = fail_withdrawing(&before, &commit);
            prop_assert!(!state.enabled || before.enabled);
            prop_assert!(state.paused || !before.paused || !state.enabled);
            prop_assert!(state.retention_days <= before.retention_days);
            prop_assert!(state.quota_bytes <= before.quota_bytes);
            prop_assert_eq!(state.on_quota, before.on_quota);
            prop_assert!(!state.policy.agents_enabled() || before.policy.agents_enabled());
            for (actor, operation, _) in state.policy.grants() {
                prop_assert_eq!(
                    state.policy.grant(actor, operation),
                    before.policy.grant(actor, operation),
                    "a grant the failed commit issued is in effect"
                );
            }
            // The held events are appended after the failed ones: these reached the disk or not
            // (what stays held is appended again whichever: at least once).
            let lost: Vec<JournalEvent> = history.iter().chain(&held).cloned().collect();
            let written: Vec<JournalEvent> =
                history.iter().chain(&withdrawn).chain(&held).cloned().collect();
            prop_assert_eq!(&State::replay(&lost), &state);
            prop_assert_eq!(&State::replay(&written), &state);
        }
    }
}
