//! The supervisor's restart decision: OTP restart intensity as a sliding window, with time
//! injected.
//!
//! Erlang/OTP's rule: a supervisor allows at most `intensity` restarts within any `period`; a
//! restart that would make more than `intensity` restarts within the last `period` (the new one
//! included) is refused and the supervisor gives up. A restart exactly `period` ago still counts
//! (OTP keeps every restart at or after `now - period`). [`decide`] is that rule over
//! millisecond timestamps, and [`restart_history`] derives a child's earlier restarts from the
//! persisted [`Signal`]s, so the decision survives a process restart: a writer that crash-loops
//! across daemon restarts is still given up on.
//!
//! The window is per child, so one child's crash loop does not spend another's budget. After
//! [`Decision::GiveUp`] the shell records `RestartLimitReached`, and health shows the child's
//! down category (`writer_stopped` for the writer) until the child is started afresh.
//!
//! # Strategy: `rest_for_one` over declared dependencies
//!
//! Each child declares the children it holds a reference to from its start
//! ([`depends_on`]); every dependency comes earlier in the start order ([`Child::ALL`]). A
//! failure restarts the failed child and every child that depends on it, directly or through
//! another, in start order, after stopping those dependents in reverse start order: OTP's
//! `rest_for_one` ([`STRATEGY`]), where "the rest" is the failed child's dependents rather than
//! every later sibling. So a failing Query restarts the Writer (which tells it of every append)
//! but not the PolicyGate (whose paging cursors survive), and a failing Writer restarts nothing
//! else (the Ingress is handed each writer generation by message). [`plan`] is the whole
//! decision, pure: which children to stop, which to start, which stay down; the actor shell
//! carries it out and keeps no rule of its own per child.
//!
//! A child that is given up on stays down, and so does every dependent that
//! [`requires`] it (cannot run without it); a dependent that only uses it (the Writer without a
//! Query: history is still written, reads answer `storage_unavailable`) is started without it.

use std::time::Duration;

use crate::health::{Child, Signal, SignalKind};

/// Default most restarts allowed within [`RESTART_WINDOW_SECS`].
pub const MAX_RESTARTS: u32 = 5;

/// Default length of the restart window, in seconds.
pub const RESTART_WINDOW_SECS: u64 = 30;

/// How many restarts a child may have within which window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RestartPolicy {
    /// Most restarts allowed within `window` (OTP's intensity); 0 means never restart.
    pub max_restarts: u32,
    /// The sliding window (OTP's period).
    pub window: Duration,
}

impl Default for RestartPolicy {
    /// [`MAX_RESTARTS`] within [`RESTART_WINDOW_SECS`].
    fn default() -> Self {
        Self {
            max_restarts: MAX_RESTARTS,
            window: Duration::from_secs(RESTART_WINDOW_SECS),
        }
    }
}

/// What the supervisor does about a failed child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Restart it.
    Restart,
    /// Stop restarting it: the intensity is exceeded.
    GiveUp,
}

/// Whether a child that just failed at `now_ms` may be restarted, given the times of its
/// earlier restarts (in any order): give up when this restart would make more than
/// `policy.max_restarts` restarts within the last `policy.window`. A restart at or after
/// `now_ms - window` counts; one stamped after `now_ms` (a clock that went backwards) counts
/// too, so a clock change can only make the supervisor give up sooner, never restart forever.
pub fn decide(previous_restarts_ms: &[u64], now_ms: u64, policy: &RestartPolicy) -> Decision {
    let window_ms = crate::clock::millis(policy.window);
    let within = previous_restarts_ms
        .iter()
        .filter(|at| now_ms.saturating_sub(**at) <= window_ms)
        .count();
    // This restart plus the earlier ones still in the window.
    let restarts = u64::try_from(within).unwrap_or(u64::MAX).saturating_add(1);
    if restarts > u64::from(policy.max_restarts) {
        Decision::GiveUp
    } else {
        Decision::Restart
    }
}

/// The restart strategies a supervisor can follow (OTP's names). annal's is [`STRATEGY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Restart the failed child and every child that depends on it (see the module doc).
    RestForOne,
}

/// The strategy annal's supervisor follows.
pub const STRATEGY: Strategy = Strategy::RestForOne;

