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
//! The window is per child: annal's children are independent (a failing query never restarts
//! the writer), so one child's crash loop does not spend another's budget. After
//! [`Decision::GiveUp`] the shell records `RestartLimitReached`, and health shows the child's
//! down category (`writer_stopped` for the writer) until the child is started afresh.

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