/// The children `child` holds a reference to from its start, so must be restarted with: a
/// restarted dependency would leave it talking to the dead generation. Every child named comes
/// earlier in [`Child::ALL`].
pub const fn depends_on(child: Child) -> &'static [Child] {
    match child {
        // The Ingress is handed each writer generation by message; the Journal is opened by
        // each writer generation with the keys it loaded.
        Child::KeyCustody | Child::AuditJournal | Child::Ingress => &[],
        Child::Query => &[Child::KeyCustody, Child::AuditJournal],
        Child::PolicyGate => &[Child::KeyCustody],
        Child::Writer => &[Child::KeyCustody, Child::AuditJournal, Child::Query],
    }
}

/// The subset of [`depends_on`] that `child` cannot run without: it stays down while one of
/// these is down. The Writer uses the Query (to tell it of appends) but does not need it.
pub const fn requires(child: Child) -> &'static [Child] {
    match child {
        Child::Writer => &[Child::KeyCustody, Child::AuditJournal],
        other => depends_on(other),
    }
}

/// Whether `child` depends on `on`, directly or through another child.
pub fn depends_transitively(child: Child, on: Child) -> bool {
    depends_on(child)
        .iter()
        .any(|&direct| direct == on || depends_transitively(direct, on))
}

/// What the supervisor does about one failed child: the whole of [`STRATEGY`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartPlan {
    /// Whether the failed child itself is restarted or given up on.
    pub decision: Decision,
    /// Running dependents to stop on purpose first, in reverse start order.
    pub stop: Vec<Child>,
    /// Children to start afterwards, in start order: the failed child (on a restart) and its
    /// dependents that can run.
    pub start: Vec<Child>,
    /// Children newly down for good: the failed child on a give-up, and each dependent that
    /// [`requires`] a child that is down.
    pub down: Vec<Child>,
}

/// The plan for `failed`, which failed at `now_ms` after the restarts in `failed_history`
/// (its [`RestartHistories::of`]), when the children in `already_down` were given up on
/// earlier (they are neither stopped nor started).
pub fn plan(
    failed: Child,
    failed_history: &[u64],
    now_ms: u64,
    policy: &RestartPolicy,
    already_down: &[Child],
) -> RestartPlan {
    let decision = decide(failed_history, now_ms, policy);
    let dependents: Vec<Child> = Child::ALL
        .into_iter()
        .filter(|&child| child != failed && depends_transitively(child, failed))
        .collect();
    let stop = dependents
        .iter()
        .rev()
        .copied()
        .filter(|child| !already_down.contains(child))
        .collect();
    let mut is_down: Vec<Child> = already_down.to_vec();
    let mut down = Vec::new();
    if decision == Decision::GiveUp {
        is_down.push(failed);
        down.push(failed);
    }
    let mut start = Vec::new();
    let candidates = std::iter::once(failed)
        .filter(|_| decision == Decision::Restart)
        .chain(dependents);
    for child in candidates {
        if is_down.contains(&child) {
            continue;
        }
        if requires(child)
            .iter()
            .any(|needed| is_down.contains(needed))
        {
            is_down.push(child);
            down.push(child);
        } else {
            start.push(child);
        }
    }
    start.sort_by_key(|child| start_position(*child));
    RestartPlan {
        decision,
        stop,
        start,
        down,
    }
}

/// `child`'s place in the start order.
fn start_position(child: Child) -> usize {
    Child::ALL
        .iter()
        .position(|c| *c == child)
        .unwrap_or(Child::ALL.len())
}

/// The times of `child`'s restarts in `signals` (journal order) since its last give-up: a
/// `RestartLimitReached` ends an episode, and what follows it is a fresh start decided above
/// the supervisor. A `ChildStarted` does not reset the history (every process start records
/// one, and a crash loop across process restarts must still be caught).
pub fn restart_history(signals: &[Signal], child: Child) -> Vec<u64> {
    let mut histories = RestartHistories::default();
    for signal in signals {
        histories.note(signal);
    }
    histories.of(child).to_vec()
}

/// Every child's [`restart_history`], kept as signals arrive (the journal's projection holds
/// this, not the signals).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct RestartHistories(std::collections::BTreeMap<Child, Vec<u64>>);

impl RestartHistories {
    /// Takes one signal in (journal order): a restart is remembered, a give-up ends the episode.
    pub fn note(&mut self, signal: &Signal) {
        match signal.kind {
            SignalKind::ChildRestarted { child } => {
                self.0.entry(child).or_default().push(signal.at_ms);
            }
            SignalKind::RestartLimitReached { child } => {
                self.0.remove(&child);
            }
            _ => {}
        }
    }

    /// `child`'s restart times since its last give-up, oldest first.
    pub fn of(&self, child: Child) -> &[u64] {
        self.0.get(&child).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{FailureCategory, HealthInputs, replay};
    use annal_schema::HealthCategory;

    const SEC_MS: u64 = 1_000;

    fn policy(max_restarts: u32, window_secs: u64) -> RestartPolicy {
        RestartPolicy {
            max_restarts,
            window: Duration::from_secs(window_secs),
        }
    }

    use Child::{AuditJournal, Ingress, KeyCustody, PolicyGate, Query, Writer};

    /// One row of the strategy table: the failed child, then what a restart and a give-up do.
    struct Row {
        failed: Child,
        stop: &'static [Child],
        restart_starts: &'static [Child],
        give_up_starts: &'static [Child],
        give_up_down: &'static [Child],
    }

    const TABLE: [Row; 6] = [
        Row {
            failed: KeyCustody,
            stop: &[Writer, PolicyGate, Query],
            restart_starts: &[KeyCustody, Query, PolicyGate, Writer],
            give_up_starts: &[],
            give_up_down: &[KeyCustody, Query, PolicyGate, Writer],
        },
        Row {
            failed: AuditJournal,
            stop: &[Writer, Query],
            restart_starts: &[AuditJournal, Query, Writer],
            give_up_starts: &[],
            give_up_down: &[AuditJournal, Query, Writer],
        },
        Row {
            failed: Query,
            stop: &[Writer],
            restart_starts: &[Query, Writer],
            // History is still written without the Query; only reads are down.
            give_up_starts: &[Writer],
            give_up_down: &[Query],
        },
        Row {
            failed: PolicyGate,
            stop: &[],
            restart_starts: &[PolicyGate],
            give_up_starts: &[],
            give_up_down: &[PolicyGate],
        },
        Row {
            failed: Writer,
            stop: &[],
            restart_starts: &[Writer],
            give_up_starts: &[],
            give_up_down: &[Writer],
        },
        Row {
            failed: Ingress,
            stop: &[],
            restart_starts: &[Ingress],
            give_up_starts: &[],
            give_up_down: &[Ingress],
        },
    ];

    #[test]
    fn the_strategy_table_over_all_six_children() {
        assert_eq!(STRATEGY, Strategy::RestForOne);
        let policy = RestartPolicy::default();
        let exhausted = [1, 2, 3, 4, 5].map(|s| s * SEC_MS);
        for row in TABLE {
            // Given no earlier restart, when the child fails, then it and its dependents restart.
            let restart = plan(row.failed, &[], 6 * SEC_MS, &policy, &[]);
            assert_eq!(
                restart,
                RestartPlan {
                    decision: Decision::Restart,
                    stop: row.stop.to_vec(),
                    start: row.restart_starts.to_vec(),
                    down: Vec::new(),
                },
                "restart of {:?}",
                row.failed
            );
            // Given five restarts in the window, when it fails again, then it stays down with
            // every dependent that requires it.
            let give_up = plan(row.failed, &exhausted, 6 * SEC_MS, &policy, &[]);
            assert_eq!(
                give_up,
                RestartPlan {
                    decision: Decision::GiveUp,
                    stop: row.stop.to_vec(),
                    start: row.give_up_starts.to_vec(),
                    down: row.give_up_down.to_vec(),
                },
                "give-up of {:?}",
                row.failed
            );
        }
    }

    #[test]
    fn every_dependency_starts_earlier_and_requirements_are_dependencies() {
        for child in Child::ALL {
            for dependency in depends_on(child) {
                assert!(
                    start_position(*dependency) < start_position(child),
                    "{child:?} depends on {dependency:?}, which starts later"
                );
            }
            for needed in requires(child) {
                assert!(depends_on(child).contains(needed));
            }
        }
    }

    #[test]
    fn a_child_given_up_earlier_is_neither_stopped_nor_started() {
        // Given the Query was given up on, when the Journal fails, then the Writer restarts
        // with the Journal and the Query stays down.
        let restart = plan(AuditJournal, &[], 0, &RestartPolicy::default(), &[Query]);
        assert_eq!(restart.stop, [Writer]);
        assert_eq!(restart.start, [AuditJournal, Writer]);
        assert!(restart.down.is_empty());
        // Given key custody is down, when the Writer fails, then it cannot come back.
        let stuck = plan(Writer, &[], 0, &RestartPolicy::default(), &[KeyCustody]);
        assert_eq!(stuck.decision, Decision::Restart);
        assert!(stuck.start.is_empty());
        assert_eq!(stuck.down, [Writer]);
    }

    #[test]
    fn defaults_are_the_named_consts() {
        assert_eq!(RestartPolicy::default(), policy(5, 30));
    }

    #[test]
    fn first_failure_restarts() {
        assert_eq!(decide(&[], 0, &policy(5, 30)), Decision::Restart);
    }

    #[test]
    fn restarts_within_window_restart() {
        // Four earlier restarts plus this one make five: allowed.
        let earlier = [1, 2, 3, 4].map(|s| s * SEC_MS);
        assert_eq!(
            decide(&earlier, 5 * SEC_MS, &policy(5, 30)),
            Decision::Restart
        );
    }

    #[test]
    fn one_too_many_within_window_gives_up() {
        let earlier = [1, 2, 3, 4, 5].map(|s| s * SEC_MS);
        assert_eq!(
            decide(&earlier, 6 * SEC_MS, &policy(5, 30)),
            Decision::GiveUp
        );
    }

    #[test]
    fn old_restarts_age_out_of_the_window() {
        let earlier = [1, 2, 3, 4, 5].map(|s| s * SEC_MS);
        // At 32 s the restart at 1 s is 31 s old and out; 2..5 remain: 4 + 1 = 5, allowed.
        assert_eq!(
            decide(&earlier, 32 * SEC_MS, &policy(5, 30)),
            Decision::Restart
        );
        // At 36 s every earlier restart is 31..35 s old: all out, so even an intensity of 1
        // allows this one.
        assert_eq!(
            decide(&earlier, 36 * SEC_MS, &policy(1, 30)),
            Decision::Restart
        );
    }

    #[test]
    fn a_restart_exactly_window_ago_still_counts() {
        let earlier = [1, 2, 3, 4, 5].map(|s| s * SEC_MS);
        // At 31 s the restart at 1 s is exactly 30 s old: it counts (OTP), so 6 > 5.
        assert_eq!(
            decide(&earlier, 31 * SEC_MS, &policy(5, 30)),
            Decision::GiveUp
        );
        // One millisecond later it is out.
        assert_eq!(
            decide(&earlier, 31 * SEC_MS + 1, &policy(5, 30)),
            Decision::Restart
        );
    }

    #[test]
    fn zero_intensity_never_restarts() {
        assert_eq!(decide(&[], 10, &policy(0, 30)), Decision::GiveUp);
    }

    #[test]
    fn zero_window_counts_only_restarts_at_the_same_instant() {
        assert_eq!(decide(&[9], 10, &policy(1, 0)), Decision::Restart);
        assert_eq!(decide(&[10], 10, &policy(1, 0)), Decision::GiveUp);
    }

    #[test]
    fn restarts_stamped_in_the_future_count() {
        // The wall clock went backwards: the earlier restarts look newer than now.
        let earlier = [100, 101, 102, 103, 104].map(|s| s * SEC_MS);
        assert_eq!(
            decide(&earlier, 50 * SEC_MS, &policy(5, 30)),
            Decision::GiveUp
        );
    }

    #[test]
    fn order_of_history_does_not_matter() {
        let earlier = [5, 1, 4, 2, 3].map(|s| s * SEC_MS);
        assert_eq!(
            decide(&earlier, 6 * SEC_MS, &policy(5, 30)),
            Decision::GiveUp
        );
    }

    #[test]
    fn a_huge_window_keeps_everything() {
        let forever = RestartPolicy {
            max_restarts: 2,
            window: Duration::MAX,
        };
        assert_eq!(decide(&[0, 1], u64::MAX, &forever), Decision::GiveUp);
    }

    fn signal(at_s: u64, kind: SignalKind) -> Signal {
        Signal {
            at_ms: at_s * SEC_MS,
            kind,
        }
    }

    #[test]
    fn history_is_per_child_and_survives_process_starts() {
        let w = Child::Writer;
        let signals = [
            signal(0, SignalKind::ChildStarted { child: w }),
            signal(1, SignalKind::ChildRestarted { child: w }),
            signal(
                2,
                SignalKind::ChildRestarted {
                    child: Child::Query,
                },
            ),
            // The process restarted: every child starts again.
            signal(3, SignalKind::ChildStarted { child: w }),
            signal(4, SignalKind::ChildRestarted { child: w }),
        ];
        assert_eq!(restart_history(&signals, w), [SEC_MS, 4 * SEC_MS]);
        assert_eq!(restart_history(&signals, Child::Query), [2 * SEC_MS]);
        assert!(restart_history(&signals, Child::Ingress).is_empty());
    }

    #[test]
    fn a_give_up_ends_the_episode() {
        let w = Child::Writer;
        let signals = [
            signal(1, SignalKind::ChildRestarted { child: w }),
            signal(2, SignalKind::RestartLimitReached { child: w }),
            signal(3, SignalKind::ChildStarted { child: w }),
            signal(4, SignalKind::ChildRestarted { child: w }),
        ];
        assert_eq!(restart_history(&signals, w), [4 * SEC_MS]);
    }

    /// The shell's loop, with injected time: fail, decide from the persisted signals, record.
    fn crash_loop(signals: &mut Vec<Signal>, child: Child, times_s: &[u64]) -> Vec<Decision> {
        let policy = RestartPolicy::default();
        let mut decisions = Vec::new();
        for &at in times_s {
            signals.push(signal(
                at,
                SignalKind::ChildFailed {
                    child,
                    category: FailureCategory::for_crash(child),
                },
            ));
            let decision = decide(&restart_history(signals, child), at * SEC_MS, &policy);
            signals.push(signal(
                at,
                match decision {
                    Decision::Restart => SignalKind::ChildRestarted { child },
                    Decision::GiveUp => SignalKind::RestartLimitReached { child },
                },
            ));
            decisions.push(decision);
        }
        decisions
    }

    #[test]
    fn a_crash_loop_gives_up_and_health_says_writer_stopped() {
        let ready = HealthInputs {
            admitted: true,
            enabled: true,
            ..HealthInputs::default()
        };
        let mut signals = vec![signal(
            0,
            SignalKind::ChildStarted {
                child: Child::Writer,
            },
        )];
        let decisions = crash_loop(&mut signals, Child::Writer, &[1, 2, 3, 4, 5]);
        assert!(decisions.iter().all(|d| *d == Decision::Restart));
        assert_eq!(replay(ready, &signals), HealthCategory::Ready);
        // The process restarts here; the persisted signals still know the last five restarts.
        signals.push(signal(
            6,
            SignalKind::ChildStarted {
                child: Child::Writer,
            },
        ));
        let decisions = crash_loop(&mut signals, Child::Writer, &[7]);
        assert_eq!(decisions, [Decision::GiveUp]);
        assert_eq!(replay(ready, &signals), HealthCategory::WriterStopped);
        // An owner-initiated fresh start clears it and starts a new episode.
        signals.push(signal(
            60,
            SignalKind::ChildStarted {
                child: Child::Writer,
            },
        ));
        assert_eq!(replay(ready, &signals), HealthCategory::Ready);
        assert!(restart_history(&signals, Child::Writer).is_empty());
    }

    #[test]
    fn a_slow_failure_rate_restarts_forever() {
        let mut signals = Vec::new();
        let times: Vec<u64> = (1..=100).map(|i| i * 7).collect();
        let decisions = crash_loop(&mut signals, Child::Ingress, &times);
        assert!(decisions.iter().all(|d| *d == Decision::Restart));
    }
}
